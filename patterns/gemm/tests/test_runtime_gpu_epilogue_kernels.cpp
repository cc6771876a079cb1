// The rendered CUTLASS kernels of epilogue chains, compiled at test time and run through
// the GEMM kind's runtime (run_kernel: the verification sequence against the float64 reference,
// every step with its own constants, the `scalars` check changing each of them):
//   (a) bias -> x * 0.5 -> hardtanh(-2, 2) -> gelu_erf, bf16 (once composed to zeros)
//   (b) a residual and a product with two M×N operands in one kernel, bf16
//   (c) two activations with parameters of their own, fp16 operands, float32 output
//   (d) the strict 3xTF32 Hopper kernel with a six-step chain, float32, also on the K-sliced path
//   (e) A and B row-major in precision tf32: one TF32 product on gemm_f32_strict's mainloop
//       (`x @ W` in tf32, once refused)
//   (f) two batch modes: a batched bf16 kernel run on outer batches × batches, with
//       a residual and a bias scaled by its step's value (the `scalars` check changes it); and
//       the strict Hopper kernel with two batch modes
//   (g) the direct-store variant (D's rows not 16-byte aligned, written element-wise without
//       TMA): a GPT-2 LM head (N = 50257), small odd N with ragged last tiles, and a
//       bias -> tanh-GELU -> scale -> add chain
//   (h) zero padding (rows not 16-byte aligned: gemm_padding.h): bf16 K = 770 with a bias, and
//       the strict 3xTF32 kernel on a batched float32 product with K = 5921 and N = 301 (K and N
//       padded, D written into the workspace and copied back); the verifier's operands are
//       compact and unaligned, so the entry stages them
// (The kernels of steps pattern folders register are tested in those folders' tests/.)
// GPU tests: they skip (before compiling anything) without a CUDA device, and need a Hopper GPU
// (sm_90a) to run the kernels; each compiles one kernel (30-60 s of nvcc).
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <limits>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/realize/render.hpp"
#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/run_kernel.hpp"
#include "patterns/gemm/runtime/gemm_case.hpp"
#include "fact/runtime/cuda_backend.hpp"
#include "fact/runtime/verifier.hpp"
#include "patterns/gemm/runtime/gemm_verify_case.hpp"
#include "patterns/gemm/kind/padding.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/realize/spec.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"
#include "patterns/gemm/tests/gpu_kernel_test.hpp"
#include "tests/cpp/runtime/runtime_test_support.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;
using core::PrecisionMode;
using runtime::RunReport;
using runtime::RunStatus;

EpilogueStep step(Kind kind, double value = 1.0, Activation act = Activation::Identity,
                  double p0 = 0.0, double p1 = 0.0, DType operand = DType::Unknown) {
  EpilogueStep s;
  s.kind = kind;
  s.value = value;
  s.activation = act;
  s.p0 = p0;
  s.p1 = p1;
  if (reads_operand(kind)) {
    s.operand = "operand";
    s.operand_dtype = operand;
  }
  return s;
}

class GpuEpilogueKernels : public test::GpuGemmKernelTest {
 protected:
  RunReport run(const GemmSpec& spec, const GemmProblem& problem, PrecisionMode precision,
                const std::string& name) {
    return compile_and_verify(spec, problem, precision, name);
  }
};

TEST_F(GpuEpilogueKernels, BiasScaleHardtanhGeluErfChainBf16) {
  GemmProblem p = make_gemm_problem({1024, 768, 512, 1}, DType::BFloat16, "", "tn");
  p.epilogue = {step(Kind::Bias, 1.0, Activation::Identity, 0, 0, DType::BFloat16),
                step(Kind::Scale, 0.5),
                step(Kind::Activation, 1.0, Activation::HardTanh, -2.0, 2.0),
                step(Kind::Activation, 1.0, Activation::GeluErf)};
  GemmSpec s;
  s.tile = {128, 128, 64};
  s.cluster = {1, 2, 1};
  s.mainloop = MainloopSchedule::Pingpong;
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                {Kind::Scale, Activation::Identity, DType::Unknown},
                {Kind::Activation, Activation::HardTanh, DType::Unknown},
                {Kind::Activation, Activation::GeluErf, DType::Unknown}};
  const RunReport r = run(s, p, PrecisionMode::Native, "issue_chain");
  if (!r.problem.is_null() && r.problem.contains("epilogue")) {
    EXPECT_EQ(r.problem.at("epilogue")[2].at("p0"), -2.0);  // the hardtanh keeps its own bounds
    EXPECT_EQ(r.problem.at("epilogue")[2].at("p1"), 2.0);
  }
}

TEST_F(GpuEpilogueKernels, ResidualAndMultiplyBf16) {
  GemmProblem p = make_gemm_problem({512, 1024, 256, 2}, DType::BFloat16, "", "tn");
  p.epilogue = {step(Kind::Residual, 0.75, Activation::Identity, 0, 0, DType::BFloat16),
                step(Kind::Activation, 1.0, Activation::SiLU),
                step(Kind::Multiply, 1.0, Activation::Identity, 0, 0, DType::BFloat16),
                step(Kind::AddScalar, 0.25)};
  GemmSpec s;
  s.batched = true;
  s.tile = {128, 256, 64};
  s.cluster = {2, 1, 1};
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue = {{Kind::Residual, Activation::Identity, DType::BFloat16},
                {Kind::Activation, Activation::SiLU, DType::Unknown},
                {Kind::Multiply, Activation::Identity, DType::BFloat16},
                {Kind::AddScalar, Activation::Identity, DType::Unknown}};
  run(s, p, PrecisionMode::Native, "two_operands");
}

TEST_F(GpuEpilogueKernels, TwoParametrizedActivationsFp16ToFloat32) {
  GemmProblem p = make_gemm_problem({640, 512, 384, 1}, DType::Float16, "", "tn");
  p.d.dtype = DType::Float32;
  p.epilogue = {step(Kind::Activation, 1.0, Activation::LeakyReLU, 0.125),
                step(Kind::Activation, 1.0, Activation::HardTanh, -0.5,
                     std::numeric_limits<double>::infinity()),
                step(Kind::Activation, 1.0, Activation::Tanh),
                step(Kind::Bias, 1.0, Activation::Identity, 0, 0, DType::Float32)};
  GemmSpec s;
  s.a_dtype = s.b_dtype = DType::Float16;
  s.d_dtype = DType::Float32;
  s.align_d = 4;
  s.tile = {64, 128, 64};
  s.mainloop = MainloopSchedule::Pingpong;
  s.epilogue = {{Kind::Activation, Activation::LeakyReLU, DType::Unknown},
                {Kind::Activation, Activation::HardTanh, DType::Unknown},
                {Kind::Activation, Activation::Tanh, DType::Unknown},
                {Kind::Bias, Activation::Identity, DType::Float32}};
  run(s, p, PrecisionMode::Native, "activations");
}

GemmSpec strict_chain_spec() {
  GemmSpec s;
  s.pattern = "gemm_f32_strict";
  s.a_dtype = s.b_dtype = s.d_dtype = DType::Float32;
  s.align_a = s.align_b = s.align_d = 4;
  s.math = MathMode::Tf32x3;
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue_schedule = EpilogueSchedule::TmaCooperative;
  s.tile = {128, 128, 32};
  s.stages = 3;
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::Float32},
                {Kind::Scale, Activation::Identity, DType::Unknown},
                {Kind::Activation, Activation::GeluTanh, DType::Unknown},
                {Kind::Residual, Activation::Identity, DType::Float32},
                {Kind::Multiply, Activation::Identity, DType::Float32},
                {Kind::Activation, Activation::Tanh, DType::Unknown}};
  return s;
}

GemmProblem strict_chain_problem(int64_t m, int64_t n, int64_t k) {
  GemmProblem p = make_gemm_problem({m, n, k, 1}, DType::Float32, "", "tn");
  p.epilogue = {step(Kind::Bias, 1.0, Activation::Identity, 0, 0, DType::Float32),
                step(Kind::Scale, 1.5), step(Kind::Activation, 1.0, Activation::GeluTanh),
                step(Kind::Residual, -0.5, Activation::Identity, 0, 0, DType::Float32),
                step(Kind::Multiply, 1.0, Activation::Identity, 0, 0, DType::Float32),
                step(Kind::Activation, 1.0, Activation::Tanh)};
  return p;
}

// Strict: 1e-5 against float64 and within 20x of cuBLAS SGEMM's own error; the second problem
// has few output tiles and a deep K, so the persistent kernel runs K-slices and the reduction
// applies the chain once.
TEST_F(GpuEpilogueKernels, StrictMultiStepChain) {
  const RunReport r = run(strict_chain_spec(), strict_chain_problem(1024, 512, 768),
                          PrecisionMode::Strict, "strict_chain");
  if (r.accuracy) EXPECT_TRUE(r.accuracy->within_limit);
  run(strict_chain_spec(), strict_chain_problem(256, 256, 65536), PrecisionMode::Strict,
      "strict_chain_k_sliced");
}

// `x @ W + b` then GELU in precision tf32 with A and B row-major: the tolerance of the tf32
// contract (5e-3).
TEST_F(GpuEpilogueKernels, Tf32RowMajorB) {
  GemmProblem p = make_gemm_problem({1024, 1024, 1024, 1}, DType::Float32, "", "tt");
  p.epilogue = {step(Kind::Bias, 1.0, Activation::Identity, 0, 0, DType::Float32),
                step(Kind::Activation, 1.0, Activation::GeluErf)};
  GemmSpec s = strict_chain_spec();
  s.math = MathMode::Tf32;
  s.b_layout = Layout::RowMajor;
  s.tile = {256, 128, 32};
  s.stages = 4;
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::Float32},
                {Kind::Activation, Activation::GeluErf, DType::Unknown}};
  const RunReport r = run(s, p, PrecisionMode::Tf32, "tf32_row_major_b");
  EXPECT_DOUBLE_EQ(r.tolerance, 5e-3);
}

// Attention-score shaped: 3 outer batches of an 8-batch kernel (the entry's loop), a residual
// per (outer, batch) and a bias scaled by 0.5 (addmm's beta), verified against the float64
// reference over both modes.
TEST_F(GpuEpilogueKernels, TwoBatchModesBf16) {
  GemmProblem p = make_gemm_problem({256, 384, 64, 8, 3}, DType::BFloat16, "", "tn");
  p.epilogue = {step(Kind::Residual, 1.0, Activation::Identity, 0, 0, DType::BFloat16),
                step(Kind::Bias, 0.5, Activation::Identity, 0, 0, DType::BFloat16)};
  GemmSpec s;
  s.batched = true;
  s.tile = {128, 128, 64};
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue = {{Kind::Residual, Activation::Identity, DType::BFloat16},
                {Kind::Bias, Activation::Identity, DType::BFloat16}};
  const RunReport r = run(s, p, PrecisionMode::Native, "two_modes");
  if (!r.problem.is_null()) EXPECT_EQ(r.problem.at("shape"), "3x8x(256x384x64)");
}

// The strides attention has: A and D [batch][outer] (the kernel's mode outermost in memory),
// B shared by the kernel's batches (GQA values expanded over the heads: a zero batch stride on a
// TMA-read operand), an additive mask shared by the heads (the residual, read through CUTLASS's
// C: batch stride 0), a bias per outer batch scaled by its value. run_kernel's operands are
// compact, so this one runs the one verifier on a GemmVerifyCase with these strides itself.
TEST_F(GpuEpilogueKernels, TwoBatchModesWithZeroStridesAndPermutedOperands) {
  GemmSpec s;
  s.batched = true;
  s.tile = {128, 128, 64};
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue = {{Kind::Residual, Activation::Identity, DType::BFloat16},
                {Kind::Bias, Activation::Identity, DType::BFloat16}};
  const realize::RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
  const realize::CompileResult built = realize::compile_kernel(kernel, dir_ / "zero_strides", options_);
  ASSERT_TRUE(built.ok) << built.reason << "\n" << built.log.substr(0, 4000);
  GemmProblem given = make_gemm_problem({128, 256, 64, 4, 2}, DType::BFloat16, "", "tn");
  given.epilogue = {step(Kind::Residual, 1.0, Activation::Identity, 0, 0, DType::BFloat16),
                    step(Kind::Bias, 0.5, Activation::Identity, 0, 0, DType::BFloat16)};
  GemmCase c = make_gemm_case(s, given, PrecisionMode::Native);
  GemmProblem& p = c.problem;
  const int64_t mk = p.m * p.k, kn = p.k * p.n, mn = p.m * p.n;
  p.a.batch_stride = 2 * mk;
  p.a.outer_batch_stride = mk;
  p.b.batch_stride = 0;
  p.b.outer_batch_stride = kn;
  p.d.batch_stride = 2 * mn;
  p.d.outer_batch_stride = mn;
  p.epilogue[0].operand_batch_stride = 0;
  p.epilogue[0].operand_outer_batch_stride = mn;
  p.epilogue[1].operand_batch_stride = 0;
  p.epilogue[1].operand_outer_batch_stride = p.n;
  runtime::KernelLibrary library(built.output.string());
  runtime::CudaBackend backend(false);
  GemmVerifyCase verify_case(c, false);
  runtime::VerifyOptions options;
  options.base_seed = 2026;
  options.verify_only = true;
  RunReport outcome;
  runtime::verify_and_time(backend, verify_case, library.entry(), options, nullptr, outcome);
  EXPECT_EQ(outcome.status, RunStatus::Ok) << outcome.error;
  EXPECT_EQ(outcome.checks.size(), 5u);
}

TEST_F(GpuEpilogueKernels, StrictTwoBatchModes) {
  GemmProblem p = make_gemm_problem({256, 256, 512, 4, 2}, DType::Float32, "", "tn");
  p.epilogue = strict_chain_problem(256, 256, 512).epilogue;
  GemmSpec s = strict_chain_spec();
  s.batched = true;
  const RunReport r = run(s, p, PrecisionMode::Strict, "strict_two_modes");
  if (r.accuracy) EXPECT_TRUE(r.accuracy->within_limit);
}

// The direct-store variant, specs as the engine makes them (spec_from_problem: align_d 1, the
// direct-store collective), verified element by element against the float64 reference with guard bands
// around D (a store past a row's end or a ragged tile's edge is caught).
// GPT-2's LM head: N = 50257 (393 tiles of 128 columns, the last one 81 wide), K = 768; M is
// cut to 256 rows to keep the float64 reference short.
TEST_F(GpuEpilogueKernels, DirectStoreLmHeadBf16N50257) {
  const GemmProblem p = make_gemm_problem({256, 50257, 768, 1}, DType::BFloat16, "", "tn");
  const GemmSpec s = spec_from_problem(p, PrecisionMode::Native);
  ASSERT_EQ(s.align_d, 1);
  const RunReport r = run(s, p, PrecisionMode::Native, "direct_store_lm_head");
  std::cout << "[ direct store ] " << s.name() << " " << rel_err_text(r) << "\n";
}

// The same LM head with padded rows (give_d_padded_rows: D [256, 50264], the result a view of
// its [:, :50257]): the aligned TMA kernel at N = 50264 (align_d 8), B staged per call to its
// padded rows (here no weight padded once), D written in place, its padding columns included
// (the verifier lets the call write D's gaps, BufferSpec::gaps_writable, and checks the guard
// bands around the whole [256, 50264] allocation). Not yet run on a GPU.
TEST_F(GpuEpilogueKernels, PaddedRowsLmHeadBf16N50257) {
  GemmProblem p = make_gemm_problem({256, 50257, 768, 1}, DType::BFloat16, "", "tn");
  ASSERT_EQ(give_d_padded_rows(p), std::nullopt);
  ASSERT_EQ(p.d.ld, 50264);
  const GemmSpec s = spec_from_problem(p, PrecisionMode::Native);
  ASSERT_EQ(s.align_d, 8);
  ASSERT_FALSE(stores_d_directly(s));
  const RunReport r = run(s, p, PrecisionMode::Native, "padded_rows_lm_head");
  std::cout << "[ padded rows ] " << s.name() << " " << rel_err_text(r) << "\n";
}

// Small odd N with ragged last tiles in M and N (200 x 77 and 200 x 1001, fp16), once with the
// default configuration (cooperative 128x128) and once as 64x128 ping-pong tiles with an alpha
// of 0.5 (a scale folded into alpha: the variant's only constant).
TEST_F(GpuEpilogueKernels, DirectStoreOddNRaggedTilesFp16) {
  for (int64_t n : {77, 1001}) {
    GemmProblem p = make_gemm_problem({200, n, 264, 1}, DType::Float16, "", "tn");
    const GemmSpec s = spec_from_problem(p, PrecisionMode::Native);
    ASSERT_EQ(s.align_d, 1);
    const RunReport r = run(s, p, PrecisionMode::Native, "direct_store_n" + std::to_string(n));
    std::cout << "[ direct store ] " << s.name() << " " << rel_err_text(r) << "\n";
  }
  GemmProblem p = make_gemm_problem({200, 1001, 264, 1}, DType::Float16, "", "tn");
  p.alpha = 0.5;
  GemmSpec s = spec_from_problem(p, PrecisionMode::Native);
  s.tile = {64, 128, 64};
  s.cluster = {1, 2, 1};
  s.mainloop = MainloopSchedule::Pingpong;
  const RunReport r = run(s, p, PrecisionMode::Native, "direct_store_pingpong");
  std::cout << "[ direct store ] " << s.name() << " " << rel_err_text(r) << "\n";
}

// The direct store computes the chain per element: bias (scaled by 1.25) -> tanh-GELU -> x 0.5
// -> + 0.25 on bf16 with ragged last tiles, the `scalars` check changing every step's
// constant. (An M×N operand with the same unaligned rows is refused by the entry's operand
// checks, as discovery declines it.)
TEST_F(GpuEpilogueKernels, DirectStoreBiasGeluChainBf16) {
  GemmProblem p = make_gemm_problem({200, 1001, 264, 1}, DType::BFloat16, "", "tn");
  p.epilogue = {step(Kind::Bias, 1.25, Activation::Identity, 0, 0, DType::BFloat16),
                step(Kind::Activation, 1.0, Activation::GeluTanh),
                step(Kind::Scale, 0.5),
                step(Kind::AddScalar, 0.25)};
  const GemmSpec s = spec_from_problem(p, PrecisionMode::Native);
  ASSERT_EQ(s.align_d, 1);
  ASSERT_EQ(s.epilogue.size(), 4u);
  const RunReport r = run(s, p, PrecisionMode::Native, "direct_store_chain");
  std::cout << "[ direct store ] " << s.name() << " " << rel_err_text(r) << "\n";
}

// Zero padding: K = 770 in bf16 (A and B staged into the workspace with K = 776, zeros past
// K), checked against the float64 reference of the unpadded product.
TEST_F(GpuEpilogueKernels, PaddedKBf16K770WithBias) {
  GemmProblem p = make_gemm_problem({1000, 768, 770, 1}, DType::BFloat16, "", "tn");
  p.epilogue = {step(Kind::Bias, 1.0, Activation::Identity, 0, 0, DType::BFloat16)};
  ASSERT_EQ(padding_summary(p), "K padded 770\u2192776");
  const GemmSpec s = spec_from_problem(p, PrecisionMode::Native);
  ASSERT_EQ(s.align_a, 8);
  ASSERT_EQ(s.align_b, 8);
  const RunReport r = run(s, p, PrecisionMode::Native, "padded_k770");
  std::cout << "[ padded ] " << s.name() << " " << rel_err_text(r) << "\n";
}

// The strict kernel on every extent odd, batched: K 5921 -> 5924, N 301 -> 304, D through the
// workspace; the class the strict realizer makes for it.
TEST_F(GpuEpilogueKernels, PaddedStrictFloat32OddExtentsBatched) {
  GemmProblem p = make_gemm_problem({1029, 301, 5921, 2}, DType::Float32, "", "tn");
  ASSERT_EQ(padding_summary(p), "K padded 5921\u21925924, N padded 301\u2192304");
  const Problem problem = to_problem(p);
  const realize::Realizer& realizer =
      realize::RealizerRegistry::global().for_problem(problem, PrecisionMode::Strict);
  const GemmSpec s = GemmSpec::of(realizer.problem_class(problem, PrecisionMode::Strict));
  ASSERT_EQ(s.pattern, "gemm_f32_strict");
  ASSERT_EQ(s.align_d, 4);
  const RunReport r = run(s, p, PrecisionMode::Strict, "padded_strict");
  std::cout << "[ padded ] " << s.name() << " " << rel_err_text(r) << "\n";
}

}  // namespace
}  // namespace fact::gemm
