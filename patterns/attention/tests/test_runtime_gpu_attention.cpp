// GPU: the rendered attention kernel through the attention KindRuntime (`fact run-kernel`'s
// path and the tuner's): built with nvcc at test time, verified against the float64 GPU
// reference (fresh inputs, other stream, re-poison, another scale) on minGPT's fused-QKV layout
// with merged-head output and on a dense GQA problem, then timed. Skipped without a CUDA
// device, nvcc or the CUTLASS headers (the reason is printed).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/run_kernel.hpp"
#include "patterns/attention/kind/problem.hpp"
#include "patterns/attention/realize/spec.hpp"

namespace fact::attention {
namespace {

namespace fs = std::filesystem;

class GpuAttention : public ::testing::Test {
 public:
  void SetUp() override {
    if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test not run";
    options_ = realize::default_compile_options();
    if (auto why = realize::compile_unavailable_reason(options_)) GTEST_SKIP() << *why;
  }

  // Builds the default kernel for `p` into a scratch folder; returns the library.
  fs::path build(const AttentionProblem& p, const std::string& name, const std::string& precision = "native") {
    const realize::RenderedKernel kernel = realize::render_kernel(default_spec(p, core::parse_precision(precision)).to_kernel_spec(), options_);
    const fs::path dir = fs::path(::testing::TempDir()) / ("fact_attention_gpu_" + name);
    fs::remove_all(dir);
    const realize::CompileResult r = realize::compile_kernel(kernel, dir, options_);
    EXPECT_TRUE(r.ok) << r.reason << "\n" << r.log.substr(0, 10000);
    return r.output;
  }

  runtime::RunReport run(const fs::path& lib, const AttentionProblem& p) {
    const fs::path problem = fs::path(::testing::TempDir()) / "fact_attention_problem.json";
    std::ofstream(problem) << problem_to_json(to_problem(p)).dump();
    runtime::RunKernelOptions o;
    o.lib = lib.string();
    o.problem_json = problem.string();
    o.precision = core::PrecisionMode::Native;
    o.seed = 11;
    o.timing.warmup_runs = 2;
    o.timing.min_runs = 10;
    o.timing.min_time_s = 0.0;
    return runtime::run_kernel(o);
  }

  realize::CompileOptions options_;
};

TEST_F(GpuAttention, MinGptFusedQkvMergedHeads) {
  AttentionProblem p;
  p.batch = 4;
  p.heads = 8;
  p.kv_heads = 8;
  p.seq = p.kv_seq = 333;  // a tail
  p.head_dim = p.v_head_dim = 96;
  p.dtype = p.softmax_dtype = graph::DType::BFloat16;
  p.mask = MaskKind::CausalTopLeft;
  p.scale = 1.0 / std::sqrt(96.0);
  const int64_t c = 768, t = p.seq;
  p.q = {"linear", {4, 8, t, 96}, {t * 3 * c, 96, 3 * c, 1}, 0};
  p.k = {"linear", {4, 8, t, 96}, {t * 3 * c, 96, 3 * c, 1}, c};
  p.v = {"linear", {4, 8, t, 96}, {t * 3 * c, 96, 3 * c, 1}, 2 * c};
  p.o = {"contiguous", {4, 8, t, 96}, {t * c, 96, c, 1}, 0};
  const runtime::RunReport r = run(build(p, "mingpt"), p);
  EXPECT_EQ(r.status, runtime::RunStatus::Ok) << r.error;
  ASSERT_EQ(r.checks.size(), 5u);
  for (const auto& check : r.checks) {
    EXPECT_TRUE(check.passed) << check.name << ": " << check.failure;
    EXPECT_EQ(check.unwritten, 0);
    EXPECT_EQ(check.out_of_bounds, 0);
  }
  ASSERT_TRUE(r.rel_err.has_value());
  EXPECT_LT(*r.rel_err, 1e-2);
  ASSERT_TRUE(r.ms.has_value());
  EXPECT_GT(r.ms->median, 0.0);
}

// `fact run-kernel --problem WORDS --dtype DTYPE` of the default kernel for head dim `d` (causal
// or not) in `precision`, verification only (or with the timing: `verify_only` false).
runtime::RunReport run_command_line(GpuAttention& test, const std::string& name, graph::DType dtype, int d,
                                    bool causal, const std::string& words, const std::string& precision = "native",
                                    bool verify_only = true) {
  AttentionProblem p;
  p.dtype = dtype;
  p.head_dim = p.v_head_dim = d;
  p.mask = causal ? MaskKind::CausalTopLeft : MaskKind::None;
  runtime::RunKernelOptions o;
  o.lib = test.build(p, name, precision).string();
  o.problem = words;
  o.problem_words["dtype"] = dtype == graph::DType::Float32 ? "f32" : dtype == graph::DType::Float16 ? "fp16" : "bf16";
  o.kind = "attention";
  o.precision = core::parse_precision(precision);
  o.verify_only = verify_only;
  return runtime::run_kernel(o);
}

TEST_F(GpuAttention, DenseGroupedQueryHeadsFromTheCommandLine) {
  const runtime::RunReport r =
      run_command_line(*this, "gqa", graph::DType::BFloat16, 128, true, "b=2,h=16,kvh=4,s=1000,d=128,causal");
  EXPECT_EQ(r.status, runtime::RunStatus::Ok) << r.error;
  EXPECT_EQ(r.problem["kv_heads"], 4);
}

// The float32 kernels through the same runtime: strict (3xTF32) within the strict tolerance of
// the float64 reference, tf32 within tf32's; GQA, a key tail and bottom-right alignment.
TEST_F(GpuAttention, Float32StrictAndTf32KernelsFromTheCommandLine) {
  for (const std::string precision : {"strict", "tf32"}) {
    const runtime::RunReport r = run_command_line(*this, "f32_" + precision, graph::DType::Float32, 128, true,
                                                  "b=2,h=8,kvh=2,s=300,skv=1000,d=128,mask=causal_bottom_right",
                                                  precision);
    EXPECT_EQ(r.status, runtime::RunStatus::Ok) << precision << ": " << r.error;
    ASSERT_TRUE(r.rel_err.has_value()) << precision;
    EXPECT_LT(*r.rel_err, precision == "strict" ? 1e-5 : 5e-3) << precision;
  }
}

// A sliding window through run-kernel: the runtime's float64 reference sees the same window as
// the kernel (a 100-key window at T 777: a reference without it would be far off).
TEST_F(GpuAttention, ASlidingWindowIsVerifiedAgainstAWindowedReference) {
  const runtime::RunReport r =
      run_command_line(*this, "window", graph::DType::BFloat16, 64, true, "b=2,h=8,s=777,d=64,causal,w=100");
  EXPECT_EQ(r.status, runtime::RunStatus::Ok) << r.error;
  EXPECT_EQ(r.problem["window"], 100);
}

// A kernel built for a key mask (BERT's padding mask): the runtime fills a padding mask that
// hides up to a quarter of each batch entry's keys and its float64 reference hides the same;
// a key tail (333 keys) and BERT-base's shape. A problem without a key mask cannot run on it.
TEST_F(GpuAttention, AKeyMaskHidesEachBatchEntrysPaddedKeys) {
  AttentionProblem p;
  p.dtype = graph::DType::BFloat16;
  p.head_dim = p.v_head_dim = 64;
  p.mask = MaskKind::None;
  p.key_mask = KeyMask{};
  const fs::path lib = build(p, "key_mask");
  for (const std::string words : {"b=6,h=4,s=333,d=64,key_mask", "b=32,h=12,s=512,d=64,key_mask"}) {
    runtime::RunKernelOptions o;
    o.lib = lib.string();
    o.problem = words;
    o.problem_words["dtype"] = "bf16";
    o.kind = "attention";
    o.precision = core::PrecisionMode::Native;
    o.verify_only = true;
    const runtime::RunReport r = runtime::run_kernel(o);
    EXPECT_EQ(r.status, runtime::RunStatus::Ok) << words << ": " << r.error;
    ASSERT_TRUE(r.rel_err.has_value()) << words;
    EXPECT_LT(*r.rel_err, 1e-2) << words;
    EXPECT_TRUE(r.problem["key_mask"].is_object()) << r.problem.dump();
  }
  runtime::RunKernelOptions plain;
  plain.lib = lib.string();
  plain.problem = "b=2,h=4,s=256,d=64";
  plain.problem_words["dtype"] = "bf16";
  plain.kind = "attention";
  plain.precision = core::PrecisionMode::Native;
  plain.verify_only = true;
  EXPECT_EQ(runtime::run_kernel(plain).status, runtime::RunStatus::CannotImplement);
}

TEST_F(GpuAttention, AKernelBuiltForAnotherHeadDimCannotImplement) {
  const runtime::RunReport r = run_command_line(*this, "d64", graph::DType::BFloat16, 64, true,
                                                "b=1,h=2,s=128,d=128,causal", "native", /*verify_only=*/false);
  EXPECT_EQ(r.status, runtime::RunStatus::CannotImplement) << r.error;
}

}  // namespace
}  // namespace fact::attention
