// Command-line GEMM problems for `fact tune --problem` and the bench suite.
#include <algorithm>

#include <gtest/gtest.h>

#include "patterns/gemm/kind/problem_args.hpp"

namespace fact::gemm {
namespace {

TEST(TunerProblemArgs, ParsesSizes) {
  EXPECT_EQ(parse_gemm_sizes("m=4096,n=4096,k=4096"), (GemmSizes{4096, 4096, 4096, 1}));
  EXPECT_EQ(parse_gemm_sizes("batch=128, k=1024,m=512,n=2048"), (GemmSizes{512, 2048, 1024, 128}));
  EXPECT_THROW(parse_gemm_sizes("m=1,n=2"), std::invalid_argument);
  EXPECT_THROW(parse_gemm_sizes("m=1,n=2,k=x"), std::invalid_argument);
  EXPECT_THROW(parse_gemm_sizes("m=1,n=2,k=3,q=4"), std::invalid_argument);
  EXPECT_THROW(parse_gemm_sizes("m=1,m=2,n=2,k=3"), std::invalid_argument);
  EXPECT_THROW(parse_gemm_sizes("m=1,n=2,k=3,batch=0"), std::invalid_argument);
}

TEST(TunerProblemArgs, BuildsCompactProblems) {
  auto p = make_gemm_problem({65536, 3072, 768, 1}, parse_operand_dtype("bf16"), "bias,gelu_tanh", "tn");
  EXPECT_EQ(p.fusion_name(), "gemm_bias_gelu_tanh");
  EXPECT_EQ(p.a.layout, Layout::RowMajor);
  EXPECT_EQ(p.a.ld, 768);
  EXPECT_EQ(p.b.layout, Layout::ColumnMajor);
  EXPECT_EQ(p.b.ld, 768);
  EXPECT_EQ(p.d.ld, 3072);
  EXPECT_EQ(p.epilogue[0].operand_dtype, graph::DType::BFloat16);
  EXPECT_EQ(p.epilogue[1].activation, Activation::GeluTanh);

  auto batched = make_gemm_problem({512, 2048, 1024, 128}, parse_operand_dtype("fp32"), "", "tt");
  EXPECT_EQ(batched.fusion_name(), "bgemm");
  EXPECT_EQ(batched.b.ld, 2048);
  EXPECT_EQ(batched.a.batch_stride, 512 * 1024);
  EXPECT_EQ(batched.d.batch_stride, 512 * 2048);
  EXPECT_EQ(default_precision_for(batched.a.dtype), core::PrecisionMode::Strict);

  EXPECT_THROW(make_gemm_problem({1, 1, 1, 1}, graph::DType::BFloat16, "bias,swizzle"), std::invalid_argument);
  EXPECT_THROW(make_gemm_problem({1, 1, 1, 1}, graph::DType::BFloat16, "", "tx"), std::invalid_argument);
  EXPECT_THROW(parse_operand_dtype("int8"), std::invalid_argument);
}

}  // namespace
}  // namespace fact::gemm

#include "fact/realize/bench_results.hpp"

namespace fact::realize {
namespace {

TEST(TunerBenchResults, FileShapeAndSpeedups) {
  BenchResults results;
  results.suite = "gemm";
  results.date = "2026-11-22";
  results.device = "NVIDIA H100 80GB HBM3";
  results.versions = {"580.95", "13.0", "n/a", "4.2.0", "abc1234"};
  BenchCase ok;
  ok.name = "square_4096_bf16";
  ok.precision = "native";
  ok.fact_ms = 0.2;
  ok.rel_err = 1e-3;
  ok.baselines["cublas"] = {0.25, 2e-3};
  ok.config = "gemm_bf16_tnt_128x256x64";
  BenchCase failed;
  failed.name = "square_4096_fp32";
  failed.precision = "strict";
  failed.status = "no_kernel";
  failed.reason = "no configuration verified";
  failed.baselines["cublas"] = {2.6, 1e-7};
  results.cases = {ok, failed};

  EXPECT_EQ(results.file_name(), "gemm-nvidia-h100-80gb-hbm3-2026-11-22.json");
  auto j = results.to_json();
  EXPECT_EQ(j["versions"]["torch"], "n/a");
  EXPECT_EQ(j["versions"]["fact"], "abc1234");
  EXPECT_DOUBLE_EQ(j["cases"][0]["speedup"]["cublas"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(j["cases"][0]["baselines"]["cublas"]["ms"].get<double>(), 0.25);
  EXPECT_FALSE(j["cases"][0].contains("reason"));
  EXPECT_TRUE(j["cases"][1]["fact_ms"].is_null());
  EXPECT_TRUE(j["cases"][1]["speedup"].empty());
  EXPECT_EQ(j["cases"][1]["reason"], "no configuration verified");
  for (const char* key : {"name", "precision", "fact_ms", "rel_err", "baselines", "speedup", "config"}) {
    EXPECT_TRUE(j["cases"][1].contains(key)) << key;
  }
  EXPECT_EQ(device_slug("  NVIDIA H200 (141GB) "), "nvidia-h200-141gb");
  results.variant = "quick";
  EXPECT_EQ(results.file_name(), "gemm-nvidia-h100-80gb-hbm3-2026-11-22-quick.json");
}

TEST(TunerBenchResults, SummaryIsTheGeometricMeanPerPrecisionAndTuningCostIsWritten) {
  BenchResults results;
  results.suite = "gemm";
  auto make_case = [](std::string name, std::string precision, std::optional<double> fact_ms, double cublas_ms) {
    BenchCase c;
    c.name = std::move(name);
    c.precision = std::move(precision);
    c.fact_ms = fact_ms;
    if (!fact_ms) c.status = "no_kernel";
    c.baselines["cublas"] = {cublas_ms, std::nullopt};
    return c;
  };
  results.cases = {make_case("a", "native", 1.0, 2.0), make_case("b", "native", 1.0, 0.5),
                   make_case("c", "native", std::nullopt, 3.0), make_case("d", "strict", 1.0, 2.2)};
  auto j = results.to_json();
  EXPECT_NEAR(j["summary"]["native"]["cublas"]["geomean_speedup"].get<double>(), 1.0, 1e-12);
  EXPECT_EQ(j["summary"]["native"]["cublas"]["cases"], 2);  // the case without a kernel is not counted
  EXPECT_NEAR(j["summary"]["strict"]["cublas"]["geomean_speedup"].get<double>(), 2.2, 1e-12);
  EXPECT_FALSE(j.contains("tuning_cost"));
  EXPECT_NEAR(j["summary"]["native"]["like_for_like"]["min_speedup"].get<double>(), 0.5, 1e-12);
  EXPECT_EQ(j["summary"]["native"]["like_for_like"]["min_case"], "b");
  BenchResults fused = results;
  fused.cases = {make_case("e", "native", 1.0, 0.8)};
  fused.cases[0].baselines["cublaslt"] = {1.2, std::nullopt};  // the fused library call counts
  EXPECT_NEAR(fused.to_json()["summary"]["native"]["like_for_like"]["geomean_speedup"].get<double>(), 1.2, 1e-12);

  BenchTuningCost cost;
  cost.case_name = "a";
  cost.candidates = 6;
  cost.cold_s = 95.5;
  cost.cold_status = "ok";
  cost.warm_status = "exit 1: boom";
  results.tuning_cost = cost;
  j = results.to_json();
  EXPECT_EQ(j["tuning_cost"]["case"], "a");
  EXPECT_DOUBLE_EQ(j["tuning_cost"]["cold_s"].get<double>(), 95.5);
  EXPECT_TRUE(j["tuning_cost"]["warm_s"].is_null());
  EXPECT_EQ(j["tuning_cost"]["warm_status"], "exit 1: boom");
}

}  // namespace
}  // namespace fact::realize

#include "fact/realize/realizer.hpp"
#include "fact/realize/realizer_source.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {
namespace {

TEST(TunerGemmSource, EveryPrecisionReachesARegisteredRealizer) {
  const auto patterns = realize::RealizerRegistry::global().patterns();
  EXPECT_NE(std::find(patterns.begin(), patterns.end(), "gemm"), patterns.end());
  EXPECT_NE(std::find(patterns.begin(), patterns.end(), "gemm_f32_strict"), patterns.end());

  realize::RealizerSource source;
  struct Case {
    const char* dtype;
    const char* precision;
    const char* layout;
    const char* pattern;
  };
  for (Case c : {Case{"bf16", "native", "tn", "gemm"}, Case{"fp32", "tf32", "tn", "gemm"},
                 Case{"fp32", "tf32", "tt", "gemm_f32_strict"},
                 Case{"fp32", "strict", "tn", "gemm_f32_strict"}}) {
    const Problem problem =
        to_problem(make_gemm_problem({4096, 4096, 4096, 1}, parse_operand_dtype(c.dtype), "", c.layout));
    const realize::KernelSpec problem_class = source.problem_class(problem, core::parse_precision(c.precision));
    EXPECT_EQ(problem_class.kind(), "gemm");
    EXPECT_EQ(problem_class.pattern(), c.pattern) << c.dtype << " " << c.precision << " " << c.layout;
    const realize::ParamSpace space = source.candidates(problem_class, problem, "default");
    EXPECT_FALSE(space.candidates.empty()) << c.dtype << " " << c.precision;
    for (const auto& spec : space.candidates) EXPECT_EQ(spec.pattern(), problem_class.pattern());
  }
  const Problem problem = to_problem(make_gemm_problem({64, 64, 64, 1}, graph::DType::BFloat16, "", "tn"));
  EXPECT_THROW(source.candidates(source.problem_class(problem, core::PrecisionMode::Native), problem, "huge"), std::invalid_argument);
}

}  // namespace
}  // namespace fact::gemm
