// The optimize report (compose/optimize_report.hpp): roofline points from a plan's calls against
// a device profile, measured times from this run or the tuning database, and report.md's legend,
// kernel, roofline and tuning sections.
#include <gtest/gtest.h>

#include <string>

#include "fact/compose/optimize_report.hpp"
#include "fact/discover/discover.hpp"
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

}  // namespace
}  // namespace fact::compose
