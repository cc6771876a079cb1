// The GEMM kind's Rope step (FACT_STEP_ROPE): the argument image of a roped projection and the
// float64 host reference the CPU path runs, checked against the textbook formula on the
// ORIGINAL weight: q = x·Wᵀ (+ bias) split into heads, then q·cos + rotate(q)·sin. The rule's
// row permutation (rotate-half) is applied here as the plan would (derived operand), so a wrong
// permutation or a wrong pairing in the reference fails the comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "fact/graph/graph_builder.hpp"
#include "fact/problem/arg_image.hpp"
#include "fact/problem/problem.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {
namespace {

using graph::DType;

// True when the problem's last epilogue step is the rope step (it writes D in the original columns).
bool ends_in_rope(const ::fact::gemm::GemmProblem& p) {
  return !p.epilogue.empty() && p.epilogue.back().kind == ::fact::gemm::EpilogueStep::Kind::Rope;
}

struct RopeCase {
  int64_t batches = 3, positions = 4, heads = 2, head_dim = 8, k = 5;
  bool interleaved = false, bias = false, per_sequence = false, transposed_output = true;
  int64_t m() const { return batches * positions; }
  int64_t n() const { return heads * head_dim; }
};

// The rows of each head of w ([n, cols]) in the order the rope rule's derived operand puts
// them: row 2p of a head is its row p, row 2p+1 its row p + hd/2.
std::vector<float> rotate_half_rows(const std::vector<float>& w, int64_t heads, int64_t hd, int64_t cols) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 0; p < hd / 2; ++p)
      for (int s = 0; s < 2; ++s)
        for (int64_t c = 0; c < cols; ++c)
          out[(h * hd + 2 * p + s) * cols + c] = w[(h * hd + s * hd / 2 + p) * cols + c];
  return out;
}

void run_case(const RopeCase& rc) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) e = normal(rng);
    return v;
  };
  const int64_t m = rc.m(), n = rc.n(), k = rc.k, hd = rc.head_dim, t = rc.positions;
  const std::vector<float> x = random(m * k), w = random(n * k), bias = random(n);
  // Generic tables (no cos_i == cos_{i+h} symmetry), one per sequence or one for all.
  const int64_t tables = rc.per_sequence ? rc.batches : 1;
  const std::vector<float> cos = random(tables * t * hd), sin = random(tables * t * hd);

  graph::GraphBuilder b(DType::Float32);
  auto xv = b.input("x", {m, k});
  auto wv = b.parameter("w", {n, k});
  b.parameter("bias", {n});
  b.input("cos", {tables, t, hd});
  b.input("sin", {tables, t, hd});
  // The rotated tensor as the captured graph has it: [B, H, T, hd] over [B·T, H·hd] rows, or
  // [B, T, H, hd] (contiguous).
  graph::ValueId y;
  if (rc.transposed_output) {
    graph::OpOptions strided;
    strided.stride = std::vector<int64_t>{t * n, hd, n, 1};
    y = b.op("aten.linear.default", {graph::T(xv), graph::T(wv)}, {rc.batches, rc.heads, t, hd}, strided);
  } else {
    y = b.op("aten.linear.default", {graph::T(xv), graph::T(wv)}, {rc.batches, t, rc.heads, hd});
  }
  const graph::Graph g = b.finish({y});

  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = {"x", DType::Float32, Layout::RowMajor, k, 0, 0};
  p.b = {"w_rope", DType::Float32, Layout::ColumnMajor, k, 0, 0};
  p.d = {y, DType::Float32, Layout::RowMajor, n, 0, 0};
  if (rc.bias) {
    EpilogueStep s;
    s.kind = EpilogueStep::Kind::Bias;
    s.operand = "bias_rope";
    s.operand_dtype = DType::Float32;
    p.epilogue.push_back(s);
  }
  EpilogueStep rope;
  rope.kind = EpilogueStep::Kind::Rope;
  rope.operand = "cos";
  rope.operand2 = "sin";
  rope.operand_dtype = DType::Float32;
  rope.operand_ld = hd;
  rope.period = t;
  rope.period_stride = rc.per_sequence ? t * hd : 0;
  rope.group = hd;
  rope.interleaved = rc.interleaved;
  p.epilogue.push_back(rope);
  ASSERT_TRUE(ends_in_rope(p));
  EXPECT_EQ(p.d_cols(), n);
  EXPECT_EQ(p.fusion_name(), rc.bias ? "gemm_bias_rope" : "gemm_rope");
  // The problem's JSON keeps every rope field.
  const GemmProblem back = gemm_problem_from_json(gemm_problem_to_json(p));
  EXPECT_EQ(back.epilogue.back().operand2, "sin");
  EXPECT_EQ(back.epilogue.back().period, t);
  EXPECT_EQ(back.epilogue.back().period_stride, rope.period_stride);
  EXPECT_EQ(back.epilogue.back().group, hd);
  EXPECT_EQ(back.epilogue.back().interleaved, rc.interleaved);

  const ArgImage image = pack_gemm(p, g);
  const FactGemmArgs args = gemm_args(p);
  EXPECT_EQ(args.steps[args.num_steps - 1].kind, FACT_STEP_ROPE);
  EXPECT_EQ(args.steps[args.num_steps - 1].period, t);
  EXPECT_EQ(args.steps[args.num_steps - 1].group, hd);
  EXPECT_EQ(args.steps[args.num_steps - 1].interleaved, rc.interleaved ? 1 : 0);
  EXPECT_EQ(fact_gemm_last_step_stores_d(&args), 1);  // it writes D, M x N
  EXPECT_EQ(fact_gemm_d_cols(&args), p.n);
  EXPECT_EQ(image.pointers.size(), 5u + (rc.bias ? 1u : 0u));  // a, b, d, [bias], cos, sin

  // The plan's derived operands: rotate-half permutes the weight's (and bias's) rows per head.
  const std::vector<float> w_rope = rc.interleaved ? w : rotate_half_rows(w, rc.heads, hd, k);
  const std::vector<float> bias_rope = rc.interleaved ? bias : rotate_half_rows(bias, rc.heads, hd, 1);
  std::vector<const void*> operands;
  for (const auto& o : image.operands) {
    const void* at = o.value == "x"           ? static_cast<const void*>(x.data())
                     : o.value == "w_rope"    ? static_cast<const void*>(w_rope.data())
                     : o.value == "bias_rope" ? static_cast<const void*>(bias_rope.data())
                     : o.value == "cos"       ? static_cast<const void*>(cos.data())
                     : o.value == "sin"       ? static_cast<const void*>(sin.data())
                                              : nullptr;
    ASSERT_NE(at, nullptr) << o.value;
    operands.push_back(at);
  }
  std::vector<float> d(m * n + 1, std::numeric_limits<float>::quiet_NaN());
  const std::vector<uint8_t> bytes =
      bind_addresses(image, operands, {d.data()}, std::vector<int>(operands.size(), 4), {4});
  ASSERT_EQ(reference_call(reinterpret_cast<const FactCallHeader*>(bytes.data())), FACT_OK);

  // The textbook rotation on the original weight.
  for (int64_t row = 0; row < m; ++row) {
    std::vector<double> q(n);
    for (int64_t j = 0; j < n; ++j) {
      double acc = rc.bias ? bias[j] : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) acc += double(x[row * k + kk]) * w[j * k + kk];
      q[j] = acc;
    }
    const int64_t table = (rc.per_sequence ? row / t : 0) * t * hd + (row % t) * hd;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t head = j - j % hd, c = j % hd;
      double rotated;
      if (rc.interleaved) {
        rotated = c % 2 == 0 ? -q[head + c + 1] : q[head + c - 1];
      } else {
        rotated = c < hd / 2 ? -q[head + c + hd / 2] : q[head + c - hd / 2];
      }
      const double want = q[j] * cos[table + c] + rotated * sin[table + c];
      EXPECT_NEAR(d[row * n + j], want, 1e-4 * (1 + std::fabs(want))) << row << "," << j;
    }
  }
  EXPECT_TRUE(std::isnan(d.back())) << "written past D";
}

static_assert(FACT_STEP_ROPE == 8, "the rope step's ABI id never changes");

// The row this pattern registers in the GEMM's step table (epilogue_steps.def).
TEST(RopeKind, ItsRowInTheStepTable) {
  const StepOp* op = find_step_op("rope");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->kind, EpilogueStep::Kind::Rope);
  EXPECT_EQ(op->abi_id, FACT_STEP_ROPE);
  EXPECT_EQ(op->kernel_token, "rope");
  EXPECT_EQ(op->device_link, "fact::gemm::epilogue::Rope");
  EXPECT_EQ(op->operand, OperandShape::TABLES);
  EXPECT_EQ(op->constants, StepConstantsRead::NONE);
  EXPECT_TRUE(op->stores_d);
  EXPECT_FALSE(op->halves_columns);
}

TEST(RopeKind, RotateHalfOnPermutedRowsIsTheTextbookRotation) { run_case({}); }

TEST(RopeKind, RotateHalfWithABiasPermutedLikeTheWeight) {
  RopeCase c;
  c.bias = true;
  run_case(c);
}

TEST(RopeKind, InterleavedPairsNeedNoPermutation) {
  RopeCase c;
  c.interleaved = true;
  c.transposed_output = false;
  run_case(c);
}

TEST(RopeKind, OneTablePerSequence) {
  RopeCase c;
  c.per_sequence = true;
  run_case(c);
}

TEST(RopeKind, PackAndReferenceRefuseMalformedRopes) {
  graph::GraphBuilder b(DType::Float32);
  auto x = b.input("x", {8, 4});
  auto w = b.parameter("w", {16, 4});
  b.input("cos", {4, 8});
  b.input("sin", {4, 8});
  auto y = b.op("aten.linear.default", {graph::T(x), graph::T(w)}, {8, 16});
  const graph::Graph g = b.finish({y});
  GemmProblem p;
  p.m = 8;
  p.n = 16;
  p.k = 4;
  p.a = {x, DType::Float32, Layout::RowMajor, 4, 0, 0};
  p.b = {w, DType::Float32, Layout::ColumnMajor, 4, 0, 0};
  p.d = {y, DType::Float32, Layout::RowMajor, 16, 0, 0};
  EpilogueStep rope;
  rope.kind = EpilogueStep::Kind::Rope;
  rope.operand = "cos";
  rope.operand2 = "sin";
  rope.operand_dtype = DType::Float32;
  rope.operand_ld = 8;
  rope.period = 4;
  rope.group = 8;
  p.epilogue = {rope};
  EXPECT_NO_THROW(pack_gemm(p, g));
  GemmProblem odd = p;
  odd.epilogue[0].group = 6;  // 16 columns are not whole heads of 6
  EXPECT_THROW(pack_gemm(odd, g), std::invalid_argument);
  GemmProblem ragged = p;
  ragged.epilogue[0].period = 3;  // 8 rows are not whole sequences of 3
  EXPECT_THROW(pack_gemm(ragged, g), std::invalid_argument);
  GemmProblem not_last = p;
  EpilogueStep scale;
  scale.kind = EpilogueStep::Kind::Scale;
  scale.value = 2.0;
  not_last.epilogue = {rope, scale};
  EXPECT_THROW(pack_gemm(not_last, g), std::invalid_argument);

  std::vector<float> xs(32, 1.0f), ws(64, 1.0f), table(32, 0.5f), d(128);
  FactGemmArgs args = gemm_args(p);
  args.a = xs.data();
  args.b = ws.data();
  args.d = d.data();
  args.steps[0].operand = table.data();
  args.steps[0].operand2 = table.data();
  EXPECT_EQ(reference_call(&args.header), FACT_OK);
  FactGemmArgs no_sin = args;
  no_sin.steps[0].operand2 = nullptr;
  EXPECT_EQ(reference_call(&no_sin.header), FACT_ERR_INVALID_ARGS);
  FactGemmArgs bad_group = args;
  bad_group.steps[0].group = 6;
  EXPECT_EQ(reference_call(&bad_group.header), FACT_ERR_INVALID_ARGS);
  FactGemmArgs batched = args;
  batched.batch = 2;
  EXPECT_EQ(reference_call(&batched.header), FACT_ERR_INVALID_ARGS);
}

}  // namespace
}  // namespace fact::gemm
