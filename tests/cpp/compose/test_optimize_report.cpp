// The optimize report (compose/optimize_report.hpp): roofline points from a plan's calls against
// a device profile, measured times from this run or the tuning database, and report.md's legend,
// kernel, roofline and tuning sections.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "fact/compose/optimize_report.hpp"
#include "fact/discover/discover.hpp"
#include "fact/discover/rank.hpp"
#include "fact/discover/report.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/problem/problem.hpp"

namespace fact::compose {
namespace {

using nlohmann::json;

// A plan (docs/plan.md, the fields the report reads) for the bf16 minGPT block's accepted matches.
json fixture_plan(const DeviceProfile& device) {
  const graph::Graph g =
      graph::load_graph(std::string(FACT_SOURCE_DIR) + "/tests/data/graphs/mingpt_block_bf16.json");
  discover::DiscoverOptions options;
  options.precision = core::PrecisionMode::Native;
  options.device = device;
  const discover::Discovery d = discover::discover(g, options);
  json replacements = json::array();
  for (size_t i = 0; i < d.matches.size(); ++i) {
    const discover::Match& m = d.matches[i];
    if (m.status != discover::MatchStatus::Accepted) continue;
    json r = {{"label", std::to_string(i + 1)}, {"rule", m.rule}, {"status", "planned"},
              {"classification", "ADAPT"}, {"calls", json::array()}};
    for (size_t c = 0; c < m.problems.size(); ++c) {
      const Problem& p = m.problems[c];
      r["calls"].push_back({{"kind", p.kind},
                            {"label", std::to_string(i + 1) + (m.problems.size() > 1 ? std::string(1, char('a' + c)) : "")},
                            {"summary", problem_summary(p)},
                            {"problem", problem_to_json(p)},
                            {"flops", kind_of(p).flops(p.desc)},
                            {"min_bytes", kind_of(p).min_bytes(p.desc)},
                            {"kernel", "k" + std::to_string(i) + std::to_string(c)},
                            {"config_source", "default"}});
    }
    replacements.push_back(std::move(r));
  }
  json kernels = json::object();
  for (const auto& r : replacements)
    for (const auto& call : r["calls"])
      kernels[call["kernel"].get<std::string>()] = {{"name", "kernel_" + call["label"].get<std::string>()},
                                                    {"status", "built"}};
  return {{"schema", "fact.plan/2"}, {"replacements", replacements}, {"kernels", kernels}};
}

TEST(OptimizeReport, RooflinePointsUseTheProfilesCeilingsAndNameTheLimit) {
  DeviceProfile device;  // H100 defaults: 750 TFLOP/s bf16, 3 TB/s
  const json plan = fixture_plan(device);
  const auto points = roofline_points(plan, device, core::PrecisionMode::Native, {});
  ASSERT_EQ(points.size(), 5u);  // 1a, 1b (the MLP), 2, 3, 4 (the attention is a call too)
  EXPECT_EQ(points[0].label, "1a");
  EXPECT_EQ(points[1].label, "1b");
  for (const RooflinePoint& p : points) {
    EXPECT_DOUBLE_EQ(p.compute_ceiling, device.bf16_flops) << p.label;  // bf16 GEMMs and attention: the bf16 rate
    EXPECT_DOUBLE_EQ(p.memory_ceiling, device.hbm_bytes_per_s);
    EXPECT_DOUBLE_EQ(p.ridge(), device.bf16_flops / device.hbm_bytes_per_s);
    EXPECT_EQ(p.limit, p.intensity() >= p.ridge() ? "compute" : "memory") << p.label;
    EXPECT_DOUBLE_EQ(p.bound_seconds, std::max(p.flops / p.compute_ceiling, p.bytes / p.memory_ceiling));
    EXPECT_FALSE(p.measured.has_value());
    EXPECT_FALSE(p.achieved_flops().has_value());
  }
  // 65536x3072x768 in bf16: ~1.2 kFLOP/B against a ridge of 250: compute-bound.
  EXPECT_EQ(points[0].limit, "compute");
}

TEST(OptimizeReport, MeasuredTimesGiveAchievedRatesAndFractions) {
  DeviceProfile device;
  json plan = fixture_plan(device);
  // Call 2 took a stored choice for its exact shape: its record's time counts, with its source.
  for (auto& r : plan["replacements"])
    if (r["label"] == "2")
      for (auto& call : r["calls"]) {
        call["config_source"] = "database";
        call["tuned"] = {{"ms", 0.5}, {"device", "NVIDIA H200"}, {"date", "2026-11-01"}};
      }
  const auto points = roofline_points(plan, device, core::PrecisionMode::Native, {{"1a", Measurement{2e-3, "tuned in this run"}}});
  const RooflinePoint& a = points[0];
  ASSERT_TRUE(a.measured.has_value());
  EXPECT_DOUBLE_EQ(*a.achieved_flops(), a.flops / 2e-3);
  EXPECT_DOUBLE_EQ(*a.achieved_bytes(), a.bytes / 2e-3);
  EXPECT_DOUBLE_EQ(*a.of_bound(), a.bound_seconds / 2e-3);
  const json j = a.to_json();
  EXPECT_DOUBLE_EQ(j["of_compute_ceiling"].get<double>(), a.flops / 2e-3 / device.bf16_flops);
  EXPECT_EQ(j["time_source"], "tuned in this run");
  const RooflinePoint& two = points[2];
  EXPECT_EQ(two.label, "2");
  ASSERT_TRUE(two.measured.has_value());
  EXPECT_DOUBLE_EQ(two.measured->seconds, 0.5e-3);
  EXPECT_NE(two.measured->source.find("tuning database (NVIDIA H200, 2026-11-01)"), std::string::npos);
  EXPECT_FALSE(points[1].measured.has_value());  // 1b: nothing measured
}

TEST(OptimizeReport, MarkdownExplainsEveryColumnAndShowsTheRoofline) {
  DeviceProfile device;
  const json plan = fixture_plan(device);
  OptimizeReport report;
  report.model = "block.py:Block";
  report.dtype = "bfloat16";
  report.precision = "native";
  report.device = device;
  report.classification_legend = discover::classification_legend(discover::DiscoverOptions{});
  report.kernels = kernel_rows(plan);
  report.roofline = roofline_points(plan, device, core::PrecisionMode::Native, {{"1a", Measurement{2e-3, "tuned in this run"}}});
  TuningRow tuned;
  tuned.label = "1a";
  tuned.summary = "gemm_bias_gelu_tanh 65536x3072x768 bfloat16";
  tuned.config = "128x256x64 c2x1 coop";
  tuned.origin = "sweep";
  tuned.ms = 2.0;
  tuned.rel_err = 3e-3;
  tuned.baseline = "cublaslt";
  tuned.baseline_ms = 2.5;
  TuningRow untuned;
  untuned.label = "1b";
  untuned.error = "no configuration verified";
  report.tuning = {tuned, untuned};
  report.package_note = "written";
  report.skipped = {"end-to-end: no GPU"};
  report.logs_dir = "logs";
  const std::string md = render_optimize_report(report);
  EXPECT_NE(md.find("## How to read this report"), std::string::npos);
  EXPECT_NE(md.find("**REUSE**"), std::string::npos);
  EXPECT_NE(md.find("**ADAPT**"), std::string::npos);
  EXPECT_NE(md.find("**NEW**"), std::string::npos);
  EXPECT_NE(md.find("Estimated vs measured"), std::string::npos);
  EXPECT_NE(md.find("saves 0.0 µs"), std::string::npos);
  EXPECT_NE(md.find("datasheet defaults"), std::string::npos);
  EXPECT_NE(md.find("full output of every stage (third-party included): `logs/`"), std::string::npos);
  EXPECT_EQ(report.kernels.size(), 5u);
  EXPECT_NE(md.find("| 1a | mlp_gelu_tanh | ADAPT | gemm_bias_gelu_tanh 65536x3072x768 bfloat16 |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("## Roofline"), std::string::npos);
  EXPECT_NE(md.find("| compute | "), std::string::npos);
  EXPECT_NE(md.find("tuned in this run"), std::string::npos);
  EXPECT_NE(md.find("% of 750)"), std::string::npos) << md;  // achieved TFLOP/s of the bf16 ceiling
  EXPECT_NE(md.find("| 1a | gemm_bias_gelu_tanh 65536x3072x768 bfloat16 | 128x256x64 c2x1 coop | sweep | 2.0000 | "
                    "3.0e-03 | cublaslt | 2.5000 | 1.25x |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| 1b |  | not tuned: no configuration verified |"), std::string::npos) << md;
  EXPECT_NE(md.find("- end-to-end: no GPU"), std::string::npos);
  const std::string table = roofline_table(report.roofline);
  EXPECT_NE(table.find("limited by"), std::string::npos);
  EXPECT_NE(table.find("65536x3072x768"), std::string::npos);  // problems are not cut
}

// The plan lists replacements in graph order; labels are discovery's rank. Rows follow the labels.
TEST(OptimizeReport, KernelAndRooflineRowsFollowTheLabelsNotThePlanOrder) {
  DeviceProfile device;
  json plan = fixture_plan(device);
  json shuffled = json::array();
  for (auto it = plan["replacements"].rbegin(); it != plan["replacements"].rend(); ++it) shuffled.push_back(*it);
  ASSERT_EQ(shuffled.front()["label"], "4");
  plan["replacements"] = shuffled;
  std::vector<std::string> kernels, points;
  for (const KernelRow& r : kernel_rows(plan)) kernels.push_back(r.label);
  for (const RooflinePoint& p : roofline_points(plan, device, core::PrecisionMode::Native, {})) points.push_back(p.label);
  const std::vector<std::string> expected = {"1a", "1b", "2", "3", "4"};
  EXPECT_EQ(kernels, expected);
  EXPECT_EQ(points, expected);
  EXPECT_TRUE(label_before("2", "10"));
  EXPECT_TRUE(label_before("1b", "2"));
  EXPECT_FALSE(label_before("10", "9a"));
}

// Declined matches with their reasons in full, the ops no match covers with their estimated
// share, and what a later stage handed back with its measured time.
TEST(OptimizeReport, LeftToPyTorchHasDeclinesUncoveredOpsAndLaterStages) {
  DeviceProfile device;
  json plan = fixture_plan(device);
  const graph::Graph g =
      graph::load_graph(std::string(FACT_SOURCE_DIR) + "/tests/data/graphs/mingpt_block_bf16.json");
  discover::DiscoverOptions options;
  options.precision = core::PrecisionMode::Native;
  options.device = device;
  std::string layer_norm;
  for (const graph::Node& n : g.nodes())
    if (n.target == "aten.layer_norm.default" && layer_norm.empty()) layer_norm = n.id;
  ASSERT_FALSE(layer_norm.empty());
  const std::string reason(300, 'r');  // longer than any cell a terminal table would keep
  plan["replacements"].push_back({{"label", "9"}, {"rule", "norm_fold"}, {"status", "declined"},
                                  {"reason", "fused norm is opt-in | " + reason}, {"nodes", {layer_norm}}});
  plan["replacements"].push_back({{"label", "6"}, {"rule", "new_thing"}, {"status", "pending"}, {"nodes", json::array()}});

  std::vector<LeftRow> rows = left_to_pytorch_rows(plan, g, options);
  ASSERT_GE(rows.size(), 3u);
  EXPECT_EQ(rows[0].label, "6");  // matches by label first
  EXPECT_EQ(rows[0].reason, "no template realizes it yet");
  EXPECT_EQ(rows[1].label, "9");
  EXPECT_EQ(rows[1].kind, "declined");
  EXPECT_EQ(rows[1].reason, "fused norm is opt-in | " + reason);
  EXPECT_DOUBLE_EQ(*rows[1].est_seconds, discover::pytorch_node_seconds(g, *g.node(layer_norm), options));
  double total = 0.0;
  for (const graph::Node& n : g.nodes()) total += discover::pytorch_node_seconds(g, n, options);
  EXPECT_DOUBLE_EQ(*rows[1].est_share, *rows[1].est_seconds / total);
  // The other layer_norm is no match's: one "uncovered" row for the op, with its one node.
  const auto ln = std::find_if(rows.begin(), rows.end(), [](const LeftRow& r) {
    return r.kind == "uncovered" && r.what == "aten.layer_norm.default";
  });
  ASSERT_NE(ln, rows.end());
  EXPECT_EQ(ln->nodes.size(), 1u);
  EXPECT_NE(ln->nodes[0], layer_norm);
  double share = 0.0;
  for (const LeftRow& r : rows) {
    if (r.kind != "uncovered") continue;
    EXPECT_GT(*r.est_seconds, 0.0) << r.what;  // views and no-op casts are left out
    EXPECT_NE(r.what, "aten.view.default");
    share += *r.est_share;
  }
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 1.0);
  for (size_t i = 3; i < rows.size(); ++i)
    if (rows[i - 1].kind == "uncovered") EXPECT_GE(*rows[i - 1].est_seconds, *rows[i].est_seconds);

  const size_t before = rows.size();
  add_stage_rows(rows,
                 json::array({{{"what", "2 gemm_bias at linear_3"}, {"reason", "slower than PyTorch's own run"},
                               {"stage", "speed"}, {"subgraph_ms", 0.02}},
                              {{"what", "9 norm_fold"}, {"reason", "declined: again"}, {"stage", "plan"}}}),
                 0.5e-3);
  ASSERT_EQ(rows.size(), before + 1);  // the plan's own item is not repeated
  EXPECT_EQ(rows.back().kind, "speed");
  EXPECT_DOUBLE_EQ(*rows.back().measured_seconds, 0.02e-3);
  EXPECT_DOUBLE_EQ(*rows.back().measured_share, 0.04);

  OptimizeReport report;
  report.device = device;
  report.left_to_pytorch = rows;
  const std::string md = render_optimize_report(report);
  const size_t section = md.find("\n## Left to PyTorch\n");
  ASSERT_NE(section, std::string::npos) << md;
  EXPECT_LT(section, md.find("\n## Kernels\n"));
  EXPECT_NE(md.find("| 9 | `norm_fold` | declined | " + layer_norm + " | fused norm is opt-in \\| " + reason + " | "),
            std::string::npos) << md;
  EXPECT_NE(md.find("| - | `aten.layer_norm.default` | uncovered | "), std::string::npos) << md;
  EXPECT_NE(md.find(" | speed | - | slower than PyTorch's own run | - | - | 20.0 | 4.0% |"), std::string::npos) << md;
  const json j = rows[1].to_json();
  EXPECT_EQ(j["reason"], "fused norm is opt-in | " + reason);
  EXPECT_EQ(j["nodes"], json::array({layer_norm}));
  EXPECT_TRUE(j["measured_seconds"].is_null());
}

// "How to read" defines the classes with the text the terminal's legend prints.
TEST(OptimizeReport, HowToReadTakesTheOneClassDefinition) {
  discover::DiscoverOptions options;
  options.registry = "/cache/registry/registry.json";
  OptimizeReport report;
  report.classification_legend = discover::classification_legend(options);
  const std::string md = render_optimize_report(report);
  std::string bolded = report.classification_legend;
  for (const std::string word : {"REUSE", "ADAPT", "NEW"}) {
    const size_t at = bolded.find(word + " =");
    ASSERT_NE(at, std::string::npos) << word;
    bolded.replace(at, word.size(), "**" + word + "**");
  }
  EXPECT_NE(md.find("- **class** (discovery): " + bolded + "\n"), std::string::npos) << md;
  EXPECT_EQ(md.find("a tuned configuration for this exact problem is in the tuning database"), std::string::npos)
      << "a second, different definition";
}

}  // namespace
}  // namespace fact::compose
