// GemmProblem -> GemmSpec: dtypes and math modes per precision, alignments, epilogue steps; and
// which realizer (gemm, gemm_f32_strict) takes a problem under each precision.
#include <stdexcept>

#include <gtest/gtest.h>

#include "fact/realize/realizer.hpp"
#include "fact/realize/render.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/kind/padding.hpp"

namespace fact::gemm {
namespace {

using realize::RenderError;
using Kind = EpilogueStep::Kind;

realize::RenderedKernel render(const GemmSpec& s) { return realize::render_kernel(s.to_kernel_spec()); }

// The spec the registered realizers make for `p` under `precision` (the engine's path).
GemmSpec realized_class(const GemmProblem& p, core::PrecisionMode precision) {
  const Problem problem = to_problem(p);
  const realize::Realizer& realizer = realize::RealizerRegistry::global().for_problem(problem, precision);
  return GemmSpec::of(realizer.problem_class(problem, precision));
}

// nn.Linear on [m, k] input with a [n, k] weight: A row-major, B column-major, D row-major.
GemmProblem linear(int64_t m, int64_t n, int64_t k, DType dtype) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = GemmOperand{"x", dtype, Layout::RowMajor, k, 0};
  p.b = GemmOperand{"w", dtype, Layout::ColumnMajor, k, 0};
  p.d = GemmOperand{"y", dtype, Layout::RowMajor, n, 0};
  return p;
}

EpilogueStep step(Kind kind, Activation act = Activation::Identity, DType operand = DType::Unknown) {
  EpilogueStep s;
  s.kind = kind;
  s.activation = act;
  s.operand_dtype = operand;
  if (reads_operand(kind)) s.operand = "operand";  // the problem's JSON keeps dtypes of named operands
  return s;
}

// GPT-2's LM head (N = 50257): the gemm realizer takes it as the direct-store variant (align_d
// 1, the NoSmem epilogue), in a tuning class of its own; with a bias and an activation too.
TEST(SpecFromProblem, UnalignedDIsTheDirectStoreVariant) {
  const GemmProblem p = linear(8192, 50257, 768, DType::BFloat16);
  const Problem problem = to_problem(p);
  const realize::Realizer& realizer =
      realize::RealizerRegistry::global().for_problem(problem, core::PrecisionMode::Native);
  EXPECT_EQ(realizer.pattern(), "gemm");
  EXPECT_EQ(realizer.declines(problem, core::PrecisionMode::Native), std::nullopt);
  const GemmSpec s = realized_class(p, core::PrecisionMode::Native);
  EXPECT_EQ(s.align_a, 8);
  EXPECT_EQ(s.align_b, 8);
  EXPECT_EQ(s.align_d, 1);
  EXPECT_TRUE(stores_d_directly(s));
  EXPECT_EQ(realizer.class_token(s.to_kernel_spec()), "bf16.bf16.bf16.f32|tnt|none|dstore");
  const GemmSpec aligned = realized_class(linear(8192, 50304, 768, DType::BFloat16),
                                          core::PrecisionMode::Native);
  EXPECT_EQ(realizer.class_token(aligned.to_kernel_spec()), "bf16.bf16.bf16.f32|tnt|none");
  EXPECT_EQ(aligned.align_d, 8);
  GemmProblem biased = p;  // the direct store runs any chain computed per element
  biased.epilogue = {step(Kind::Bias, Activation::Identity, DType::BFloat16),
                     step(Kind::Activation, Activation::GeluTanh)};
  EXPECT_EQ(realizer.declines(to_problem(biased), core::PrecisionMode::Native), std::nullopt);
  EXPECT_EQ(realizer.class_token(realized_class(biased, core::PrecisionMode::Native).to_kernel_spec()),
            "bf16.bf16.bf16.f32|tnt|bias+gelu_tanh|dstore");
}

TEST(MathMode, FollowsThePrecisionContract) {
  EXPECT_EQ(math_mode_for(DType::BFloat16, core::PrecisionMode::Strict), MathMode::Native);
  EXPECT_EQ(math_mode_for(DType::Float16, core::PrecisionMode::Tf32), MathMode::Native);
  EXPECT_EQ(math_mode_for(DType::Float32, core::PrecisionMode::Strict), MathMode::Tf32x3);
  EXPECT_EQ(math_mode_for(DType::Float32, core::PrecisionMode::Tf32), MathMode::Tf32);
  EXPECT_EQ(math_mode_for(DType::Float32, core::PrecisionMode::Native), MathMode::Tf32x3);
  EXPECT_THROW(math_mode_for(DType::Int8, core::PrecisionMode::Strict), std::invalid_argument);
}

TEST(OperandAlignment, IsTheLargestDividingPowerOfTwo) {
  GemmOperand a{"a", DType::BFloat16, Layout::RowMajor, 4096, 0};
  EXPECT_EQ(operand_alignment(a, 128, 4096, 1), 8);
  a.ld = 4100;  // 4100 = 4 * 1025
  EXPECT_EQ(operand_alignment(a, 128, 4100, 1), 4);
  a.ld = 4096;
  EXPECT_EQ(operand_alignment(a, 128, 4094, 1), 2);  // contiguous extent K = 4094
  GemmOperand f{"f", DType::Float32, Layout::ColumnMajor, 1024, 1024 * 3};
  EXPECT_EQ(operand_alignment(f, 1024, 3, 4), 4);  // column-major: rows are contiguous
  f.batch_stride = 1026;
  EXPECT_EQ(operand_alignment(f, 1024, 3, 4), 2);
  // The outer batch mode's stride counts when there are outer batches.
  f.batch_stride = 1024 * 3;
  f.outer_batch_stride = 1024 * 3 * 4 + 2;
  EXPECT_EQ(operand_alignment(f, 1024, 3, 4, 1), 4);
  EXPECT_EQ(operand_alignment(f, 1024, 3, 4, 2), 2);
}

TEST(SpecFromProblem, TwoBatchModesAreOneBatchedKernel) {
  // The outer mode is launches of the same kernel: the spec is that of one launch (batched by
  // the kernel's mode), its alignments those every launch keeps.
  GemmProblem p = linear(128, 128, 64, DType::BFloat16);
  p.batch = 8;
  p.outer_batch = 2;
  p.a.batch_stride = 64;
  p.a.ld = 8 * 64;
  p.a.outer_batch_stride = 128 * 8 * 64;
  p.b.batch_stride = 128 * 64;
  p.b.outer_batch_stride = 8 * 128 * 64;
  p.d.batch_stride = 128 * 128;
  p.d.outer_batch_stride = 8 * 128 * 128;
  const GemmSpec s = spec_from_problem(p, core::PrecisionMode::Native);
  EXPECT_TRUE(s.batched);
  EXPECT_EQ(s.align_a, 8);
  EXPECT_EQ(s.name(), spec_from_problem([&] {
                        GemmProblem one = p;
                        one.outer_batch = 1;
                        return one;
                      }(), core::PrecisionMode::Native).name());
  p.a.outer_batch_stride += 4;  // 8-byte steps between outer batches: A staged compact per call
  EXPECT_EQ(spec_from_problem(p, core::PrecisionMode::Native).align_a, 8);
  EXPECT_EQ(kernel_view(p).a.outer_batch_stride, 8 * 128 * 64);
}

TEST(SpecFromProblem, Bf16LinearWithBiasAndGelu) {
  GemmProblem p = linear(8192, 3072, 768, DType::BFloat16);
  p.epilogue = {step(Kind::Bias, Activation::Identity, DType::BFloat16),
                step(Kind::Activation, Activation::GeluTanh)};
  const GemmSpec s = spec_from_problem(p, core::PrecisionMode::Strict);
  EXPECT_EQ(s.pattern, "gemm");
  EXPECT_EQ(s.a_dtype, DType::BFloat16);
  EXPECT_EQ(s.math, MathMode::Native);
  EXPECT_EQ(s.a_layout, Layout::RowMajor);
  EXPECT_EQ(s.b_layout, Layout::ColumnMajor);
  EXPECT_EQ(s.align_a, 8);
  EXPECT_FALSE(s.batched);
  ASSERT_EQ(s.epilogue.size(), 2u);
  EXPECT_EQ(s.epilogue[0].kind, Kind::Bias);
  EXPECT_EQ(s.epilogue[0].operand_dtype, DType::BFloat16);
  EXPECT_EQ(s.epilogue[1].activation, Activation::GeluTanh);
  // Large problem with an epilogue: the 128x128 ping-pong tile with a 1x2 cluster (the measured
  // winner for the minGPT epilogue GEMMs on an H200).
  EXPECT_EQ(s.tile, (Shape3{128, 128, 64}));
  EXPECT_EQ(s.mainloop, MainloopSchedule::Pingpong);
  EXPECT_EQ(s.name(), "gemm_bias_gelu_tanh_bf16_tn_128x128x64_c1x2_pp_persistent");
  EXPECT_NO_THROW(render(s));
}

TEST(SpecFromProblem, DefaultTilesFollowTheProblemSize) {
  EXPECT_EQ(spec_from_problem(linear(1024, 1024, 1024, DType::BFloat16), core::PrecisionMode::Strict).tile,
            (Shape3{128, 128, 64}));
  const GemmSpec small_m = spec_from_problem(linear(32, 4096, 4096, DType::Float16), core::PrecisionMode::Strict);
  EXPECT_EQ(small_m.tile, (Shape3{64, 128, 64}));
  EXPECT_EQ(small_m.mainloop, MainloopSchedule::Pingpong);
}

TEST(SpecFromProblem, Float32UnderTf32IsTf32WithThirtyTwoWideK) {
  GemmProblem p = linear(4096, 4096, 4096, DType::Float32);
  p.batch = 8;
  p.a.batch_stride = 4096 * 4096;
  p.b.batch_stride = 4096 * 4096;
  p.d.batch_stride = 4096 * 4096;
  const GemmSpec s = spec_from_problem(p, core::PrecisionMode::Tf32);
  EXPECT_EQ(s.math, MathMode::Tf32);
  EXPECT_TRUE(s.batched);
  EXPECT_EQ(s.align_a, 4);
  EXPECT_EQ(s.tile.k, 32);
  EXPECT_NO_THROW(render(s));
}

TEST(SpecFromProblem, StrictFloat32GoesToTheStrictPattern) {
  GemmProblem p = linear(4096, 4096, 4096, DType::Float32);
  const GemmSpec plain = spec_from_problem(p, core::PrecisionMode::Strict);
  EXPECT_EQ(plain.math, MathMode::Tf32x3);
  EXPECT_EQ(plain.pattern, "gemm");  // the strict realizer re-targets the class
  EXPECT_THROW(render(plain), RenderError);
  const GemmSpec s = realized_class(p, core::PrecisionMode::Strict);
  EXPECT_EQ(s.math, MathMode::Tf32x3);
  EXPECT_EQ(s.pattern, "gemm_f32_strict");
  EXPECT_NO_THROW(render(s));
  // The strict kernels fuse bias + activation (the first candidate).
  p.epilogue = {step(Kind::Bias, Activation::Identity, DType::Float32),
                step(Kind::Activation, Activation::ReLU)};
  const GemmSpec fused = realized_class(p, core::PrecisionMode::Strict);
  EXPECT_EQ(fused.pattern, "gemm_f32_strict");
  EXPECT_EQ(fused.epilogue.size(), 2u);
  EXPECT_NO_THROW(render(fused));
  // An epilogue they cannot fuse (a bf16 bias on float32 operands): no realizer takes it.
  p.epilogue = {step(Kind::Bias, Activation::Identity, DType::BFloat16)};
  EXPECT_THROW(realized_class(p, core::PrecisionMode::Strict), std::invalid_argument);
}

// `x @ W` (A and B row-major) in precision tf32 is not declined; it runs on
// gemm_f32_strict's Hopper mainloop with one TF32 product. K-major operands (nn.Linear) stay on
// the CUTLASS TF32 kernels of this pattern.
TEST(SpecFromProblem, Tf32RowMajorBRunsOnTheStrictMainloopWithOneProduct) {
  GemmProblem linear_tf32 = linear(4096, 4096, 4096, DType::Float32);
  const GemmSpec k_major = realized_class(linear_tf32, core::PrecisionMode::Tf32);
  EXPECT_EQ(k_major.pattern, "gemm");
  EXPECT_EQ(k_major.math, MathMode::Tf32);

  GemmProblem matmul = linear_tf32;
  matmul.b.layout = Layout::RowMajor;
  matmul.b.ld = 4096;
  matmul.epilogue = {step(Kind::Bias, Activation::Identity, DType::Float32),
                     step(Kind::Scale), step(Kind::Activation, Activation::GeluErf)};
  const GemmSpec s = realized_class(matmul, core::PrecisionMode::Tf32);
  EXPECT_EQ(s.pattern, "gemm_f32_strict");
  EXPECT_EQ(s.math, MathMode::Tf32);
  EXPECT_EQ(s.b_layout, Layout::RowMajor);
  EXPECT_EQ(s.mainloop, MainloopSchedule::Cooperative);
  EXPECT_EQ(s.epilogue.size(), 3u);
  const realize::RenderedKernel kernel = render(s);
  EXPECT_NE(kernel.source.find("1>;  // TF32 products per k-step (one: precision tf32)"),
            std::string::npos) << kernel.source;

  // Both column-major: A is the register operand (MN-major), B K-major.
  GemmProblem both_col = linear_tf32;
  both_col.a.layout = Layout::ColumnMajor;
  both_col.a.ld = 4096;
  EXPECT_EQ(realized_class(both_col, core::PrecisionMode::Tf32).pattern, "gemm_f32_strict");
  // A column-major with B row-major has no K-major operand for wgmma: the same mainloop with one
  // TF32 product, one operand first copied transposed into the workspace (B here: M = N, so B,
  // the default when neither is smaller).
  GemmProblem nt = both_col;
  nt.b.layout = Layout::RowMajor;
  const GemmSpec staged = realized_class(nt, core::PrecisionMode::Tf32);
  EXPECT_EQ(staged.pattern, "gemm_f32_strict");
  EXPECT_EQ(staged.mainloop, MainloopSchedule::Cooperative);
  EXPECT_EQ(staged.math, MathMode::Tf32);
  EXPECT_EQ(staged.staged_transpose, StagedTranspose::B);
}

TEST(SpecFromProblem, FoldsLeadingScalesAndDropsIdentity) {
  GemmProblem p = linear(512, 512, 512, DType::BFloat16);
  p.epilogue = {step(Kind::Scale), step(Kind::Activation, Activation::Identity),
                step(Kind::Residual, Activation::Identity, DType::BFloat16)};
  const GemmSpec s = spec_from_problem(p, core::PrecisionMode::Native);
  ASSERT_EQ(s.epilogue.size(), 1u);
  EXPECT_EQ(s.epilogue[0].kind, Kind::Residual);
}

// The ABI carries every step's constants, so no chain is refused for lack of
// a field: scales after other steps, two activations with parameters, two M×N operands.
TEST(SpecFromProblem, KeepsEveryChainTheAbiCarries) {
  GemmProblem issue = linear(512, 512, 512, DType::BFloat16);
  issue.epilogue = {step(Kind::Bias, Activation::Identity, DType::BFloat16), step(Kind::Scale),
                    step(Kind::Activation, Activation::HardTanh),
                    step(Kind::Activation, Activation::GeluErf)};
  const GemmSpec s = spec_from_problem(issue, core::PrecisionMode::Native);
  EXPECT_EQ(s.name(), "gemm_bias_scale_hardtanh_gelu_erf_bf16_tn_128x128x64_c1x1_coop_persistent");
  EXPECT_NO_THROW(render(s));

  GemmProblem two_sources = linear(512, 512, 512, DType::BFloat16);
  two_sources.epilogue = {step(Kind::Residual, Activation::Identity, DType::BFloat16),
                          step(Kind::Multiply, Activation::Identity, DType::BFloat16)};
  EXPECT_NO_THROW(render(spec_from_problem(two_sources, core::PrecisionMode::Native)));

  GemmProblem mixed = linear(512, 512, 512, DType::BFloat16);
  mixed.b.dtype = DType::Float32;
  EXPECT_THROW(spec_from_problem(mixed, core::PrecisionMode::Strict), std::invalid_argument);
}

// A problem whose rows are not 16-byte aligned runs zero-padded (kind/padding.hpp): its spec
// takes the alignments of the padded call, so the usual TMA kernels serve it. A spec that asks
// for a smaller alignment itself is still refused by the template.
TEST(SpecFromProblem, UnalignedRowsGetTheAlignmentsOfThePaddedCall) {
  GemmProblem p = linear(512, 512, 510, DType::BFloat16);  // K = 510: rows of A 4-byte aligned
  const GemmProblem view = kernel_view(p);
  EXPECT_EQ(view.k, 512);
  EXPECT_EQ(view.a.ld, 512);
  EXPECT_EQ(view.b.ld, 512);
  GemmSpec s = spec_from_problem(p, core::PrecisionMode::Native);
  EXPECT_EQ(s.align_a, 8);
  EXPECT_EQ(s.align_b, 8);
  EXPECT_EQ(s.align_d, 8);
  EXPECT_NO_THROW(render(s));
  s.align_a = 2;
  EXPECT_THROW(render(s), RenderError);

  // The float32 strict product 8205 x 2949 x 5921: K and N padded, D through the workspace, so
  // the strict pattern's 16-byte kernels (no direct store for float32).
  const GemmProblem strict = linear(8205, 2949, 5921, DType::Float32);
  const GemmSpec f = realized_class(strict, core::PrecisionMode::Strict);
  EXPECT_EQ(f.pattern, "gemm_f32_strict");
  EXPECT_EQ(f.align_a, 4);
  EXPECT_EQ(f.align_b, 4);
  EXPECT_EQ(f.align_d, 4);
  EXPECT_FALSE(stores_d_directly(f));
  const padding::Extents e = padded_extents(strict);
  EXPECT_EQ(e.k, 5924);
  EXPECT_EQ(e.n, 2952);
  EXPECT_EQ(padding_summary(strict), "K padded 5921\u21925924, N padded 2949\u21922952");

  // bf16 with K = 770 and the LM head's N: K padded, D still written directly.
  const GemmSpec lm = realized_class(linear(8192, 50257, 770, DType::BFloat16), core::PrecisionMode::Native);
  EXPECT_EQ(lm.align_a, 8);
  EXPECT_EQ(lm.align_d, 1);
  EXPECT_TRUE(stores_d_directly(lm));
}

// GPT-2's LM head with padded rows (give_d_padded_rows: the result a view of [M, ld]): the
// kernel runs at N padded to ld with a TMA store, not the direct-store variant.
TEST(SpecFromProblem, LmHeadWithPaddedRowsIsAnAlignedKernel) {
  GemmProblem p = linear(8192, 50257, 768, DType::BFloat16);
  ASSERT_EQ(give_d_padded_rows(p), std::nullopt);
  EXPECT_TRUE(p.d.padded);
  EXPECT_EQ(p.d.ld, 50264);
  const GemmProblem view = kernel_view(p);
  EXPECT_EQ(view.n, 50264);
  EXPECT_EQ(view.d.ld, 50264);
  const GemmSpec s = realized_class(p, core::PrecisionMode::Native);
  EXPECT_EQ(s.align_a, 8);
  EXPECT_EQ(s.align_b, 8);
  EXPECT_EQ(s.align_d, 8);
  EXPECT_FALSE(stores_d_directly(s));
  // The same problem without padded rows stays the direct-store variant.
  EXPECT_TRUE(stores_d_directly(realized_class(linear(8192, 50257, 768, DType::BFloat16),
                                               core::PrecisionMode::Native)));
  // What cannot have padded rows: every step of the op table that stores D itself (a gated
  // product written at half width) or reads tables by row and column, a column-major A (the
  // run padded along M), two batch modes, an aligned D.
  int refused = 0;
  for (const StepOp& op : kStepOps) {
    if (!op.stores_d && op.operand != OperandShape::TABLES) continue;
    GemmProblem q = linear(64, 2002, 256, DType::BFloat16);  // N and N/2 both unaligned
    q.epilogue.push_back(step(op.kind, op.constants == StepConstantsRead::ACTIVATION
                                           ? Activation::SiLU : Activation::Identity));
    q.d.ld = q.d_cols();
    EXPECT_NE(give_d_padded_rows(q), std::nullopt) << op.name;
    EXPECT_FALSE(q.d.padded) << op.name;
    ++refused;
  }
  EXPECT_GE(refused, 1);
  GemmProblem col_a = linear(1001, 1001, 256, DType::BFloat16);
  col_a.a.layout = Layout::ColumnMajor;
  col_a.a.ld = 1001;
  EXPECT_NE(give_d_padded_rows(col_a), std::nullopt);
  GemmProblem two = linear(64, 1001, 256, DType::BFloat16);
  two.outer_batch = 2;
  EXPECT_NE(give_d_padded_rows(two), std::nullopt);
  GemmProblem aligned = linear(64, 1024, 256, DType::BFloat16);
  EXPECT_NE(give_d_padded_rows(aligned), std::nullopt);
  EXPECT_FALSE(aligned.d.padded);
}

}  // namespace
}  // namespace fact::gemm
