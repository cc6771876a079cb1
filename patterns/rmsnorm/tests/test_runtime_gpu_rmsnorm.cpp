// The kernels the rmsnorm fold makes (a projection GEMM reading the pre-norm x whose first
// epilogue step scales each row by RMSNorm's rstd, gemm_epilogue.cuh's RowScale link) compiled
// at test time and run through the GEMM kind's runtime (run_kernel: the verification sequence
// against the float64 reference with the output poisoned first, every element compared, guard
// bands around D, the inputs unchanged, a second stream, fresh inputs).
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

#include <iostream>


#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/realize/spec.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"
#include "patterns/gemm/tests/gpu_kernel_test.hpp"

namespace fact::gemm {
namespace {

using graph::DType;
using Kind = EpilogueStep::Kind;
using core::PrecisionMode;
using runtime::RunReport;

class GpuRmsNormKernels : public test::GpuGemmKernelTest {
 protected:
  // The spec realization makes for `problem`, compiled and verified (compile_and_verify).
  RunReport run(const GemmProblem& problem, const std::string& name) {
    const GemmSpec spec = spec_from_problem(problem, core::PrecisionMode::Native);
    EXPECT_EQ(gemm_spec_error(spec), std::nullopt);
    EXPECT_EQ(spec.epilogue.front().kind, Kind::RowScale);
    const RunReport report = compile_and_verify(spec, problem, PrecisionMode::Native, name, 2027);
    std::cout << "[ rmsnorm ] " << spec.name() << ": " << rel_err_text(report) << "\n";
    return report;
  }
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
  p.epilogue.back().period = 2048;
  const RunReport r = run(p, "llama_q_rope");
  EXPECT_TRUE(r.rel_err.has_value());
}

TEST_F(GpuRmsNormKernels, Qwen2RowScaleBiasRaggedBf16) {
  const RunReport r = run(make_gemm_problem({300, 896, 512, 1}, DType::BFloat16, "row_scale,bias", "tn"), "qwen2_ragged");
  EXPECT_TRUE(r.rel_err.has_value());
}

}  // namespace
}  // namespace fact::gemm
