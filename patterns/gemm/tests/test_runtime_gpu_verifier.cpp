// The verification sequence against correct and cheating "kernels" built from cuBLAS. Each
// cheat must be caught by the check meant for it. Skipped without a CUDA device.
#include <cstring>

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_kernels.hpp"
#include "fact/runtime/timing.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/runtime/blas_baselines.hpp"
#include "patterns/gemm/runtime/gemm_harness.hpp"
#include "patterns/gemm/runtime/verifier.hpp"
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
using gemm::GemmHarness;
using gemm::GemmSpec;
using gemm::Layout;
using gemm::make_cublas_baseline;
using gemm::make_cublaslt_baseline;
using gemm::verify_gemm;
using gemm::VerifyOutcome;
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

const CheckResult* failed_check(const VerifyOutcome& o) {
  for (const CheckResult& c : o.checks) {
    if (!c.passed) return &c;
  }
  return nullptr;
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
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  bool after_primary_called = false;
  const VerifyOutcome o = verify_gemm(harness, sgemm.launch, 1234, [&] { after_primary_called = true; });
  EXPECT_EQ(o.status, RunStatus::Ok) << o.error;
  ASSERT_EQ(o.checks.size(), 5u);
  EXPECT_TRUE(after_primary_called);
  const char* names[] = {"primary", "fresh_inputs", "other_stream", "repoison", "scalars"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(o.checks[i].name, names[i]);
    EXPECT_TRUE(o.checks[i].passed) << o.checks[i].failure;
    EXPECT_TRUE(o.checks[i].inputs_unchanged);
    EXPECT_EQ(o.checks[i].unwritten, 0);
    EXPECT_GT(o.checks[i].ref_norm, 0.0);
  }
  EXPECT_EQ(o.checks[2].stream, "secondary");
  EXPECT_NE(o.checks[0].seed, o.checks[1].seed);
  EXPECT_EQ(o.checks[1].seed, o.checks[2].seed);
  EXPECT_NE(o.checks[4].seed, o.checks[1].seed);
  ASSERT_TRUE(o.worst_rel_err);
  EXPECT_LT(*o.worst_rel_err, 1e-6);
  EXPECT_GT(*o.worst_rel_err, 0.0);  // float32 rounding is visible against float64
}

TEST_F(GpuVerifier, Tf32ProductsFailStrictButPassTf32) {
  GemmHarness strict(fp32_case(PrecisionMode::Strict, "m=256,n=256,k=1024"));
  GemmCase tf32_case = fp32_case(PrecisionMode::Tf32, "m=256,n=256,k=1024");
  const Baseline tf32 = make_cublas_baseline(*blas, tf32_case);
  const VerifyOutcome o = verify_gemm(strict, tf32.launch, 5);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "primary");
  EXPECT_GT(*failed_check(o)->rel_err, 1e-5);

  GemmHarness relaxed(tf32_case);
  const VerifyOutcome r = verify_gemm(relaxed, tf32.launch, 5);
  EXPECT_EQ(r.status, RunStatus::Ok) << r.error;
  EXPECT_LT(*r.worst_rel_err, kTf32Tolerance / 3);
}

TEST_F(GpuVerifier, KernelThatWritesNothingFails) {
  GemmHarness harness(fp32_case());
  const VerifyOutcome o = verify_gemm(harness, [](const FactGemmArgs&, cudaStream_t) { return 0; }, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_EQ(o.checks.size(), 1u);
  EXPECT_EQ(o.checks[0].unwritten, 256 * 192);
  EXPECT_FALSE(o.checks[0].rel_err.has_value());
  EXPECT_NE(o.error.find("not written"), std::string::npos) << o.error;
}

TEST_F(GpuVerifier, PartialWriteFails) {
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  auto last_row_poisoned = [&](const FactGemmArgs& args, cudaStream_t stream) {
    sgemm.launch(args, stream);
    std::vector<uint32_t> row(args.n, kPoisonF32);
    FACT_CUDA_CHECK(cudaMemcpyAsync(static_cast<float*>(args.d) + (args.m - 1) * args.ldd, row.data(),
                                    row.size() * 4, cudaMemcpyHostToDevice, stream));
    FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return 0;
  };
  const VerifyOutcome o = verify_gemm(harness, last_row_poisoned, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  EXPECT_EQ(o.checks.back().unwritten, 192);
}

TEST_F(GpuVerifier, ReplayingACachedResultFailsOnFreshInputs) {
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
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
  const VerifyOutcome o = verify_gemm(harness, replay, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "fresh_inputs");
  EXPECT_GT(*failed_check(o)->rel_err, 0.5);
}

TEST_F(GpuVerifier, SkippingWorkWhenOutputLooksDoneFailsRepoison) {
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  int calls = 0;
  auto lazy = [&](const FactGemmArgs& args, cudaStream_t stream) {
    // Skips its fourth call, the repoison check: the output of the third call on the same
    // inputs is still there, but the poison is not.
    ++calls;
    if (calls != 4) sgemm.launch(args, stream);
    return 0;
  };
  const VerifyOutcome o = verify_gemm(harness, lazy, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "repoison");
}

TEST_F(GpuVerifier, IgnoringAlphaFailsTheScalarsCheck) {
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  auto alpha_one = [&](const FactGemmArgs& args, cudaStream_t stream) {
    FactGemmArgs copy = args;
    copy.alpha = 1.0f;
    return sgemm.launch(copy, stream);
  };
  const VerifyOutcome o = verify_gemm(harness, alpha_one, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "scalars");
}

TEST_F(GpuVerifier, IgnoringTheStreamIsCaught) {
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  auto legacy_stream = [&](const FactGemmArgs& args, cudaStream_t) {
    return sgemm.launch(args, cudaStreamLegacy);
  };
  const VerifyOutcome o = verify_gemm(harness, legacy_stream, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_GT(failed_check(o)->unwritten, 0) << failed_check(o)->name;
}

TEST_F(GpuVerifier, ModifyingInputsIsCaught) {
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  auto scribble = [&](const FactGemmArgs& args, cudaStream_t stream) {
    sgemm.launch(args, stream);
    FACT_CUDA_CHECK(cudaMemsetAsync(const_cast<void*>(args.b), 0, 4, stream));
    return 0;
  };
  const VerifyOutcome o = verify_gemm(harness, scribble, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  EXPECT_FALSE(o.checks[0].inputs_unchanged);
  EXPECT_NE(o.error.find("modified its inputs"), std::string::npos) << o.error;
}

TEST_F(GpuVerifier, WritingOutsideDIsCaught) {
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  auto overflow = [&](const FactGemmArgs& args, cudaStream_t stream) {
    sgemm.launch(args, stream);
    FACT_CUDA_CHECK(cudaMemsetAsync(static_cast<float*>(args.d) + args.m * args.n, 0, 8, stream));
    return 0;
  };
  const VerifyOutcome o = verify_gemm(harness, overflow, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  EXPECT_EQ(o.checks[0].out_of_bounds, 2);
}

TEST_F(GpuVerifier, NaNNeverPasses) {
  GemmHarness harness(fp32_case());
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  auto one_nan = [&](const FactGemmArgs& args, cudaStream_t stream) {
    sgemm.launch(args, stream);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    FACT_CUDA_CHECK(cudaMemcpyAsync(args.d, &nan, 4, cudaMemcpyHostToDevice, stream));
    FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return 0;
  };
  const VerifyOutcome o = verify_gemm(harness, one_nan, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  EXPECT_EQ(o.checks[0].nonfinite, 1);
  EXPECT_FALSE(o.checks[0].rel_err.has_value());
}

TEST_F(GpuVerifier, RefusalsAndErrors) {
  GemmHarness harness(fp32_case());
  VerifyOutcome o = verify_gemm(
      harness, [](const FactGemmArgs&, cudaStream_t) { return int(FACT_ERR_CANNOT_IMPLEMENT); }, 1);
  EXPECT_EQ(o.status, RunStatus::CannotImplement);
  o = verify_gemm(harness, [](const FactGemmArgs&, cudaStream_t) { return int(FACT_ERR_LAUNCH); }, 1);
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
    GemmHarness harness(bf16_case(epilogue, "m=512,n=384,k=256,batch=2"));
    harness.randomize_inputs(3);
    const Baseline lt = make_cublaslt_baseline(*blas, harness.gemm_case(), harness.abi_args());
    EXPECT_TRUE(lt.fused) << lt.computes.fusion_name();
    // cuBLASLt's BIAS epilogue adds the bias as is: the scalars check keeps its multiplier 1.
    EXPECT_EQ(lt.bias_multiplier_fixed, epilogue.front().kind == Kind::Bias || epilogue.back().kind == Kind::Bias);
    const VerifyOutcome o = verify_gemm(harness, lt.launch, 9, {}, !lt.bias_multiplier_fixed);
    EXPECT_EQ(o.status, RunStatus::Ok) << lt.computes.fusion_name() << ": " << o.error << " " << lt.config;
  }
}

// The `scalars` check changes every step's constant: a launcher that reads the residual's beta
// from anywhere but its own step is caught there.
TEST_F(GpuVerifier, IgnoringAStepsConstantFailsTheScalarsCheck) {
  const EpilogueOpSpec bias{Kind::Bias, Activation::Identity, DType::BFloat16};
  const EpilogueOpSpec residual{Kind::Residual, Activation::Identity, DType::BFloat16};
  GemmHarness harness(bf16_case({residual, bias}, "m=256,n=256,k=128"));
  harness.randomize_inputs(3);
  const Baseline lt = make_cublaslt_baseline(*blas, harness.gemm_case(), harness.abi_args());
  ASSERT_TRUE(lt.fused);
  auto beta_one = [&](const FactGemmArgs& args, cudaStream_t stream) {
    FactGemmArgs copy = args;
    copy.steps[0].value = 1.0f;
    return lt.launch(copy, stream);
  };
  const VerifyOutcome o = verify_gemm(harness, beta_one, 1);
  EXPECT_EQ(o.status, RunStatus::Wrong);
  ASSERT_NE(failed_check(o), nullptr);
  EXPECT_EQ(failed_check(o)->name, "scalars");
}

TEST_F(GpuVerifier, UnfusedBaselinesAreCheckedAgainstWhatTheyCompute) {
  const EpilogueOpSpec bias{Kind::Bias, Activation::Identity, DType::BFloat16};
  const EpilogueOpSpec silu{Kind::Activation, Activation::SiLU, DType::Unknown};
  GemmHarness harness(bf16_case({bias, silu}, "m=256,n=128,k=64"));
  harness.randomize_inputs(4);
  const Baseline lt = make_cublaslt_baseline(*blas, harness.gemm_case(), harness.abi_args());
  EXPECT_FALSE(lt.fused);
  EXPECT_EQ(lt.computes.fusion_name(), "gemm_bias");
  int status = 0;
  const CheckResult own = harness.check("lt", lt.launch, lt.computes, harness.primary_stream(),
                                        kHalfOutputTolerance, &status);
  EXPECT_TRUE(own.passed) << own.failure;
  const CheckResult full = harness.check("lt_vs_full", lt.launch, harness.gemm_case().problem,
                                         harness.primary_stream(), kHalfOutputTolerance, &status);
  EXPECT_FALSE(full.passed);  // SiLU is missing, and the check sees it

  const Baseline blas_gemm = make_cublas_baseline(*blas, harness.gemm_case());
  EXPECT_EQ(blas_gemm.computes.fusion_name(), "gemm");
  const CheckResult plain = harness.check("cublas", blas_gemm.launch, blas_gemm.computes,
                                          harness.primary_stream(), kHalfOutputTolerance, &status);
  EXPECT_TRUE(plain.passed) << plain.failure;
}

TEST_F(GpuVerifier, TimingGivesOrderedStatistics) {
  GemmHarness harness(fp32_case(PrecisionMode::Strict, "m=1024,n=1024,k=1024"));
  harness.randomize_inputs(1);
  const Baseline sgemm = make_cublas_baseline(*blas, harness.gemm_case());
  TimingOptions options;
  options.warmup_runs = 2;
  options.min_runs = 12;
  options.min_time_s = 0.0;
  L2Flusher flusher;
  EXPECT_GE(flusher.bytes(), size_t{64} << 20);
  const FactGemmArgs args = harness.abi_args();
  const TimingStats s = time_launches([&](cudaStream_t st) { sgemm.launch(args, st); },
                                      harness.primary_stream(), options, &flusher);
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
}

}  // namespace
}  // namespace fact::runtime
