// The glu kernels (one GEMM over interleaved gate / up columns whose Glu step writes
// D = act(gate) · up, M × N/2, through its own TMA store: glu_store.cuh) compiled at test time
// and run through the GEMM kind's runtime (run_kernel: the verification sequence against the
// float64 reference with the output poisoned first, every element compared, guard bands around
// D, the inputs unchanged, a second stream, fresh inputs):
//   - SwiGLU at the Llama-3-8B MLP's full size: x [8192, 4096] times gate and up weights
//     interleaved column by column [4096, 2·14336], D = silu(gate) · up [8192, 14336] bf16;
//   - GeGLU as a fused projection with a bias makes it (bias, then glu(gelu_erf); the bias
//     interleaved like the weight) over a ragged M (not a tile multiple) and N/2 = 520 columns
//     (not a tile multiple either): the glu store clips at M and N/2, nothing is written past D.
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
using core::PrecisionMode;
using runtime::RunReport;

class GpuGluKernels : public test::GpuGemmKernelTest {
 protected:
  // The spec realization makes for `problem`, compiled and verified (compile_and_verify).
  RunReport run(const GemmProblem& problem, const std::string& name) {
    const GemmSpec spec = spec_from_problem(problem, PrecisionMode::Native);
    EXPECT_EQ(gemm_spec_error(spec), std::nullopt);
    const RunReport report = compile_and_verify(spec, problem, PrecisionMode::Native, name, 2026);
    std::cout << "[ glu ] " << spec.name() << ": " << rel_err_text(report) << "\n";
    return report;
  }
};

TEST_F(GpuGluKernels, SwiGluLlamaMlpBf16) {
  const GemmProblem p = make_gemm_problem({8192, 2 * 14336, 4096, 1}, DType::BFloat16, "glu_silu", "tn");
  const RunReport r = run(p, "swiglu_llama");
  EXPECT_TRUE(r.rel_err.has_value());
}

TEST_F(GpuGluKernels, BiasGeGluRaggedBf16) {
  const GemmProblem p =
      make_gemm_problem({1000, 2 * 520, 512, 1}, DType::BFloat16, "bias,glu_gelu_erf", "tn");
  const RunReport r = run(p, "bias_geglu_ragged");
  EXPECT_TRUE(r.rel_err.has_value());
}

}  // namespace
}  // namespace fact::gemm
