// The aligned table util and the discovery report.
#include <gtest/gtest.h>

#include "fact/discover/report.hpp"
#include "fact/util/table.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using testing::gemms;

using util::Table;

TEST(Table, AlignsColumnsByDisplayWidth) {
  Table t({{"#", Table::Align::Right}, {"name"}, {"µs", Table::Align::Right}, {"note"}});
  t.add_row({"1", "gemm", "12.5", "ok"});
  t.add_separator();
  t.add_row({"10", "attention_causal", "3.0"});
  EXPECT_EQ(t.row_count(), 2u);
  EXPECT_EQ(t.render(),
            " #  name                µs  note\n"
            "--  ----------------  ----  ----\n"
            " 1  gemm              12.5  ok\n"
            "--  ----------------  ----  ----\n"
            "10  attention_causal   3.0\n");
  EXPECT_THROW(t.add_row({"1", "2", "3", "4", "5"}), std::invalid_argument);
  EXPECT_EQ(util::display_width("µs"), 2u);
  EXPECT_EQ(util::format_fixed(2.25, 1), "2.2");
}

TEST(Report, TableListsMatchesKernelsAndDeclines) {
  auto g = testing::load_fixture("mingpt_block_fp32.json");
  DiscoverOptions options;
  options.precision = core::PrecisionMode::Native;
  auto d = discover(g, options);
  const std::string text = discovery_table(d, g, options);
  EXPECT_NE(text.find("MinGPTBlock (torch.export), 34 captured nodes"), std::string::npos);
  EXPECT_NE(text.find("precision native"), std::string::npos);
  EXPECT_NE(text.find("declined #4 attention_causal [split..contiguous (17)]: float32 attention"), std::string::npos)
      << text;
  EXPECT_NE(text.find("declined #1 gemm_bias_gelu_tanh [linear_2..mul_4 (9)]: a float32 GEMM in a native run "
                      "stays PyTorch's"),
            std::string::npos);
  // The legend explains the class column and the µs columns.
  EXPECT_NE(text.find("class: REUSE = a tuned configuration"), std::string::npos) << text;
  EXPECT_NE(text.find("ADAPT = a FACT template covers it"), std::string::npos);
  EXPECT_NE(text.find("NEW = no template yet"), std::string::npos);
  EXPECT_NE(text.find("roofline estimates from the device profile (H100 SXM (defaults))"), std::string::npos);

  options.precision = core::PrecisionMode::Strict;
  d = discover(g, options);
  const std::string strict = discovery_table(d, g, options);
  EXPECT_NE(strict.find("1a    gemm_bias_gelu_tanh"), std::string::npos) << strict;
  EXPECT_NE(strict.find("1b    gemm_bias_residual"), std::string::npos);
  EXPECT_NE(strict.find("fp32 (3xTF32)"), std::string::npos);
  // The attention runs the 3xTF32 float32 kernel in strict: accepted, nothing declined.
  EXPECT_EQ(strict.find("declined #"), std::string::npos) << strict;
  EXPECT_NE(strict.find("attention_causal       attention  split..contiguous (17)  128x8x512xd96   fp32 (3xTF32)"),
            std::string::npos)
      << strict;
}

// A match accepted with no estimated saving says so, and the note says why it stays accepted.
TEST(Report, AcceptedMatchWithoutSavingIsExplained) {
  auto g = testing::load_fixture("mingpt_block_bf16.json");
  DiscoverOptions options;
  auto d = discover(g, options);
  const std::string text = discovery_table(d, g, options);
  size_t tie = d.matches.size();
  for (size_t i = 0; i < d.matches.size(); ++i) {
    if (d.matches[i].status == MatchStatus::Accepted && d.matches[i].est_saved_us() < 0.05) tie = i;
  }
  ASSERT_LT(tie, d.matches.size()) << "the bf16 block's plain gemm_bias saves nothing by the estimate\n" << text;
  EXPECT_NE(text.find("accepted (no est. saving: note)"), std::string::npos) << text;
  EXPECT_NE(text.find("note: #" + std::to_string(tie + 1) + " save(s) no time by the estimate"), std::string::npos)
      << text;
  EXPECT_NE(text.find("unless it is faster"), std::string::npos);
}

TEST(Report, DiscoveryJsonTotals) {
  auto g = testing::load_fixture("mingpt_block_fp32.json");
  DiscoverOptions options;
  options.precision = core::PrecisionMode::Strict;
  auto d = discover(g, options);

  const auto j = discovery_to_json(d, g, options);
  EXPECT_EQ(j["schema"], "fact.discovery/1");
  EXPECT_EQ(j["matches"].size(), d.matches.size());
  EXPECT_EQ(j["totals"]["accepted"], 4);  // the QKV and output projections, the MLP, the attention
  EXPECT_EQ(j["device"]["bf16_flops"], options.device.bf16_flops);
}

TEST(Report, DeviceProfileJson) {
  DeviceProfile p;
  p.name = "H200";
  p.hbm_bytes_per_s = 4.2e12;
  auto back = device_profile_from_json(device_profile_to_json(p));
  EXPECT_EQ(back.name, "H200");
  EXPECT_DOUBLE_EQ(back.hbm_bytes_per_s, 4.2e12);
  auto partial = device_profile_from_json({{"bf16_flops", 9e14}, {"sm_count", 132}});
  EXPECT_DOUBLE_EQ(partial.bf16_flops, 9e14);
  EXPECT_DOUBLE_EQ(partial.tf32_flops, DeviceProfile{}.tf32_flops);
  EXPECT_THROW(device_profile_from_json({{"fp32_flops", "fast"}}), std::invalid_argument);
}

// REUSE / ADAPT / NEW have one definition: the terminal's legend prints classification_legend,
// the tuning database's or the registry's, whichever classified the run.
TEST(Report, TheLegendPrintsTheOneClassDefinition) {
  DiscoverOptions options;
  const std::string by_database = classification_legend(options);
  EXPECT_EQ(by_database.find('\n'), std::string::npos);
  EXPECT_NE(discovery_legend(options).find("class: " + by_database + "\n"), std::string::npos);
  options.registry = "/cache/registry/registry.json";
  options.arch = "sm_90a";
  const std::string by_registry = classification_legend(options);
  EXPECT_NE(by_registry, by_database);
  EXPECT_NE(by_registry.find("REUSE = an entry of the pattern registry"), std::string::npos) << by_registry;
  EXPECT_NE(by_registry.find("Registry /cache/registry/registry.json on sm_90a."), std::string::npos);
  EXPECT_NE(discovery_legend(options).find("class: " + by_registry), std::string::npos);
}

// The report's discovery table: Markdown rows, sub-rows per call, no reasons (they go to the
// report's "Left to PyTorch").
TEST(Report, MarkdownTablePointsDeclinesAtLeftToPyTorch) {
  auto g = testing::load_fixture("mingpt_block_fp32.json");
  DiscoverOptions options;
  options.precision = core::PrecisionMode::Native;
  const auto d = discover(g, options);
  const std::string md = discovery_markdown(d);
  EXPECT_EQ(md.rfind("| # | match | pattern |", 0), 0u) << md;
  EXPECT_NE(md.find("| declined (see *Left to PyTorch*) |"), std::string::npos) << md;
  EXPECT_EQ(md.find("stays PyTorch's"), std::string::npos) << md;  // the reason is not repeated here
  EXPECT_NE(md.find("\nAccepted: "), std::string::npos);
  size_t rows = 0;
  for (size_t at = md.find("\n| "); at != std::string::npos; at = md.find("\n| ", at + 1)) ++rows;
  size_t expected = 0;  // (the header starts the text, the separator row is "|---")
  for (const auto& m : d.matches) expected += 1 + (m.problems.size() > 1 ? m.problems.size() : 0);
  EXPECT_EQ(rows, expected) << md;
}

}  // namespace
}  // namespace fact::discover
