// patterns/gemm rule: GEMM + greedy epilogue, and every decline reason.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "fact/discover/discover.hpp"
#include "fact/discover/report.hpp"
#include "fact/problem/operand_transform.hpp"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/padding.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using testing::gemms;

using graph::C;
using graph::DType;
using graph::GraphBuilder;
using graph::OpOptions;
using graph::T;
using graph::ValueId;
using testing::describe;
using testing::linear;
using testing::unary;
using Kind = EpilogueStep::Kind;

Match only_match(const Discovery& d) {
  EXPECT_EQ(d.matches.size(), 1u) << describe(d.matches);
  if (d.matches.empty()) throw std::runtime_error("no match");
  return d.matches.front();
}

// x [64, k] · w [n, k]ᵀ + bias, in `dtype`.
struct LinearGraph {
  GraphBuilder b;
  ValueId x, w, bias, y;
  LinearGraph(DType dtype, int64_t k = 256, int64_t n = 512, std::string device = "cuda:0")
      : b(dtype, std::move(device)) {
    x = b.input("x", {4, 16, k});
    w = b.parameter("w", {n, k});
    bias = b.parameter("bias", {n});
    y = linear(b, x, w, bias);
  }
};

TEST(GemmRule, BiasAndTanhGeluFused) {
  LinearGraph l(DType::BFloat16);
  OpOptions tanh;
  tanh.kwargs["approximate"] = C("tanh");
  auto out = l.b.op("aten.gelu.default", {T(l.y)}, {4, 16, 512}, tanh);
  const auto d = discover(l.b.finish({out}));
  const Match& m = only_match(d);
  EXPECT_EQ(m.rule, "gemm_bias_gelu_tanh");
  EXPECT_EQ(m.pattern, "gemm");
  EXPECT_EQ(m.status, MatchStatus::Accepted);
  EXPECT_EQ(m.classification, Classification::Adapt);
  EXPECT_EQ(m.dtype, DType::BFloat16);
  EXPECT_EQ(m.nodes, (std::vector<std::string>{"linear", "gelu"}));
  EXPECT_EQ(m.roles.at("input"), "x");
  EXPECT_EQ(m.roles.at("weight"), "w");
  EXPECT_EQ(m.roles.at("bias"), "bias");
  EXPECT_EQ(m.roles.at("output"), out);
  ASSERT_EQ(gemms(m).size(), 1u);
  const GemmProblem p = gemms(m)[0];
  EXPECT_EQ(p.m, 64);
  EXPECT_EQ(p.n, 512);
  EXPECT_EQ(p.k, 256);
  EXPECT_EQ(p.a.layout, Layout::RowMajor);
  EXPECT_EQ(p.a.ld, 256);
  EXPECT_EQ(p.b.layout, Layout::ColumnMajor);
  EXPECT_EQ(p.b.ld, 256);
  EXPECT_EQ(p.d.value, out);
  EXPECT_EQ(p.d.ld, 512);
  ASSERT_EQ(p.epilogue.size(), 2u);
  EXPECT_EQ(p.epilogue[0].kind, Kind::Bias);
  EXPECT_EQ(p.epilogue[0].operand, "bias");
  EXPECT_EQ(p.epilogue[1].activation, Activation::GeluTanh);
  EXPECT_EQ(m.extra["math"], "native");
}

TEST(GemmRule, SeparateBiasAddThenResidualThenScale) {
  GraphBuilder b(DType::Float16);
  auto x = b.input("x", {64, 128});
  auto r = b.input("r", {64, 256});
  auto w = b.input("w", {128, 256});
  auto bias = b.parameter("bias", {256});
  auto mm = b.op("aten.mm.default", {T(x), T(w)}, {64, 256});
  auto biased = b.op("aten.add.Tensor", {T(bias), T(mm)}, {64, 256});  // bias first
  auto res = b.op("aten.add.Tensor", {T(biased), T(r)}, {64, 256});
  auto scaled = b.op("aten.mul.Tensor", {T(res), C(0.5)}, {64, 256});
  const auto d = discover(b.finish({scaled}));
  const Match& m = only_match(d);
  EXPECT_EQ(m.rule, "gemm_bias_residual_scale");
  const auto e = gemms(m)[0].epilogue;
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[1].kind, Kind::Residual);
  EXPECT_EQ(e[1].operand, "r");
  EXPECT_DOUBLE_EQ(e[1].value, 1.0);
  EXPECT_DOUBLE_EQ(e[2].value, 0.5);
  EXPECT_EQ(gemms(m)[0].b.layout, Layout::RowMajor);
  EXPECT_EQ(m.roles.at("residual"), "r");
}

// x · wᵀ + bias → dropout(p, train) → + r: what `model.eval()` exports for a Linear whose
// output passes a Dropout before the residual add (BERT, GPT-2, ViT).
Discovery dropout_between_linear_and_residual(double p, bool train) {
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {64, 128});
  auto r = b.input("r", {64, 256});
  auto w = b.parameter("w", {256, 128});
  auto bias = b.parameter("bias", {256});
  auto y = b.op("aten.linear.default", {T(x), T(w), T(bias)}, {64, 256});
  auto dropped = b.op("aten.dropout.default", {T(y), C(p), C(train)}, {64, 256});
  auto sum = b.op("aten.add.Tensor", {T(dropped), T(r)}, {64, 256});
  return discover(b.finish({sum}));
}

TEST(GemmRule, DropoutThatDropsNothingIsAbsorbedOnTheWayToTheResidual) {
  for (const auto& [p, train] : std::vector<std::pair<double, bool>>{{0.1, false}, {0.0, true}}) {
    const Match m = only_match(dropout_between_linear_and_residual(p, train));
    EXPECT_EQ(m.rule, "gemm_bias_residual") << "p " << p << " train " << train;
    const auto e = gemms(m)[0].epilogue;
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[1].kind, Kind::Residual);
    EXPECT_EQ(m.roles.at("residual"), "r");
  }
}

TEST(GemmRule, DropoutInTrainingStopsTheChain) {
  const Match m = only_match(dropout_between_linear_and_residual(0.1, true));
  EXPECT_EQ(m.rule, "gemm_bias");
  EXPECT_EQ(gemms(m)[0].epilogue.size(), 1u);
}

// o [B, H, T, D] laid out in [T, B, H, D] order (an attention whose q came in that order) →
// transpose(1, 2) → contiguous → view [B, T, H·D] → linear: reading through the copy the rows
// would be B products of T rows (b at stride H·D, t at B·H·D); the copy's own rows fold.
TEST(GemmRule, ALinearStopsAtACopyWhoseRowsFoldWhereReadingThroughItWouldBatchThem) {
  const int64_t B = 4, H = 2, S = 6, D = 16, E = H * D;
  GraphBuilder b(DType::BFloat16);
  auto o = b.input("o", {B, H, S, D}, std::vector<int64_t>{H * D, D, B * H * D, 1});
  auto w = b.parameter("w", {E, E});
  auto moved = b.op("aten.transpose.int", {T(o), C(1), C(2)}, {B, S, H, D},
                    OpOptions{.stride = std::vector<int64_t>{H * D, B * H * D, D, 1}});
  auto copied = b.op("aten.contiguous.default", {T(moved)}, {B, S, H, D});
  auto merged = b.op("aten.view.default", {T(copied), C(std::vector<int64_t>{B, S, E})}, {B, S, E});
  auto y = b.op("aten.linear.default", {T(merged), T(w)}, {B, S, E});
  const Match m = only_match(discover(b.finish({y})));
  const GemmProblem p = gemms(m)[0];
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.m, B * S);
  EXPECT_EQ(p.a.value, copied);
  EXPECT_EQ(p.a.ld, E);
}

TEST(GemmRule, ActivationsCarryTheirParameters) {
  for (const auto& [target, extra, name, p0, p1] :
       std::vector<std::tuple<std::string, std::vector<graph::Arg>, std::string, double, double>>{
           {"aten.leaky_relu.default", {C(0.1)}, "gemm_bias_leaky_relu", 0.1, 0.0},
           {"aten.hardtanh.default", {C(-2.0), C(2.0)}, "gemm_bias_hardtanh", -2.0, 2.0},
           {"aten.clamp.default", {C(0.0), C(6.0)}, "gemm_bias_hardtanh", 0.0, 6.0},
           {"aten.sigmoid.default", {}, "gemm_bias_sigmoid", 0.0, 0.0},
           {"aten.silu.default", {}, "gemm_bias_silu", 0.0, 0.0},
           {"aten.relu.default", {}, "gemm_bias_relu", 0.0, 0.0},
           {"aten.gelu.default", {}, "gemm_bias_gelu_erf", 0.0, 0.0}}) {
    SCOPED_TRACE(target);
    LinearGraph l(DType::BFloat16);
    auto out = unary(l.b, target, l.y, extra);
    const Match& m = only_match(discover(l.b.finish({out})));
    EXPECT_EQ(m.rule, name);
    EXPECT_DOUBLE_EQ(gemms(m)[0].epilogue.back().p0, p0);
    EXPECT_DOUBLE_EQ(gemms(m)[0].epilogue.back().p1, p1);
  }
}

TEST(GemmRule, EpilogueStopsAtAValueReadTwice) {
  LinearGraph l(DType::BFloat16);
  auto act = unary(l.b, "aten.relu.default", l.y);
  auto other = unary(l.b, "aten.neg.default", l.y);
  const auto d = discover(l.b.finish({act, other}));
  const Match& m = only_match(d);
  EXPECT_EQ(m.rule, "gemm_bias");
  EXPECT_EQ(m.nodes, std::vector<std::string>{"linear"});
}

TEST(GemmRule, BroadcastAddIsNeitherBiasNorResidual) {
  LinearGraph l(DType::BFloat16);
  auto per_token = l.b.input("per_token", {16, 512});  // broadcast over the batch
  auto out = l.b.op("aten.add.Tensor", {T(l.y), T(per_token)}, {4, 16, 512});
  const Match& m = only_match(discover(l.b.finish({out})));
  EXPECT_EQ(m.rule, "gemm_bias");
}

TEST(GemmRule, BatchedGemm) {
  GraphBuilder b(DType::BFloat16);
  auto a = b.input("a", {8, 128, 64});
  auto c = b.input("c", {8, 64, 32});
  auto y = b.op("aten.bmm.default", {T(a), T(c)}, {8, 128, 32});
  auto s = b.op("aten.div.Tensor", {T(y), C(8.0)}, {8, 128, 32});
  const Match& m = only_match(discover(b.finish({s})));
  EXPECT_EQ(m.rule, "bgemm_scale");
  EXPECT_EQ(gemms(m)[0].batch, 8);
  EXPECT_DOUBLE_EQ(gemms(m)[0].epilogue[0].value, 0.125);
}

TEST(GemmRule, UnsupportedDtypesDecline) {
  for (auto [dtype, reason] : std::vector<std::pair<DType, std::string>>{
           {DType::Float64, "dtype float64 has no template"},
           {DType::Int8, "dtype int8 has no template"}}) {
    LinearGraph l(dtype);
    const Match& m = only_match(discover(l.b.finish({l.y})));
    EXPECT_EQ(m.status, MatchStatus::Declined);
    EXPECT_EQ(m.reason, reason);
    EXPECT_DOUBLE_EQ(m.est_after_us, m.est_before_us);
  }
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {64, 128});
  auto w = b.input("w", {128, 64}, std::nullopt, DType::Float32);
  auto y = b.op("aten.mm.default", {T(x), T(w)}, {64, 64});
  const Match& mixed = only_match(discover(b.finish({y})));
  EXPECT_EQ(mixed.reason, "operand dtypes differ (A bfloat16, B float32)");
}

TEST(GemmRule, Float32GoesThroughThePrecisionMode) {
  LinearGraph l(DType::Float32);
  const auto g = l.b.finish({l.y});
  DiscoverOptions o;
  EXPECT_EQ(only_match(discover(g, o)).extra["math"], "3xtf32");
  o.precision = core::PrecisionMode::Tf32;
  EXPECT_EQ(only_match(discover(g, o)).extra["math"], "tf32");
  o.precision = core::PrecisionMode::Native;
  const Match& m = only_match(discover(g, o));
  EXPECT_EQ(m.status, MatchStatus::Declined);
  EXPECT_EQ(m.reason,
            "a float32 GEMM in a native run stays PyTorch's (precision 'native' runs the model's "
            "bf16/fp16 GEMMs; float32 ones run with --precision strict or tf32)");
}

TEST(GemmRule, OuterProductsDeclineAsSuch) {
  // Rotary frequencies: inv_freq [1, 8, 1] @ positions [1, 1, 32], float32 inside a bf16 model.
  for (const core::PrecisionMode precision : {core::PrecisionMode::Strict, core::PrecisionMode::Native}) {
    GraphBuilder b(DType::Float32);
    auto f = b.input("f", {1, 8, 1});
    auto t = b.input("t", {1, 1, 32});
    auto y = b.op("aten.matmul.default", {T(f), T(t)}, {1, 8, 32});
    DiscoverOptions o;
    o.precision = precision;
    const Match& m = only_match(discover(b.finish({y}), o));
    EXPECT_EQ(m.status, MatchStatus::Declined);
    EXPECT_EQ(m.reason, "an outer product (K=1) is not worth a GEMM kernel");
  }
}

// Rows that are not 16-byte aligned decline nothing: the call runs zero-padded (kind/padding.hpp,
// gemm_padding.h), the match says how, and a weight read whole is padded once by the plan.
TEST(GemmRule, UnalignedRowsRunPadded) {
  LinearGraph odd_k(DType::BFloat16, /*k=*/770);
  Match m = only_match(discover(odd_k.b.finish({odd_k.y})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.rule, "gemm_bias");
  EXPECT_EQ(m.extra["note"], "K padded 770\u2192776");
  GemmProblem p = gemms(m).at(0);
  EXPECT_EQ(p.k, 770);  // the call keeps its extents; the entry pads
  EXPECT_EQ(p.a.ld, 770);
  EXPECT_FALSE(p.a.padded);
  // The weight [512, 770] is padded once to [512, 776] (a derived operand) and read in place.
  ASSERT_EQ(m.derived.size(), 1u);
  const DerivedOperand& w = m.derived[0];
  EXPECT_EQ(w.from, std::vector<ValueId>{odd_k.w});
  EXPECT_EQ(w.shape, (std::vector<int64_t>{512, 776}));
  ASSERT_EQ(w.ops.size(), 1u);
  EXPECT_EQ(w.ops[0].op, "pad");
  EXPECT_EQ(w.ops[0].attrs["dim"], 1);
  EXPECT_EQ(w.ops[0].attrs["size"], 776);
  EXPECT_EQ(p.b.value, w.value);
  EXPECT_EQ(p.b.ld, 776);
  EXPECT_TRUE(p.b.padded);
  EXPECT_EQ(gemm_problem_to_json(p)["padding"], "K padded 770\u2192776");

  // float32 (strict): K and N padded; D is written into the workspace and copied back.
  LinearGraph odd_n(DType::Float32, /*k=*/256, /*n=*/514);
  m = only_match(discover(odd_n.b.finish({odd_n.y})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.extra["note"], "N padded 514\u2192516");
  ASSERT_EQ(m.derived.size(), 1u);
  EXPECT_EQ(m.derived[0].shape, (std::vector<int64_t>{516, 256}));
  LinearGraph aligned(DType::Float32, /*k=*/260, /*n=*/516);  // multiples of 4 suffice for fp32
  m = only_match(discover(aligned.b.finish({aligned.y})));
  EXPECT_EQ(m.status, MatchStatus::Accepted);
  EXPECT_FALSE(m.extra.contains("note"));
  EXPECT_TRUE(m.derived.empty());
  EXPECT_FALSE(gemm_problem_to_json(gemms(m).at(0)).contains("padding"));

  // An unaligned leading dimension alone: A is copied to aligned rows per call.
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {64, 128}, std::vector<int64_t>{132, 1});
  auto w2 = b.input("w", {128, 64});
  auto y = b.op("aten.mm.default", {T(x), T(w2)}, {64, 64});
  m = only_match(discover(b.finish({y})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.extra["note"], "A staged (lda=132)");
  EXPECT_TRUE(m.derived.empty());  // w is an input, not a parameter
}

// The discovery tables say how a padded match runs.
TEST(GemmRule, TheDiscoveryTablesNoteThePadding) {
  LinearGraph odd_k(DType::BFloat16, /*k=*/770);
  const graph::Graph g = odd_k.b.finish({odd_k.y});
  const auto d = discover(g);
  EXPECT_NE(discover::discovery_markdown(d).find("- #1 gemm_bias: K padded 770\u2192776"), std::string::npos)
      << discover::discovery_markdown(d);
  EXPECT_NE(discover::discovery_table(d, g, DiscoverOptions{}).find("note #1 gemm_bias: K padded 770\u2192776"),
            std::string::npos);
}

// The float32 `strict` product the padding was made for: 8205 x 2949 x 5921, every extent odd.
TEST(GemmRule, Float32StrictProductWithOddExtentsRunsPadded) {
  GraphBuilder b(DType::Float32, "cuda:0");
  auto x = b.input("x", {8205, 5921});
  auto w = b.parameter("w", {2949, 5921});
  auto y = linear(b, x, w);
  DiscoverOptions o;
  o.precision = core::PrecisionMode::Strict;
  const Match& m = only_match(discover(b.finish({y}), o));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.extra["math"], "3xtf32");
  EXPECT_EQ(m.extra["note"], "K padded 5921\u21925924, N padded 2949\u21922952");
  ASSERT_EQ(m.derived.size(), 1u);
  EXPECT_EQ(m.derived[0].shape, (std::vector<int64_t>{2952, 5924}));
  ASSERT_EQ(m.derived[0].ops.size(), 2u);  // pad N (dim 0), then K (dim 1)
  const GemmProblem p = gemms(m).at(0);
  EXPECT_EQ(p.m, 8205);
  EXPECT_EQ(p.n, 2949);
  EXPECT_EQ(p.k, 5921);
  EXPECT_TRUE(p.b.padded);
  const padding::Extents e = padded_extents(p);
  EXPECT_EQ(e.m, 8205);  // A row-major: M is no contiguous extent
  EXPECT_EQ(e.n, 2952);
  EXPECT_EQ(e.k, 5924);
  const GemmPadding pad = gemm_padding(p);
  EXPECT_TRUE(pad.staged_a());
  EXPECT_FALSE(pad.staged_b());  // padded once, by the plan
  // y is the graph's output: D has padded rows (ld 2952) and is written in place.
  EXPECT_TRUE(p.d.padded);
  EXPECT_EQ(p.d.ld, 2952);
  EXPECT_FALSE(pad.staged_d());
  // Read by another op (a softmax over its rows), D keeps its rows and is staged and copied back.
  GraphBuilder b2(DType::Float32, "cuda:0");
  auto x2 = b2.input("x", {8205, 5921});
  auto w2 = b2.parameter("w", {2949, 5921});
  auto y2 = b2.op("aten._softmax.default", {T(linear(b2, x2, w2)), C(-1), C(false)}, {8205, 2949});
  const GemmProblem kept = gemms(only_match(discover(b2.finish({y2}), o))).at(0);
  EXPECT_FALSE(kept.d.padded);
  EXPECT_TRUE(gemm_padding(kept).staged_d());
}

// x @ W with W [K, N] row-major: B is padded along K (its rows); small K; batched products of
// two activations stage both operands; K = 1 stays an outer product.
TEST(GemmRule, PaddingCoversRowMajorWeightsSmallKAndBatches) {
  GraphBuilder rb(DType::BFloat16, "cuda:0");
  auto x = rb.input("x", {64, 770});
  auto w = rb.parameter("w", {770, 64});
  auto y = rb.op("aten.mm.default", {T(x), T(w)}, {64, 64});
  Match m = only_match(discover(rb.finish({y})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  ASSERT_EQ(m.derived.size(), 1u);
  EXPECT_EQ(m.derived[0].shape, (std::vector<int64_t>{776, 64}));
  EXPECT_EQ(gemms(m).at(0).b.ld, 64);
  EXPECT_EQ(gemms(m).at(0).b.layout, Layout::RowMajor);

  LinearGraph tiny_k(DType::BFloat16, /*k=*/3);
  m = only_match(discover(tiny_k.b.finish({tiny_k.y})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.extra["note"], "K padded 3\u21928");

  GraphBuilder bb(DType::BFloat16, "cuda:0");
  auto a3 = bb.input("a", {4, 64, 770});
  auto b3 = bb.input("b", {4, 770, 96});
  auto y3 = bb.op("aten.bmm.default", {T(a3), T(b3)}, {4, 64, 96});
  m = only_match(discover(bb.finish({y3})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.rule, "bgemm");
  EXPECT_TRUE(m.derived.empty());
  const GemmProblem p = gemms(m).at(0);
  EXPECT_EQ(p.batch, 4);
  const GemmPadding pad = gemm_padding(p);
  EXPECT_TRUE(pad.staged_a());
  EXPECT_TRUE(pad.staged_b());  // row-major B: its K rows padded with zero rows
  EXPECT_FALSE(pad.staged_d());
  EXPECT_EQ(pad.plan.args.k, 776);
  EXPECT_EQ(pad.plan.args.stride_a, 64 * 776);
  EXPECT_EQ(pad.plan.args.stride_b, 776 * 96);
}

// A language model's LM head: F.linear(h, W) with W [V, C] and GPT-2's vocabulary V = 50257.
// A and B are TMA-read (aligned strides); only D's rows are unaligned, which the direct-store
// variant writes without TMA: planned, with or without a bias and an activation. A row-major B,
// an M×N operand with unaligned rows or float32 operands stay declined, each with its reason.
// (Each output below is read by a softmax: an output that only leaves the graph gets padded
// rows instead, UnalignedOutputThatOnlyLeavesTheGraphGetsPaddedRows.)
TEST(GemmRule, UnalignedOutputRowsArePlannedForTheDirectStore) {
  auto read = [](GraphBuilder& g, ValueId v, std::vector<int64_t> shape) {
    return g.op("aten._softmax.default", {T(v), C(-1), C(false)}, std::move(shape));
  };
  GraphBuilder lm(DType::BFloat16, "cuda:0");
  auto h = lm.input("h", {8, 1024, 768});
  auto w = lm.parameter("w", {50257, 768});
  auto logits = linear(lm, h, w);
  Match m = only_match(discover(lm.finish({read(lm, logits, {8, 1024, 50257})})));
  EXPECT_EQ(m.rule, "gemm");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  const GemmProblem p = gemms(m).at(0);
  EXPECT_EQ(p.m, 8 * 1024);
  EXPECT_EQ(p.n, 50257);
  EXPECT_EQ(p.k, 768);
  EXPECT_EQ(p.d.ld, 50257);
  EXPECT_TRUE(p.epilogue.empty());

  // A scale folds into alpha: still no epilogue step.
  GraphBuilder scaled(DType::Float16, "cuda:0");
  auto x = scaled.input("x", {64, 256});
  auto w2 = scaled.parameter("w", {1001, 256});
  auto y = scaled.op("aten.mul.Tensor", {T(linear(scaled, x, w2)), C(0.5)}, {64, 1001});
  m = only_match(discover(scaled.finish({read(scaled, y, {64, 1001})})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;

  // The chain runs per element: a bias and an activation are planned too.
  LinearGraph biased(DType::BFloat16, /*k=*/256, /*n=*/1001);
  auto relu = biased.b.op("aten.relu.default", {T(biased.y)}, {4, 16, 1001});
  m = only_match(discover(biased.b.finish({read(biased.b, relu, {4, 16, 1001})})));
  EXPECT_EQ(m.rule, "gemm_bias_relu");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;

  EXPECT_FALSE(m.extra.contains("note"));  // the direct store writes D as it is

  // An M×N epilogue operand with the same unaligned rows: N is padded (the operand staged into
  // aligned rows, D written into the workspace and copied back) instead.
  LinearGraph residual(DType::BFloat16, /*k=*/256, /*n=*/1001);
  auto r = residual.b.input("r", {4, 16, 1001});
  auto sum = residual.b.op("aten.add.Tensor", {T(residual.y), T(r)}, {4, 16, 1001});
  m = only_match(discover(residual.b.finish({sum})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.extra["note"], "N padded 1001\u21921008");

  GraphBuilder row_b(DType::BFloat16, "cuda:0");  // x @ W with W [K, N]: B's rows unaligned
  auto x3 = row_b.input("x", {64, 256});
  auto w3 = row_b.parameter("w", {256, 1001});
  auto y3 = row_b.op("aten.mm.default", {T(x3), T(w3)}, {64, 1001});
  m = only_match(discover(row_b.finish({y3})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.extra["note"], "N padded 1001\u21921008");
}

// An unaligned D whose value only leaves the graph (directly or through views keeping the last
// dimension whole) gets padded rows: ld = N rounded up to 16 bytes, the weight padded once to
// the padded N, the call's result a [..., :N] view of a dense [.., M, ld] allocation, and the
// kernel the aligned TMA one (kind/pack.cpp, discover/checks.cpp's pad_result_rows). Any other
// use keeps D as it is: the direct-store variant for a bf16 chain computed per element.
TEST(GemmRule, UnalignedOutputThatOnlyLeavesTheGraphGetsPaddedRows) {
  auto lm_head = [](std::function<ValueId(GraphBuilder&, ValueId)> then) {
    GraphBuilder b(DType::BFloat16, "cuda:0");
    auto h = b.input("h", {2, 16, 768});
    auto w = b.parameter("w", {50257, 768});
    auto logits = linear(b, h, w);
    auto out = then(b, logits);
    return std::make_pair(b.finish({out}), logits);
  };
  // The LM head returned as it is.
  {
    auto [g, logits] = lm_head([](GraphBuilder&, ValueId v) { return v; });
    Match m = only_match(discover(g));
    ASSERT_EQ(m.status, MatchStatus::Accepted) << m.reason;
    const GemmProblem p = gemms(m).at(0);
    EXPECT_EQ(p.n, 50257);
    EXPECT_TRUE(p.d.padded);
    EXPECT_EQ(p.d.ld, 50264);
    EXPECT_EQ(m.extra["note"], "N padded 50257\u219250264");
    ASSERT_EQ(m.derived.size(), 1u);  // the weight padded once to the padded N
    EXPECT_EQ(m.derived[0].shape, (std::vector<int64_t>{50264, 768}));
    EXPECT_TRUE(p.b.padded);
    const GemmPadding pad = gemm_padding(p);
    EXPECT_FALSE(pad.d_direct);
    EXPECT_FALSE(pad.staged_d());  // written in place: nothing staged or copied for D
    EXPECT_FALSE(pad.staged_a());
    EXPECT_FALSE(pad.staged_b());
    EXPECT_EQ(pad.plan.num_copies_in, 0);
    EXPECT_EQ(pad.plan.args.n, 50264);
    EXPECT_EQ(pad.plan.args.ldd, 50264);
    const ArgImage image = pack_gemm(p, g);
    ASSERT_EQ(image.results.size(), 1u);
    EXPECT_EQ(image.results[0].shape, (std::vector<int64_t>{2, 16, 50257}));
    EXPECT_EQ(image.results[0].stride, (std::vector<int64_t>{16 * 50264, 50264, 1}));
    EXPECT_EQ(image.results[0].alloc_shape, (std::vector<int64_t>{2, 16, 50264}));
    EXPECT_EQ(result_storage_elements(image.results[0]), 2 * 16 * 50264);
    const nlohmann::json j = image.to_json();
    EXPECT_EQ(j["results"][0]["alloc_shape"], nlohmann::json::array({2, 16, 50264}));
    EXPECT_EQ(ArgImage::from_json(j).results[0].alloc_shape, image.results[0].alloc_shape);
    const FactGemmArgs args = gemm_args(p);
    EXPECT_EQ(args.padded, FACT_GEMM_PADDED_B | FACT_GEMM_PADDED_D);
  }
  // Through a view that keeps the last dimension whole, and with a bias (staged per call).
  {
    auto [g, logits] = lm_head([](GraphBuilder& b, ValueId v) {
      return b.op("aten.view.default", {T(v), C(nlohmann::json::array({32, 50257}))}, {32, 50257});
    });
    EXPECT_TRUE(gemms(only_match(discover(g))).at(0).d.padded);
  }
  LinearGraph biased(DType::Float32, /*k=*/64, /*n=*/257);
  Match fm = only_match(discover(biased.b.finish({biased.y})));
  ASSERT_EQ(fm.status, MatchStatus::Accepted) << fm.reason;
  EXPECT_TRUE(gemms(fm).at(0).d.padded);
  EXPECT_EQ(gemms(fm).at(0).d.ld, 260);
  EXPECT_FALSE(gemm_padding(gemms(fm).at(0)).staged_d());
  // A softmax over the rows reads D: kept as the graph has it, the direct-store variant.
  {
    auto [g, logits] = lm_head([](GraphBuilder& b, ValueId v) {
      return b.op("aten._softmax.default", {T(v), C(-1), C(false)}, {2, 16, 50257});
    });
    const GemmProblem p = gemms(only_match(discover(g))).at(0);
    EXPECT_FALSE(p.d.padded);
    EXPECT_EQ(p.d.ld, 50257);
    EXPECT_TRUE(gemm_padding(p).d_direct);
    EXPECT_EQ(pack_gemm(p, g).results[0].alloc_shape, std::vector<int64_t>{});
  }
  // A flatten (view(-1)) does not keep the last dimension: kept.
  {
    auto [g, logits] = lm_head([](GraphBuilder& b, ValueId v) {
      return b.op("aten.view.default", {T(v), C(nlohmann::json::array({-1}))}, {2 * 16 * 50257});
    });
    EXPECT_FALSE(gemms(only_match(discover(g))).at(0).d.padded);
  }
  // A value returned and also read by another op: kept.
  {
    GraphBuilder b(DType::BFloat16, "cuda:0");
    auto h = b.input("h", {2, 16, 768});
    auto w = b.parameter("w", {50257, 768});
    auto logits = linear(b, h, w);
    auto sm = b.op("aten._softmax.default", {T(logits), C(-1), C(false)}, {2, 16, 50257});
    const graph::Graph g = b.finish({logits, sm});
    EXPECT_FALSE(gemms(only_match(discover(g))).at(0).d.padded);
  }
  // Planning a dynamic range's samples: never (the row length is no polynomial of the sizes).
  {
    auto [g, logits] = lm_head([](GraphBuilder&, ValueId v) { return v; });
    DiscoverOptions options;
    options.padded_results = false;
    const GemmProblem p = gemms(only_match(discover(g, options))).at(0);
    EXPECT_FALSE(p.d.padded);
    EXPECT_TRUE(gemm_padding(p).d_direct);
  }
}

TEST(GemmRule, OperandsThatCannotBeReadInPlaceDeclineWithTheLayoutReason) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 3, 4, 16, 16}, std::vector<int64_t>{16, 1024, 96, 384, 1});
  auto k = b.input("k", {2, 3, 4, 16, 16});
  auto y = b.op("aten.matmul.default", {T(q), T(k)}, {2, 3, 4, 16, 16});
  const Match& m = only_match(discover(b.finish({y})));
  EXPECT_EQ(m.status, MatchStatus::Declined);
  EXPECT_EQ(m.reason.rfind("layout: operands A [2, 3, 4, 16, 16]", 0), 0u) << m.reason;
}

// Attention scores on heads split from a projection: two batch modes, the additive mask
// [B, 1, T, T] a residual shared by the heads, a key-padding mask [B, 1, 1, T] a bias per batch.
struct ScoresGraph {
  GraphBuilder b{DType::BFloat16, "cuda:0"};
  ValueId q, k, scores;
  explicit ScoresGraph(int64_t head_dim = 16, int64_t t = 32) {
    // q, k: [B=2, T, H=4, D] viewed [B, H, T, D]
    q = b.input("q", {2, 4, t, head_dim}, std::vector<int64_t>{t * 4 * head_dim, head_dim, 4 * head_dim, 1});
    k = b.input("k", {2, 4, head_dim, t}, std::vector<int64_t>{t * 4 * head_dim, head_dim, 1, 4 * head_dim});
    scores = b.op("aten.matmul.default", {T(q), T(k)}, {2, 4, t, t});
  }
};

TEST(GemmRule, TwoModeScoresAbsorbABroadcastMaskAndAPerBatchBias) {
  ScoresGraph s;
  auto mask = s.b.input("mask", {2, 1, 32, 32});
  auto padding = s.b.input("padding", {2, 1, 1, 32});
  auto scaled = s.b.op("aten.mul.Tensor", {T(s.scores), C(0.25)}, {2, 4, 32, 32});
  auto masked = s.b.op("aten.add.Tensor", {T(scaled), T(mask)}, {2, 4, 32, 32});
  auto padded = s.b.op("aten.add.Tensor", {T(masked), T(padding)}, {2, 4, 32, 32});
  const Match& m = only_match(discover(s.b.finish({padded})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.rule, "bgemm_scale_residual_bias");
  const GemmProblem p = gemms(m)[0];
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.outer_batch, 2);
  EXPECT_EQ(p.a.batch_stride, 16);
  EXPECT_EQ(p.a.outer_batch_stride, 32 * 64);
  EXPECT_EQ(p.a.ld, 64);
  EXPECT_EQ(p.b.layout, Layout::ColumnMajor);
  EXPECT_EQ(p.d.batch_stride, 32 * 32);
  EXPECT_EQ(p.d.outer_batch_stride, 4 * 32 * 32);
  const auto& e = p.epilogue;
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[1].kind, Kind::Residual);
  EXPECT_EQ(e[1].operand, "mask");
  EXPECT_EQ(e[1].operand_ld, 32);
  EXPECT_EQ(e[1].operand_batch_stride, 0);  // shared by the heads
  EXPECT_EQ(e[1].operand_outer_batch_stride, 32 * 32);
  EXPECT_EQ(e[2].kind, Kind::Bias);
  EXPECT_EQ(e[2].operand, "padding");
  EXPECT_EQ(e[2].operand_batch_stride, 0);
  EXPECT_EQ(e[2].operand_outer_batch_stride, 32);
  EXPECT_EQ(m.extra["math"], "native");
}

TEST(GemmRule, MasksThatDoNotBroadcastPerBatchStayOutside) {
  ScoresGraph s;
  auto per_row = s.b.input("per_row", {2, 4, 32, 1});  // varies along M: neither bias nor residual
  auto out = s.b.op("aten.add.Tensor", {T(s.scores), T(per_row)}, {2, 4, 32, 32});
  const Match& m = only_match(discover(s.b.finish({out})));
  EXPECT_EQ(m.rule, "bgemm");
}

// Two batch modes whose strides are not 16-byte aligned run padded: the operands are staged
// compact, [outer][batch][rows][padded columns].
TEST(GemmRule, TwoModeStridesThatAreUnalignedRunPadded) {
  ScoresGraph s(/*head_dim=*/12);  // the heads 12 bf16 elements apart: 24 bytes
  const Match& m = only_match(discover(s.b.finish({s.scores})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.extra["note"], "K padded 12\u219216");
  const GemmPadding pad = gemm_padding(gemms(m).at(0));
  EXPECT_EQ(pad.plan.args.outer_batch, 2);
  EXPECT_EQ(pad.plan.args.lda, 16);
  EXPECT_EQ(pad.plan.args.stride_a, 32 * 16);
  EXPECT_EQ(pad.plan.args.outer_stride_a, 4 * 32 * 16);
  GraphBuilder b(DType::BFloat16, "cuda:0");
  auto q = b.input("q", {2, 4, 16, 16}, std::vector<int64_t>{3076, 16, 192, 1});
  auto k = b.input("k", {2, 4, 16, 16});
  auto y = b.op("aten.matmul.default", {T(q), T(k)}, {2, 4, 16, 16});
  const Match& odd = only_match(discover(b.finish({y})));
  EXPECT_EQ(odd.status, MatchStatus::Accepted) << odd.reason;
  EXPECT_EQ(odd.extra["note"], "A staged (lda=192, batch stride 16, outer batch stride 3076)");
}

TEST(GemmRule, AddmmVectorBiasWithBetaIsABiasStepWithThatMultiplier) {
  GraphBuilder b(DType::BFloat16);
  auto bias = b.parameter("bias", {32});
  auto a = b.input("a", {64, 128});
  auto w = b.input("w", {128, 32});
  OpOptions scaled;
  scaled.kwargs["beta"] = C(0.5);
  scaled.kwargs["alpha"] = C(2.0);
  auto y = b.op("aten.addmm.default", {T(bias), T(a), T(w)}, {64, 32}, scaled);
  const Match& m = only_match(discover(b.finish({y})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.rule, "gemm_bias");
  EXPECT_DOUBLE_EQ(gemms(m)[0].alpha, 2.0);
  EXPECT_DOUBLE_EQ(gemms(m)[0].epilogue[0].value, 0.5);
  // beta = 0 ignores the input, as torch.addmm does.
  GraphBuilder zero(DType::BFloat16);
  auto bias0 = zero.parameter("bias", {32});
  auto a0 = zero.input("a", {64, 128});
  auto w0 = zero.input("w", {128, 32});
  OpOptions ignored;
  ignored.kwargs["beta"] = C(0.0);
  auto y0 = zero.op("aten.addmm.default", {T(bias0), T(a0), T(w0)}, {64, 32}, ignored);
  const Match& m0 = only_match(discover(zero.finish({y0})));
  EXPECT_EQ(m0.rule, "gemm");
  EXPECT_TRUE(gemms(m0)[0].epilogue.empty());
}

TEST(GemmRule, EinsumIsAGemm) {
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {4, 16, 64});
  auto w = b.parameter("w", {64, 128});
  auto y = b.op("aten.einsum.default", {C("btd,df->btf"), graph::TL({x, w})}, {4, 16, 128});
  auto out = unary(b, "aten.relu.default", y);
  const Match& m = only_match(discover(b.finish({out})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.rule, "gemm_relu");
  const GemmProblem p = gemms(m)[0];
  EXPECT_EQ(p.m, 64);  // b and t fold into M: the weight is shared
  EXPECT_EQ(p.n, 128);
  EXPECT_EQ(p.k, 64);
}

TEST(GemmRule, DevicesOtherThanCudaCpuMetaDecline) {
  LinearGraph meta(DType::BFloat16, 256, 512, "meta");
  EXPECT_EQ(only_match(discover(meta.b.finish({meta.y}))).status, MatchStatus::Accepted);
  LinearGraph cpu(DType::BFloat16, 256, 512, "cpu");
  EXPECT_EQ(only_match(discover(cpu.b.finish({cpu.y}))).status, MatchStatus::Accepted);
  LinearGraph mps(DType::BFloat16, 256, 512, "mps:0");
  const Match& m = only_match(discover(mps.b.finish({mps.y})));
  EXPECT_EQ(m.status, MatchStatus::Declined);
  EXPECT_EQ(m.reason, "tensor 'x' is on device 'mps:0', not CUDA");
}

TEST(GemmRule, AddmmFullMatrixIsAResidualWithBeta) {
  GraphBuilder b(DType::BFloat16);
  auto c = b.input("c", {64, 32});
  auto a = b.input("a", {64, 128});
  auto w = b.input("w", {128, 32});
  OpOptions scaled;
  scaled.kwargs["beta"] = C(0.5);
  auto y = b.op("aten.addmm.default", {T(c), T(a), T(w)}, {64, 32}, scaled);
  const Match& m = only_match(discover(b.finish({y})));
  EXPECT_EQ(m.rule, "gemm_residual");
  EXPECT_DOUBLE_EQ(gemms(m)[0].epilogue[0].value, 0.5);
  EXPECT_EQ(m.roles.at("residual"), "c");
}

TEST(GemmRule, ScaleClampGeluChainIsOneMatchWithEveryConstant) {
  // Linear -> x * 0.5 -> Hardtanh(-2, 2) -> GELU: once composed to all zeros.
  LinearGraph l(DType::Float32);
  auto scaled = l.b.op("aten.mul.Tensor", {T(l.y), C(0.5)}, {4, 16, 512});
  auto clamped = unary(l.b, "aten.hardtanh.default", scaled, {C(-2.0), C(2.0)});
  auto out = unary(l.b, "aten.gelu.default", clamped);
  const Match& m = only_match(discover(l.b.finish({out})));
  EXPECT_EQ(m.rule, "gemm_bias_scale_hardtanh_gelu_erf");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  const auto e = gemms(m)[0].epilogue;
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[1].kind, Kind::Scale);
  EXPECT_DOUBLE_EQ(e[1].value, 0.5);
  EXPECT_EQ(e[2].activation, Activation::HardTanh);
  EXPECT_DOUBLE_EQ(e[2].p0, -2.0);
  EXPECT_DOUBLE_EQ(e[2].p1, 2.0);
  EXPECT_EQ(e[3].activation, Activation::GeluErf);
}

TEST(GemmRule, ConstantsTanhSubtractionAndTwoTensorOperands) {
  LinearGraph l(DType::BFloat16);
  auto r1 = l.b.input("r1", {4, 16, 512});
  auto r2 = l.b.input("r2", {4, 16, 512});
  auto shifted = l.b.op("aten.add.Tensor", {T(l.y), C(3.0)}, {4, 16, 512});
  auto curved = unary(l.b, "aten.tanh.default", shifted);
  auto product = l.b.op("aten.mul.Tensor", {T(curved), T(r1)}, {4, 16, 512});
  auto out = l.b.op("aten.sub.Tensor", {T(r2), T(product)}, {4, 16, 512});  // r2 - (...)
  const Match& m = only_match(discover(l.b.finish({out})));
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  const auto e = gemms(m)[0].epilogue;
  ASSERT_EQ(e.size(), 6u) << m.rule;
  EXPECT_EQ(e[0].kind, Kind::Bias);
  EXPECT_EQ(e[1].kind, Kind::AddScalar);
  EXPECT_DOUBLE_EQ(e[1].value, 3.0);
  EXPECT_EQ(e[2].activation, Activation::Tanh);
  EXPECT_EQ(e[3].kind, Kind::Multiply);
  EXPECT_EQ(e[3].operand, "r1");
  EXPECT_EQ(e[3].operand_ld, 512);
  EXPECT_EQ(e[4].kind, Kind::Scale);  // r2 - x: negate, then add r2
  EXPECT_DOUBLE_EQ(e[4].value, -1.0);
  EXPECT_EQ(e[5].kind, Kind::Residual);
  EXPECT_EQ(e[5].operand, "r2");
  EXPECT_EQ(m.roles.at("multiplier"), "r1");
  EXPECT_EQ(m.roles.at("residual"), "r2");
}

TEST(GemmRule, EpilogueStopsAtTheStepLimit) {
  LinearGraph l(DType::BFloat16);
  ValueId v = l.y;
  for (int i = 0; i < 10; ++i) v = unary(l.b, "aten.relu.default", v);
  const auto d = discover(l.b.finish({v}));
  ASSERT_FALSE(d.matches.empty());
  EXPECT_LE(gemms(d.matches[0])[0].epilogue.size(), 8u) << describe(d.matches);
}

}  // namespace
}  // namespace fact::discover
