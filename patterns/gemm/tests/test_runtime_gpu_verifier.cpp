// The one verifier (fact/runtime/verifier.hpp) on GEMM cases (GemmVerifyCase) against correct
// and cheating "kernels" built from cuBLAS. Each cheat must be caught by the check meant for
// it. Skipped without a CUDA device.
#include <cstring>

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include "fact/runtime/cuda_backend.hpp"
#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_kernels.hpp"
#include "fact/runtime/timing.hpp"
#include "fact/runtime/verifier.hpp"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/runtime/blas_baselines.hpp"
#include "patterns/gemm/runtime/gemm_verify_case.hpp"
#include "tests/cpp/runtime/runtime_test_support.hpp"

namespace fact::runtime {
namespace {

using core::PrecisionMode;
using core::kHalfOutputTolerance;
using core::kTf32Tolerance;
using gemm::Activation;
using gemm::Baseline;
using gemm::BlasContext;
using gemm::EpilogueOpSpec;
using gemm::GemmCase;
using gemm::GemmLauncher;
using gemm::GemmSpec;
using gemm::GemmVerifyCase;
using gemm::Layout;
using gemm::make_cublas_baseline;
using gemm::make_cublaslt_baseline;
using graph::DType;
using Kind = gemm::EpilogueStep::Kind;

gemm::GemmProblem sized(const char* size) {
  return gemm::make_gemm_problem(gemm::parse_gemm_sizes(size), DType::Float32, "", "tn");
}

GemmCase fp32_case(PrecisionMode precision = PrecisionMode::Strict,
                   const char* size = "m=256,n=192,k=128") {
  GemmSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = DType::Float32;
  spec.math = precision == PrecisionMode::Tf32 ? gemm::MathMode::Tf32 : gemm::MathMode::Simt;
  spec.batched = true;
  return gemm::make_gemm_case(spec, sized(size), precision);
}

const CheckResult* failed_check(const RunReport& o) {
  for (const CheckResult& c : o.checks) {
    if (!c.passed) return &c;
  }
  return nullptr;
}

// A launcher as a call of the kernel ABI's shape (no workspace).
CallFunction as_call(GemmLauncher launch) {
  return [launch](const FactCallHeader* args, void*, size_t* workspace_size, void* stream) {
    if (workspace_size) {
      *workspace_size = 0;
      return int(FACT_OK);
    }
    return launch(*reinterpret_cast<const FactGemmArgs*>(args), static_cast<cudaStream_t>(stream));
  };
}

// The verification sequence (no timing) of `launch` as the kernel of `gemm_case`.
RunReport verify(const GemmCase& gemm_case, const GemmLauncher& launch, uint64_t seed,
                 bool vary_bias_multiplier = true, bool with_accuracy_peer = false) {
  CudaBackend backend(false);
  GemmVerifyCase verify_case(gemm_case, with_accuracy_peer, vary_bias_multiplier);
  VerifyOptions options;
  options.base_seed = seed;
  options.verify_only = true;
  RunReport report;
  verify_and_time(backend, verify_case, as_call(launch), options, nullptr, report);
  return report;
}

// A call with device addresses aligned like the verifier's buffers (cuBLASLt picks its
// algorithm by the problem and the pointers' alignment).
FactGemmArgs aligned_sample(const GemmCase& c, const DeviceBuffer& memory) {
  FactGemmArgs args = gemm::gemm_args(c.problem);
  args.a = args.b = memory.data();
  args.d = memory.data();
  for (int i = 0; i < args.num_steps; ++i) args.steps[i].operand = memory.data();
  return args;
}

class GpuVerifier : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test not run";
    blas.emplace();
  }
  std::optional<BlasContext> blas;
};

TEST_F(GpuVerifier, CorrectKernelPassesEveryCheck) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  const RunReport o = verify(c, sgemm.launch, 1234, true, true);
  EXPECT_EQ(o.status, RunStatus::Ok) << o.error;
  ASSERT_EQ(o.checks.size(), 5u);
  ASSERT_TRUE(o.accuracy);  // strict float32: cuBLAS SGEMM's error beside the kernel's
  EXPECT_EQ(o.accuracy->against, "cublas");
  EXPECT_GT(o.accuracy->rel_err, 0.0);
  EXPECT_TRUE(o.accuracy->within_limit);
  const char* names[] = {"primary", "repoison", "fresh_inputs", "other_stream", "scalars"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(o.checks[i].name, names[i]);
    EXPECT_TRUE(o.checks[i].passed) << o.checks[i].failure;
    EXPECT_TRUE(o.checks[i].inputs_unchanged);
    EXPECT_EQ(o.checks[i].unwritten, 0);
    EXPECT_GT(o.checks[i].ref_norm, 0.0);
  }
  EXPECT_EQ(o.checks[3].stream, "secondary");
  EXPECT_EQ(o.checks[0].seed, o.checks[1].seed);
  EXPECT_NE(o.checks[1].seed, o.checks[2].seed);
  EXPECT_EQ(o.checks[2].seed, o.checks[3].seed);
  EXPECT_NE(o.checks[4].seed, o.checks[2].seed);
  ASSERT_TRUE(o.rel_err);
  EXPECT_LT(*o.rel_err, 1e-6);
  EXPECT_GT(*o.rel_err, 0.0);  // float32 rounding is visible against float64
}

TEST_F(GpuVerifier, Tf32ProductsFailStrictButPassTf32) {
  const GemmCase strict = fp32_case(PrecisionMode::Strict, "m=256,n=256,k=1024");
  GemmCase tf32_case = fp32_case(PrecisionMode::Tf32, "m=256,n=256,k=1024");
  const Baseline tf32 = make_cublas_baseline(*blas, tf32_case);
  const RunReport o = verify(strict, tf32.launch, 5);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "primary");
  EXPECT_GT(*failed_check(o)->rel_err, 1e-5);

  const RunReport r = verify(tf32_case, tf32.launch, 5);
  EXPECT_EQ(r.status, RunStatus::Ok) << r.error;
  EXPECT_LT(*r.rel_err, kTf32Tolerance / 3);
}

TEST_F(GpuVerifier, KernelThatWritesNothingFails) {
  const RunReport o = verify(fp32_case(), [](const FactGemmArgs&, cudaStream_t) { return 0; }, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_EQ(o.checks.size(), 1u);
  EXPECT_EQ(o.checks[0].unwritten, 256 * 192);
  EXPECT_FALSE(o.checks[0].rel_err.has_value());
  EXPECT_NE(o.error.find("not written"), std::string::npos) << o.error;
}

TEST_F(GpuVerifier, PartialWriteFails) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  auto last_row_poisoned = [&](const FactGemmArgs& args, cudaStream_t stream) {
    sgemm.launch(args, stream);
    std::vector<uint32_t> row(args.n, kPoisonF32);
    FACT_CUDA_CHECK(cudaMemcpyAsync(static_cast<float*>(args.d) + (args.m - 1) * args.ldd, row.data(),
                                    row.size() * 4, cudaMemcpyHostToDevice, stream));
    FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return 0;
  };
  const RunReport o = verify(c, last_row_poisoned, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  EXPECT_EQ(o.checks.back().unwritten, 192);
}

TEST_F(GpuVerifier, ReplayingACachedResultFailsOnFreshInputs) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  DeviceBuffer saved(256 * 192 * 4);
  bool first = true;
  auto replay = [&](const FactGemmArgs& args, cudaStream_t stream) {
    if (first) {
      sgemm.launch(args, stream);
      FACT_CUDA_CHECK(cudaMemcpyAsync(saved.data(), args.d, saved.bytes(), cudaMemcpyDeviceToDevice, stream));
      first = false;
    } else {
      FACT_CUDA_CHECK(cudaMemcpyAsync(args.d, saved.data(), saved.bytes(), cudaMemcpyDeviceToDevice, stream));
    }
    return 0;
  };
  const RunReport o = verify(c, replay, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "fresh_inputs");
  EXPECT_GT(*failed_check(o)->rel_err, 0.5);
}

TEST_F(GpuVerifier, SkippingWorkWhenOutputLooksDoneFailsRepoison) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  int calls = 0;
  auto lazy = [&](const FactGemmArgs& args, cudaStream_t stream) {
    // Skips its second call, the repoison check: the output of the first call on the same
    // inputs was there, but the poison is now.
    ++calls;
    if (calls != 2) sgemm.launch(args, stream);
    return 0;
  };
  const RunReport o = verify(c, lazy, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "repoison");
}

TEST_F(GpuVerifier, IgnoringAlphaFailsTheScalarsCheck) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  auto alpha_one = [&](const FactGemmArgs& args, cudaStream_t stream) {
    FactGemmArgs copy = args;
    copy.alpha = 1.0f;
    return sgemm.launch(copy, stream);
  };
  const RunReport o = verify(c, alpha_one, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "scalars");
}

TEST_F(GpuVerifier, IgnoringTheStreamIsCaught) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  auto legacy_stream = [&](const FactGemmArgs& args, cudaStream_t) {
    return sgemm.launch(args, cudaStreamLegacy);
  };
  const RunReport o = verify(c, legacy_stream, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  // The poison lands after the work on another stream, or the output changes after the given
  // stream was synchronized: either way that check fails.
  EXPECT_TRUE(failed_check(o)->unwritten > 0 ||
              failed_check(o)->failure.find("after the stream was synchronized") != std::string::npos)
      << failed_check(o)->name << ": " << failed_check(o)->failure;
}

TEST_F(GpuVerifier, ModifyingInputsIsCaught) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  auto scribble = [&](const FactGemmArgs& args, cudaStream_t stream) {
    sgemm.launch(args, stream);
    FACT_CUDA_CHECK(cudaMemsetAsync(const_cast<void*>(args.b), 0, 4, stream));
    return 0;
  };
  const RunReport o = verify(c, scribble, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  EXPECT_FALSE(o.checks[0].inputs_unchanged);
  EXPECT_NE(o.error.find("modified its inputs"), std::string::npos) << o.error;
}

TEST_F(GpuVerifier, WritingOutsideDIsCaught) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  auto overflow = [&](const FactGemmArgs& args, cudaStream_t stream) {
    sgemm.launch(args, stream);
    FACT_CUDA_CHECK(cudaMemsetAsync(static_cast<float*>(args.d) + args.m * args.n, 0, 8, stream));
    return 0;
  };
  const RunReport o = verify(c, overflow, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  EXPECT_EQ(o.checks[0].out_of_bounds, 2);
}

TEST_F(GpuVerifier, NaNNeverPasses) {
  const GemmCase c = fp32_case();
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  auto one_nan = [&](const FactGemmArgs& args, cudaStream_t stream) {
    sgemm.launch(args, stream);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    FACT_CUDA_CHECK(cudaMemcpyAsync(args.d, &nan, 4, cudaMemcpyHostToDevice, stream));
    FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return 0;
  };
  const RunReport o = verify(c, one_nan, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  EXPECT_EQ(o.checks[0].nonfinite, 1);
  EXPECT_FALSE(o.checks[0].rel_err.has_value());
}

TEST_F(GpuVerifier, RefusalsAndErrors) {
  RunReport o = verify(fp32_case(), [](const FactGemmArgs&, cudaStream_t) { return int(FACT_ERR_CANNOT_IMPLEMENT); }, 1);
  EXPECT_EQ(o.status, RunStatus::CannotImplement);
  o = verify(fp32_case(), [](const FactGemmArgs&, cudaStream_t) { return int(FACT_ERR_LAUNCH); }, 1);
  EXPECT_EQ(o.status, RunStatus::Error);
  EXPECT_NE(o.error.find("FACT_ERR_LAUNCH"), std::string::npos);
}

GemmCase bf16_case(std::vector<EpilogueOpSpec> epilogue, const char* size) {
  GemmSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = DType::BFloat16;
  spec.a_layout = Layout::RowMajor;
  spec.b_layout = Layout::ColumnMajor;
  spec.math = gemm::MathMode::Native;
  spec.batched = true;
  spec.epilogue = std::move(epilogue);
  return gemm::make_gemm_case(spec, sized(size), PrecisionMode::Native);
}

TEST_F(GpuVerifier, CublasLtFusedEpiloguesPassNativeChecks) {
  const EpilogueOpSpec bias{Kind::Bias, Activation::Identity, DType::BFloat16};
  const EpilogueOpSpec relu{Kind::Activation, Activation::ReLU, DType::Unknown};
  const EpilogueOpSpec gelu{Kind::Activation, Activation::GeluTanh, DType::Unknown};
  const EpilogueOpSpec residual{Kind::Residual, Activation::Identity, DType::BFloat16};
  for (const auto& epilogue : {std::vector{bias, relu}, std::vector{bias, gelu}, std::vector{residual, bias}}) {
    const GemmCase c = bf16_case(epilogue, "m=512,n=384,k=256,batch=2");
    const DeviceBuffer memory(256);
    const Baseline lt = make_cublaslt_baseline(*blas, c, aligned_sample(c, memory));
    EXPECT_TRUE(lt.fused) << lt.computes.fusion_name();
    // cuBLASLt's BIAS epilogue adds the bias as is: the scalars check keeps its multiplier 1.
    EXPECT_EQ(lt.bias_multiplier_fixed, epilogue.front().kind == Kind::Bias || epilogue.back().kind == Kind::Bias);
    const RunReport o = verify(c, lt.launch, 9, !lt.bias_multiplier_fixed);
    EXPECT_EQ(o.status, RunStatus::Ok) << lt.computes.fusion_name() << ": " << o.error << " " << lt.config;
  }
}

// The `scalars` check changes every step's constant: a launcher that reads the residual's beta
// from anywhere but its own step is caught there.
TEST_F(GpuVerifier, IgnoringAStepsConstantFailsTheScalarsCheck) {
  const EpilogueOpSpec bias{Kind::Bias, Activation::Identity, DType::BFloat16};
  const EpilogueOpSpec residual{Kind::Residual, Activation::Identity, DType::BFloat16};
  const GemmCase c = bf16_case({residual, bias}, "m=256,n=256,k=128");
  const DeviceBuffer memory(256);
  const Baseline lt = make_cublaslt_baseline(*blas, c, aligned_sample(c, memory));
  ASSERT_TRUE(lt.fused);
  auto beta_one = [&](const FactGemmArgs& args, cudaStream_t stream) {
    FactGemmArgs copy = args;
    copy.steps[0].value = 1.0f;
    return lt.launch(copy, stream);
  };
  const RunReport o = verify(c, beta_one, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "scalars");
}

TEST_F(GpuVerifier, UnfusedBaselinesAreCheckedAgainstWhatTheyCompute) {
  const EpilogueOpSpec bias{Kind::Bias, Activation::Identity, DType::BFloat16};
  const EpilogueOpSpec silu{Kind::Activation, Activation::SiLU, DType::Unknown};
  const GemmCase c = bf16_case({bias, silu}, "m=256,n=128,k=64");
  // The kind's baselines alone (no kernel), each checked against what it computes.
  CudaBackend backend(true);
  GemmVerifyCase verify_case(c, false);
  VerifyOptions options;
  options.base_seed = 4;
  options.baselines = {"cublaslt", "cublas"};
  options.timing.warmup_runs = 1;
  options.timing.min_runs = 10;
  options.timing.min_time_s = 0.0;
  RunReport r;
  verify_and_time(backend, verify_case, CallFunction{}, options, nullptr, r);
  ASSERT_EQ(r.baselines.size(), 2u);
  EXPECT_EQ(r.baselines[0].computes, "gemm_bias");
  EXPECT_FALSE(r.baselines[0].fused);
  EXPECT_EQ(r.baselines[0].status, "ok") << r.baselines[0].error;
  EXPECT_EQ(r.baselines[1].computes, "gemm");
  EXPECT_EQ(r.baselines[1].status, "ok") << r.baselines[1].error;
  for (const BaselineResult& b : r.baselines) {
    ASSERT_TRUE(b.ms) << b.name;  // timed interleaved
    EXPECT_GT(b.ms->median, 0.0);
    EXPECT_GE(b.ms->runs, 10);
  }
  // cuBLASLt checked against the whole problem instead: SiLU is missing, and the check sees it.
  const DeviceBuffer memory(256);
  const Baseline lt = make_cublaslt_baseline(*blas, c, aligned_sample(c, memory));
  EXPECT_EQ(verify(c, lt.launch, 4).status, RunStatus::Wrong);
}

TEST_F(GpuVerifier, TimingGivesOrderedStatistics) {
  const GemmCase c = fp32_case(PrecisionMode::Strict, "m=1024,n=1024,k=1024");
  const Baseline sgemm = make_cublas_baseline(*blas, c);
  const DeviceBuffer a(1024 * 1024 * 4), b(1024 * 1024 * 4), d(1024 * 1024 * 4);
  launch_fill_uniform(a.data(), ElementType::F32, 1024 * 1024, 1, 1.0f, nullptr);
  launch_fill_uniform(b.data(), ElementType::F32, 1024 * 1024, 2, 0.1f, nullptr);
  FACT_CUDA_CHECK(cudaDeviceSynchronize());
  FactGemmArgs args = gemm::gemm_args(c.problem);
  args.a = a.data();
  args.b = b.data();
  args.d = d.data();
  TimingOptions options;
  options.warmup_runs = 2;
  options.min_runs = 12;
  options.min_time_s = 0.0;
  L2Flusher flusher;
  EXPECT_GE(flusher.bytes(), size_t{64} << 20);
  const CudaStream stream;
  const TimingStats s = time_launches([&](cudaStream_t st) { sgemm.launch(args, st); },
                                      stream.get(), options, &flusher);
  EXPECT_GE(s.runs, 12);
  EXPECT_GT(s.min, 0.0);
  EXPECT_LE(s.min, s.p10);
  EXPECT_LE(s.p10, s.median);
  EXPECT_LE(s.median, s.p90);
  EXPECT_LE(s.p90, s.max);
  // 2·1024³ FLOPs: between 1 and 200 TFLOP/s for an fp32 SGEMM on any recent GPU.
  const double tflops = tflops_per_s(2.0 * 1024 * 1024 * 1024, s.median);
  EXPECT_GT(tflops, 1.0);
  EXPECT_LT(tflops, 200.0);
  // Interleaved with an empty launch: one set of statistics each, in order.
  const std::vector<TimingStats> both = time_interleaved(
      {[&](cudaStream_t st) { sgemm.launch(args, st); }, [](cudaStream_t st) { launch_empty_kernel(st); }},
      stream.get(), options, &flusher);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_GE(both[1].runs, 12);
  EXPECT_LT(both[1].median, both[0].median);
}

}  // namespace
}  // namespace fact::runtime
