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
  options.precision = "native";
  auto d = discover(g, options);
  const std::string text = discovery_table(d, g, options);
  EXPECT_NE(text.find("MinGPTBlock (torch.export), 34 captured nodes"), std::string::npos);
  EXPECT_NE(text.find("precision native"), std::string::npos);
  EXPECT_NE(text.find("pending: no template yet (attention issue)"), std::string::npos);
  EXPECT_NE(text.find("declined #2 gemm_bias_gelu_tanh [linear_2..mul_4 (9)]: a float32 GEMM in a native run "
                      "stays PyTorch's"),
            std::string::npos);

  options.precision = "strict";
  d = discover(g, options);
  const std::string strict = discovery_table(d, g, options);
  EXPECT_NE(strict.find("1a    gemm_bias_gelu_tanh"), std::string::npos) << strict;
  EXPECT_NE(strict.find("1b    gemm_bias_residual"), std::string::npos);
  EXPECT_NE(strict.find("fp32 (3xTF32)"), std::string::npos);
  EXPECT_EQ(strict.find("declined #"), std::string::npos);

  const auto j = discovery_to_json(d, g, options);
  EXPECT_EQ(j["schema"], "fact.discovery/1");
  EXPECT_EQ(j["matches"].size(), d.matches.size());
  EXPECT_EQ(j["totals"]["accepted"], 3);
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

}  // namespace
}  // namespace fact::discover
