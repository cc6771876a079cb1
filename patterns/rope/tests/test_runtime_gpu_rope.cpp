// The rope kernels (a projection GEMM whose Rope step rotates pairs of accumulator columns and
// writes each result to its original column, rope_store.cuh) compiled at test time and run
// through the GEMM kind's runtime (run_kernel: the verification sequence against the float64
// reference with the output poisoned first, every element compared, guard bands around D, the
// inputs unchanged, a second stream, fresh inputs).
//   - the Llama-3-8B q_proj at full size: 8192 tokens (4 sequences of 2048) x 4096 -> 32 heads
//     of 128, rotate-half, one cos / sin table for every sequence, bf16;
//   - its k_proj (8 heads of 128) with interleaved pairs and one table per sequence;
//   - a Qwen2-style q_proj with a bias before the rotation over a ragged M (300 rows: not a
//     tile multiple) and N = 896 (14 heads of 64: the last CTA tile half past N).
// The tables are random (not cos / sin of anything), so a kernel that assumed cos_i ==
// cos_{i+h} or read the wrong column of a table fails.
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

// A projection [m, k] x [k, n] (nn.Linear, bf16) whose output is rotated per head of `group`
// columns over sequences of `period` rows; `bias` adds a bias step before the rotation.
GemmProblem rope_problem(int64_t m, int64_t n, int64_t k, int64_t group, int64_t period, bool interleaved,
                         bool per_sequence, bool bias) {
  GemmProblem p = make_gemm_problem({m, n, k, 1}, DType::BFloat16, bias ? "bias" : "", "tn");
  EpilogueStep rope;
  rope.kind = Kind::Rope;
  rope.operand = "cos";
  rope.operand2 = "sin";
  rope.operand_dtype = DType::BFloat16;
  rope.operand_ld = group;
  rope.period = period;
  rope.period_stride = per_sequence ? period * group : 0;
  rope.group = group;
  rope.interleaved = interleaved;
  p.epilogue.push_back(rope);
  return p;
}

class GpuRopeKernels : public test::GpuGemmKernelTest {
 protected:
  // The spec realization makes for `problem`, compiled and verified (compile_and_verify).
  RunReport run(const GemmProblem& problem, const std::string& name) {
    const GemmSpec spec = spec_from_problem(problem, core::PrecisionMode::Native);
    EXPECT_EQ(gemm_spec_error(spec), std::nullopt);
    const RunReport report = compile_and_verify(spec, problem, PrecisionMode::Native, name, 2026);
    std::cout << "[ rope ] " << spec.name() << ": " << rel_err_text(report) << "\n";
    return report;
  }
};

TEST_F(GpuRopeKernels, LlamaQProjRotateHalfBf16) {
  const RunReport r = run(rope_problem(8192, 4096, 4096, 128, 2048, false, false, false), "llama_q_rope");
  EXPECT_TRUE(r.rel_err.has_value());
}

TEST_F(GpuRopeKernels, LlamaKProjInterleavedPerSequenceTablesBf16) {
  const RunReport r = run(rope_problem(8192, 1024, 4096, 128, 2048, true, true, false), "llama_k_rope_interleaved");
  EXPECT_TRUE(r.rel_err.has_value());
}

TEST_F(GpuRopeKernels, Qwen2BiasRotateHalfRaggedBf16) {
  const RunReport r = run(rope_problem(300, 896, 512, 64, 100, false, true, true), "qwen2_bias_rope_ragged");
  EXPECT_TRUE(r.rel_err.has_value());
}

}  // namespace
}  // namespace fact::gemm
