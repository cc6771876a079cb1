// The kernels the rmsnorm fold makes (a projection GEMM reading the pre-norm x whose first
// epilogue step scales each row by RMSNorm's rstd, gemm_epilogue.cuh's RowScale link) compiled
// at test time and run through the GEMM kind's runtime (run_kernel: the verification sequence
// against the float64 reference with the output poisoned first, every element compared, guard
// bands around D, the inputs unchanged, a second stream, fresh inputs): issue 12 item 2.
//   - the Llama-3-8B k/v projection at full size (8192 tokens x 4096 -> 1024), row scale alone;
//   - its SwiGLU gate/up GEMM (4096 -> 2 x 14336 interleaved) with the row scale before the glu
//     store (the scale reaches the gate and the up columns);
//   - its q projection (32 heads of 128, T 2048) with the row scale before the rope store;
//   - a Qwen2-style projection with a bias after the row scale over a ragged M and N (300 rows,
//     896 columns: partial CTA tiles in both modes, so the row vector's tail is predicated).
// The row scales are random (not an rstd of anything, negative ones included), so a kernel
// that read the wrong row, or the column index, fails.
// GPU tests: they skip (before compiling anything) without a CUDA device, and need a Hopper GPU
// (sm_90a) to run the kernels; each compiles one kernel (30-90 s of nvcc).
#include <gtest/gtest.h>

#include <filesystem>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/run_kernel.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/realize/spec.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"
#include "tests/cpp/runtime/runtime_test_support.hpp"

namespace fact::gemm {
namespace {

using graph::DType;
using Kind = EpilogueStep::Kind;
using runtime::PrecisionMode;
using runtime::RunReport;
using runtime::RunStatus;

class GpuRmsNormKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    FACT_REQUIRE_GPU();
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (major != 9) GTEST_SKIP() << "the kernels are built for sm_90a: needs a Hopper GPU";
    options_ = realize::default_compile_options();
    if (auto why = realize::compile_unavailable_reason(options_)) GTEST_SKIP() << *why;
  }

  // Renders the spec realization makes for `problem`, compiles it and runs every check of
  // run_kernel (timing off); returns the report.
  RunReport run(const GemmProblem& problem, const std::string& name) {
    const GemmSpec spec = spec_from_problem(problem, "native");
    EXPECT_EQ(gemm_spec_error(spec), std::nullopt);
    EXPECT_EQ(spec.epilogue.front().kind, Kind::RowScale);
    const realize::RenderedKernel kernel = realize::render_kernel(spec.to_kernel_spec(), options_);
    const realize::CompileResult built = realize::compile_kernel(kernel, dir_ / name, options_);
    EXPECT_TRUE(built.ok) << built.reason << "\n" << built.log.substr(0, 4000);
    if (!built.ok) return {};
    EXPECT_EQ(built.log.find("C7510"), std::string::npos);
    const std::filesystem::path problem_file = dir_ / (name + ".problem.json");
    runtime::test::write_text(problem_file, problem_to_json(to_problem(problem)).dump());
    runtime::RunKernelOptions o;
    o.lib = built.output.string();
    o.problem_json = problem_file.string();
    o.precision = PrecisionMode::Native;
    o.verify_only = true;
    o.seed = 2027;
    const RunReport report = runtime::run_kernel(o);
    EXPECT_EQ(report.status, RunStatus::Ok) << report.error;
    EXPECT_EQ(report.checks.size(), 5u);
    if (report.rel_err) EXPECT_LE(*report.rel_err, report.tolerance);
    std::cout << "[ rmsnorm ] " << spec.name() << ": rel_err "
              << (report.rel_err ? std::to_string(*report.rel_err) : std::string("-")) << "\n";
    return report;
  }

  runtime::test::ScratchDir dir_;
  realize::CompileOptions options_;
};

TEST_F(GpuRmsNormKernels, LlamaKvProjRowScaleBf16) {
  const RunReport r = run(make_gemm_problem({8192, 1024, 4096, 1}, DType::BFloat16, "row_scale", "tn"), "llama_kv");
  EXPECT_TRUE(r.rel_err.has_value());
}

TEST_F(GpuRmsNormKernels, LlamaSwigluGateUpRowScaleBf16) {
  const RunReport r = run(make_gemm_problem({8192, 2 * 14336, 4096, 1}, DType::BFloat16, "row_scale,glu_silu", "tn"),
                          "llama_gate_up");
  EXPECT_TRUE(r.rel_err.has_value());
}

TEST_F(GpuRmsNormKernels, LlamaQProjRowScaleRopeBf16) {
  GemmProblem p = make_gemm_problem({8192, 4096, 4096, 1}, DType::BFloat16, "row_scale,rope", "tn");
  p.epilogue.back().rope_period = 2048;
  const RunReport r = run(p, "llama_q_rope");
  EXPECT_TRUE(r.rel_err.has_value());
}

TEST_F(GpuRmsNormKernels, Qwen2RowScaleBiasRaggedBf16) {
  const RunReport r = run(make_gemm_problem({300, 896, 512, 1}, DType::BFloat16, "row_scale,bias", "tn"), "qwen2_ragged");
  EXPECT_TRUE(r.rel_err.has_value());
}

}  // namespace
}  // namespace fact::gemm
