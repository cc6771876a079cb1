// End to end: a kernel library built at test time (the FACT C ABI v2 over cuBLAS SGEMM) loaded,
// verified, timed and compared by run_kernel / run_kernel_command through the GEMM kind's
// runtime. Skipped without a CUDA device or when the fixture cannot be compiled (the reason is
// printed).
#include <gtest/gtest.h>

#include <filesystem>

#include "fact/realize/kernel_spec.hpp"
#include "fact/runtime/device_probe.hpp"
#include "fact/runtime/run_kernel.hpp"
#include "patterns/gemm/realize/spec.hpp"
#include "tests/cpp/runtime/runtime_test_support.hpp"

namespace fact::runtime {
namespace {

using core::PrecisionMode;
using core::kStrictTolerance;
using test::ScratchDir;

// mode 0: correct; 1: returns OK without computing; 2: refuses (FACT_ERR_CANNOT_IMPLEMENT).
std::string sgemm_library_source(int mode) {
  gemm::GemmSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = graph::DType::Float32;
  spec.a_layout = gemm::Layout::RowMajor;
  spec.b_layout = gemm::Layout::ColumnMajor;
  spec.math = gemm::MathMode::Simt;
  spec.batched = true;
  const nlohmann::json info = {{"kind", "gemm"},
                               {"abi_version", FACT_ABI_VERSION},
                               {"entry", "fact_test_sgemm"},
                               {"key", "test"},
                               {"name", spec.name()},
                               {"spec", spec.to_kernel_spec().to_json()}};
  return R"(#include <cublas_v2.h>
#include "patterns/gemm/gemm_abi.h"
#define MODE )" + std::to_string(mode) + R"(
static cublasHandle_t handle() {
  static cublasHandle_t h = [] { cublasHandle_t x = nullptr; cublasCreate(&x); return x; }();
  return h;
}
extern "C" const char* fact_kernel_info(void) { return R"J()" + info.dump() + R"()J"; }
extern "C" int fact_test_sgemm(const FactCallHeader* h, void*, size_t* workspace, void* stream) {
  if (!h || h->abi_version != FACT_ABI_VERSION || h->kind != fact_kind_id("gemm") ||
      h->size != sizeof(FactGemmArgs)) return FACT_ERR_INVALID_ARGS;
  const FactGemmArgs* a = (const FactGemmArgs*)h;
  if (a->num_steps != 0 || a->a_type != FACT_DTYPE_F32) return FACT_ERR_INVALID_ARGS;
  if (workspace) { *workspace = 0; return FACT_OK; }
  if (MODE == 2) return FACT_ERR_CANNOT_IMPLEMENT;
  if (MODE == 1) return FACT_OK;
  // Row-major D = A (row-major) * B (column-major), as column-major D^T = B^T * A^T.
  cublasSetStream(handle(), static_cast<cudaStream_t>(stream));
  const float alpha = a->alpha, beta = 0.0f;
  const cublasStatus_t s = cublasSgemmStridedBatched(
      handle(), CUBLAS_OP_T, CUBLAS_OP_N, int(a->n), int(a->m), int(a->k), &alpha,
      static_cast<const float*>(a->b), int(a->ldb), a->stride_b, static_cast<const float*>(a->a),
      int(a->lda), a->stride_a, &beta, static_cast<float*>(a->d), int(a->ldd), a->stride_d,
      int(a->batch));
  return s == CUBLAS_STATUS_SUCCESS ? FACT_OK : FACT_ERR_LAUNCH;
}
)";
}

class GpuRunKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test not run";
  }

  // Builds the fixture. Without cuBLAS headers the test is skipped (saying so); on a machine
  // that has them, a fixture that does not compile fails the test with the compiler's words.
  std::string library(int mode) {
    const auto src = dir / ("sgemm" + std::to_string(mode) + ".cpp");
    const auto lib = dir / ("sgemm" + std::to_string(mode) + ".so");
    test::write_text(src, sgemm_library_source(mode));
    const std::string cuda = test::cuda_home();
    if (!std::filesystem::exists(cuda + "/include/cublas_v2.h")) {
      skip_reason = "no cuBLAS headers under " + cuda + "/include (set CUDA_HOME)";
      return lib.string();
    }
    const std::string error = test::compile_shared_library(
        src, lib,
        "-I" + test::source_dir() + " -I" + test::source_dir() + "/include -I" +
            test::generated_dir() + " -I" + cuda + "/include -L" + cuda + "/lib64 -Wl,-rpath," +
            cuda + "/lib64 -lcublas -lcudart");
    if (!error.empty()) {
      ADD_FAILURE() << "the fixture library does not compile:\n" << error;
      skip_reason = "the fixture library does not compile";
    }
    return lib.string();
  }

  RunKernelOptions options(const std::string& lib) {
    RunKernelOptions o;
    o.lib = lib;
    o.problem = "m=512,n=256,k=384,batch=2";
    o.precision = PrecisionMode::Strict;
    o.timing.warmup_runs = 2;
    o.timing.min_runs = 10;
    o.timing.min_time_s = 0.0;
    o.seed = 77;
    return o;
  }

  ScratchDir dir;
  std::string skip_reason;
};

TEST_F(GpuRunKernel, CorrectLibraryIsVerifiedTimedAndCompared) {
  const std::string lib = library(0);
  if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
  RunKernelOptions o = options(lib);
  o.baselines = {"cublas", "cublaslt"};
  const RunReport r = run_kernel(o);
  ASSERT_EQ(r.status, RunStatus::Ok) << r.error;
  EXPECT_EQ(r.entry, "fact_test_sgemm");
  EXPECT_EQ(r.checks.size(), 5u);
  ASSERT_TRUE(r.rel_err);
  EXPECT_LT(*r.rel_err, kStrictTolerance);
  ASSERT_TRUE(r.accuracy);  // strict mode compares with cuBLAS SGEMM on the same inputs
  EXPECT_EQ(r.accuracy->against, "cublas");
  EXPECT_GT(r.accuracy->rel_err, 0.0);
  EXPECT_TRUE(r.accuracy->within_limit);
  ASSERT_TRUE(r.ms);
  EXPECT_GE(r.ms->runs, 10);
  ASSERT_TRUE(r.tflops);
  EXPECT_GT(*r.tflops, 0.0);
  ASSERT_EQ(r.baselines.size(), 2u);
  for (const BaselineResult& b : r.baselines) {
    EXPECT_EQ(b.status, "ok") << b.name << ": " << b.error;
    EXPECT_TRUE(b.fused);
    EXPECT_TRUE(b.ms);
    ASSERT_TRUE(b.check);
    EXPECT_LT(*b.check->rel_err, kStrictTolerance);
  }
  EXPECT_EQ(r.problem.at("fusion"), "bgemm");
  EXPECT_EQ(r.device.at("sm_count").get<int>() > 0, true);
  EXPECT_EQ(r.timing.at("base_seed").get<uint64_t>(), 77u);
}

TEST_F(GpuRunKernel, CommandWritesTheReportAndExitCode) {
  const std::string lib = library(0);
  if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
  RunKernelOptions o = options(lib);
  o.verify_only = true;
  o.json_path = (dir / "report.json").string();
  EXPECT_EQ(run_kernel_command(o), kExitOk);
  const RunReport r = run_report_from_json(nlohmann::json::parse(test::read_text(dir / "report.json")));
  EXPECT_EQ(r.status, RunStatus::Ok);
  EXPECT_FALSE(r.ms);  // verify only
}

TEST_F(GpuRunKernel, LazyLibraryIsWrongAndRefusingLibraryCannotImplement) {
  const std::string lazy = library(1);
  if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
  RunKernelOptions o = options(lazy);
  o.json_path = (dir / "lazy.json").string();
  EXPECT_EQ(run_kernel_command(o), kExitWrong);
  const nlohmann::json j = nlohmann::json::parse(test::read_text(dir / "lazy.json"));
  EXPECT_EQ(j.at("status"), "wrong");
  EXPECT_TRUE(j.at("ms").is_null());
  EXPECT_FALSE(j.at("checks").at("primary").at("passed").get<bool>());

  const std::string refusing = library(2);
  o = options(refusing);
  o.json_path = (dir / "refusing.json").string();
  EXPECT_EQ(run_kernel_command(o), kExitCannotImplement);
  EXPECT_EQ(nlohmann::json::parse(test::read_text(dir / "refusing.json")).at("status"),
            "cannot_implement");
}

TEST_F(GpuRunKernel, PrecisionBelowTheModeIsAnError) {
  const std::string lib = library(0);
  if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
  RunKernelOptions o = options(lib);
  o.precision = PrecisionMode::Native;  // the library reads float32 operands
  const RunReport r = run_kernel(o);
  EXPECT_EQ(r.status, RunStatus::Error);
  EXPECT_NE(r.error.find("native"), std::string::npos) << r.error;
}

TEST_F(GpuRunKernel, BaselineOnly) {
  RunKernelOptions o;
  o.baseline_only = true;
  o.problem = "m=1024,n=512,k=256";
  o.precision = PrecisionMode::Native;
  o.problem_words = {{"dtype", "bf16"}, {"epilogue", "bias,gelu_tanh"}};
  o.baselines = {"cublas", "cublaslt"};
  o.timing.min_runs = 10;
  o.timing.min_time_s = 0.0;
  const RunReport r = run_kernel(o);
  ASSERT_EQ(r.status, RunStatus::Ok) << r.error;
  EXPECT_TRUE(r.checks.empty());
  ASSERT_EQ(r.baselines.size(), 2u);
  EXPECT_EQ(r.baselines[0].computes, "gemm");
  EXPECT_FALSE(r.baselines[0].fused);
  EXPECT_EQ(r.baselines[1].computes, "gemm_bias_gelu_tanh");
  EXPECT_TRUE(r.baselines[1].fused);
  for (const BaselineResult& b : r.baselines) {
    EXPECT_EQ(b.status, "ok") << b.name << ": " << b.error;
    EXPECT_TRUE(b.ms);
  }
}

TEST(DeviceProbe, MeasuresPlausibleRates) {
  FACT_REQUIRE_GPU();
  DeviceProbeOptions options;
  options.gemm_size = 2048;
  options.copy_bytes = size_t{256} << 20;
  options.timing.min_runs = 5;
  options.timing.min_time_s = 0.0;
  const DeviceReport r = measure_device(options);
  EXPECT_GT(r.sm_count, 0);
  EXPECT_GT(r.l2_bytes, 0);
  EXPECT_GT(r.profile.hbm_bytes_per_s, 1e11);
  EXPECT_GT(r.profile.bf16_flops, r.profile.fp32_flops);
  EXPECT_GT(r.profile.tf32_flops, r.profile.fp32_flops);
  EXPECT_GT(r.profile.launch_overhead_s, 0.0);
  EXPECT_LT(r.profile.launch_overhead_s, 1e-3);
  EXPECT_EQ(device_profile_from_json(to_json(r)).bf16_flops, r.profile.bf16_flops);
}

}  // namespace
}  // namespace fact::runtime
