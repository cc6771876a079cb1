// patterns/swiglu rule: silu(x·Wg) * (x·Wu) [→ ·Wd].
#include <gtest/gtest.h>

#include "fact/discover/discover.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using testing::gemms;

using graph::DType;
using graph::GraphBuilder;
using graph::T;
using graph::ValueId;
using testing::describe;
using testing::find_rule;
using testing::linear;
using testing::unary;
using Kind = EpilogueStep::Kind;

struct SwigluGraph {
  GraphBuilder b;
  ValueId x, gate, up, product, out;
  SwigluGraph(DType dtype = DType::BFloat16, bool down = true, const std::string& act = "aten.silu.default",
              bool separate_inputs = false)
      : b(dtype) {
    x = b.input("x", {1, 128, 512});
    auto x2 = separate_inputs ? b.input("x2", {1, 128, 512}) : x;
    auto wg = b.parameter("wg", {1024, 512});
    auto wu = b.parameter("wu", {1024, 512});
    gate = unary(b, act, linear(b, x, wg));
    up = linear(b, x2, wu);
    product = b.op("aten.mul.Tensor", {T(gate), T(up)}, {1, 128, 1024});
    out = product;
    if (down) {
      auto wd = b.parameter("wd", {512, 1024});
      out = b.op("aten.add.Tensor", {T(x), T(linear(b, product, wd))}, {1, 128, 512});
    }
  }
};

// bf16: one GEMM over the gate and up weights interleaved row by row (a derived operand the
// plan computes once), its glu(silu) step writing the product [.., 1024] itself.
TEST(SwigluRule, Bf16IsOneGemmOverInterleavedWeights) {
  SwigluGraph s(DType::BFloat16, /*down=*/false);
  const auto d = discover(s.b.finish({s.out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "swiglu");
  EXPECT_EQ(m.pattern, "swiglu");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  ASSERT_EQ(gemms(m).size(), 1u);
  const GemmProblem p = gemms(m)[0];
  EXPECT_EQ(p.fusion_name(), "gemm_glu_silu");
  EXPECT_EQ(p.m, 128);
  EXPECT_EQ(p.n, 2048);
  EXPECT_EQ(p.k, 512);
  EXPECT_EQ(p.d_cols(), 1024);
  EXPECT_EQ(p.d.value, s.product);
  EXPECT_EQ(p.d.ld, 1024);
  ASSERT_EQ(m.derived.size(), 1u);
  const DerivedOperand& w = m.derived[0];
  EXPECT_EQ(p.b.value, w.value);
  EXPECT_EQ(p.b.layout, Layout::ColumnMajor);
  EXPECT_EQ(p.b.ld, 512);
  EXPECT_EQ(w.from, (std::vector<ValueId>{"wg", "wu"}));
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2048, 512}));
  EXPECT_EQ(w.dtype, DType::BFloat16);
  ASSERT_EQ(w.ops.size(), 2u);
  EXPECT_EQ(w.ops[0].op, "stack");  // [1024, 2, 512]: row 2j the gate's j, row 2j+1 the up's
  EXPECT_EQ(w.ops[0].attrs.at("dim"), 1);
  EXPECT_EQ(w.ops[1].op, "reshape");
  EXPECT_EQ(m.roles.at("gate_weight"), "wg");
  EXPECT_EQ(m.roles.at("up_weight"), "wu");
  EXPECT_EQ(m.roles.at("gate_up_weight"), w.value);
  EXPECT_EQ(m.nodes.size(), 4u);
  EXPECT_FALSE(m.extra.contains("one_gemm_declined"));
}

// float32 (strict): the glu kernel writes 16-bit outputs, so the gate GEMM with its SiLU and
// the up GEMM with the product stay two kernels, and the match says why.
TEST(SwigluRule, Float32KeepsGateAndUpGemmsWithTheReason) {
  SwigluGraph s(DType::Float32, /*down=*/false);
  const auto d = discover(s.b.finish({s.out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "swiglu");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  ASSERT_EQ(gemms(m).size(), 2u);
  EXPECT_EQ(gemms(m)[0].fusion_name(), "gemm_silu");
  EXPECT_EQ(gemms(m)[0].d.value, s.gate);
  EXPECT_EQ(gemms(m)[1].fusion_name(), "gemm_mul");
  EXPECT_EQ(gemms(m)[1].epilogue[0].kind, Kind::Multiply);
  EXPECT_EQ(gemms(m)[1].epilogue[0].operand, s.gate);
  EXPECT_EQ(gemms(m)[1].d.value, s.product);
  EXPECT_TRUE(m.derived.empty());
  EXPECT_EQ(m.roles.at("gate_output"), s.gate);
  ASSERT_TRUE(m.extra.contains("one_gemm_declined"));
  EXPECT_NE(m.extra.at("one_gemm_declined").get<std::string>().find("float32"), std::string::npos);
}

TEST(SwigluRule, WithTheDownProjectionAndItsResidual) {
  SwigluGraph s;
  const auto d = discover(s.b.finish({s.out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "swiglu_mlp");
  ASSERT_EQ(gemms(m).size(), 2u);
  EXPECT_EQ(gemms(m)[0].fusion_name(), "gemm_glu_silu");
  EXPECT_EQ(gemms(m)[1].fusion_name(), "gemm_residual");
  EXPECT_EQ(gemms(m)[1].a.value, s.product);
  EXPECT_EQ(m.roles.at("down_weight"), "wd");
  EXPECT_EQ(m.roles.at("residual"), "x");
  EXPECT_EQ(m.roles.at("output"), s.out);
}

// GeGLU: the same one GEMM with a glu(gelu) step.
TEST(SwigluRule, GeGluIsOneGemmWithAGeluGate) {
  SwigluGraph s(DType::Float16, /*down=*/true, "aten.gelu.default");
  const auto d = discover(s.b.finish({s.out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "geglu_mlp");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  ASSERT_EQ(gemms(m).size(), 2u);
  EXPECT_EQ(gemms(m)[0].fusion_name(), "gemm_glu_gelu_erf");
  EXPECT_EQ(m.derived.size(), 1u);
}

// A gate GEMM with a bias before its activation: the one-GEMM form would need the biases
// interleaved too; two GEMMs, with the reason.
TEST(SwigluRule, AGateBiasKeepsTwoGemms) {
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {128, 512});
  auto wg = b.parameter("wg", {1024, 512});
  auto bg = b.parameter("bg", {1024});
  auto wu = b.parameter("wu", {1024, 512});
  auto gate_lin = b.op("aten.linear.default", {T(x), T(wg), T(bg)}, {128, 1024});
  auto gate = unary(b, "aten.silu.default", gate_lin);
  auto product = b.op("aten.mul.Tensor", {T(gate), T(linear(b, x, wu))}, {128, 1024});
  const auto d = discover(b.finish({product}));
  const Match* m = find_rule(d.matches, "swiglu");
  ASSERT_NE(m, nullptr) << describe(d.matches);
  EXPECT_EQ(gemms(*m).size(), 2u);
  ASSERT_TRUE(m->extra.contains("one_gemm_declined"));
  EXPECT_NE(m->extra.at("one_gemm_declined").get<std::string>().find("bias"), std::string::npos);
}

// The fused projection (Phi-3, GeGLU feed-forwards): gate, up = linear(x, W, b).chunk(2, -1).
// `gate_index` says which half is the gate. Returns the graph's output.
struct ChunkedGraph {
  GraphBuilder b;
  ValueId out;
  ChunkedGraph(DType dtype, const std::string& act, int gate_index, bool bias, bool down) : b(dtype) {
    auto x = b.input("x", {2, 64, 512});
    auto w = b.parameter("w_gate_up", {2048, 512});
    std::vector<graph::Arg> args{T(x), T(w)};
    if (bias) args.push_back(T(b.parameter("b_gate_up", {2048})));
    auto projected = b.op("aten.linear.default", args, {2, 64, 2048});
    const graph::TensorDesc half{{2, 64, 1024}, {131072, 2048, 1}, dtype, "cpu"};
    auto pieces = b.multi_op("aten.chunk.default", {T(projected), graph::C(2), graph::C(-1)}, {half, half}, "chunk");
    auto gate = unary(b, act, pieces[gate_index]);
    out = b.op("aten.mul.Tensor", {T(pieces[1 - gate_index]), T(gate)}, {2, 64, 1024});
    if (down) out = linear(b, out, b.parameter("wd", {512, 1024}));
  }
};

TEST(SwigluRule, AFusedProjectionsHalvesAreInterleavedIntoOneGluGemm) {
  ChunkedGraph s(DType::BFloat16, "aten.silu.default", /*gate_index=*/0, /*bias=*/false, /*down=*/true);
  const auto d = discover(s.b.finish({s.out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "swiglu_chunked_mlp");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  ASSERT_EQ(gemms(m).size(), 2u);
  const GemmProblem p = gemms(m)[0];
  EXPECT_EQ(p.fusion_name(), "gemm_glu_silu");
  EXPECT_EQ(p.shape_string(), "128x2048x512");
  EXPECT_EQ(p.d_cols(), 1024);
  EXPECT_EQ(p.d.ld, 1024);
  ASSERT_EQ(m.derived.size(), 1u);
  const DerivedOperand& w = m.derived[0];
  EXPECT_EQ(p.b.value, w.value);
  EXPECT_EQ(w.from, (std::vector<ValueId>{"w_gate_up"}));
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2048, 512}));
  ASSERT_EQ(w.ops.size(), 4u);  // slice (gate rows), slice (up rows), stack, reshape
  EXPECT_EQ(w.ops[0].op, "slice");
  EXPECT_EQ(w.ops[0].attrs.at("start"), 0);
  EXPECT_EQ(w.ops[1].attrs.at("start"), 1024);
  EXPECT_EQ(gemms(m)[1].a.value, p.d.value);
}

// GeGLU as diffusers writes it: `hidden, gate = proj(x).chunk(2, -1); hidden * gelu(gate)`, the
// projection with a bias: the gate is the second half, and the bias is interleaved too.
TEST(SwigluRule, GeGluWithTheGateSecondAndABias) {
  ChunkedGraph s(DType::BFloat16, "aten.gelu.default", /*gate_index=*/1, /*bias=*/true, /*down=*/false);
  const auto d = discover(s.b.finish({s.out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "geglu_chunked");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  ASSERT_EQ(gemms(m).size(), 1u);
  const GemmProblem p = gemms(m)[0];
  EXPECT_EQ(p.fusion_name(), "gemm_bias_glu_gelu_erf");
  ASSERT_EQ(m.derived.size(), 2u);
  EXPECT_EQ(m.derived[0].ops[0].attrs.at("start"), 1024);  // the gate's rows first
  EXPECT_EQ(m.derived[1].from, (std::vector<ValueId>{"b_gate_up"}));
  EXPECT_EQ(m.derived[1].shape, (std::vector<int64_t>{2048}));
  EXPECT_EQ(p.epilogue[0].operand, m.derived[1].value);
}

// float32: the fused projection stays a plain GEMM (the rest is PyTorch's).
TEST(SwigluRule, AFloat32FusedProjectionIsAPlainGemm) {
  ChunkedGraph s(DType::Float32, "aten.silu.default", 0, false, false);
  const auto d = discover(s.b.finish({s.out}));
  EXPECT_EQ(find_rule(d.matches, "swiglu_chunked"), nullptr) << describe(d.matches);
  EXPECT_NE(find_rule(d.matches, "gemm"), nullptr) << describe(d.matches);
}

TEST(SwigluRule, DifferentInputsAreNotSwiglu) {
  SwigluGraph s(DType::BFloat16, /*down=*/false, "aten.silu.default", /*separate_inputs=*/true);
  const auto d = discover(s.b.finish({s.out}));
  EXPECT_EQ(find_rule(d.matches, "swiglu"), nullptr) << describe(d.matches);
  // Two GEMMs of different inputs: the gate GEMM takes the SiLU and the product with the other
  // GEMM's output as its epilogue.
  EXPECT_NE(find_rule(d.matches, "gemm_silu_mul"), nullptr) << describe(d.matches);
  EXPECT_NE(find_rule(d.matches, "gemm"), nullptr) << describe(d.matches);
}

TEST(SwigluRule, AnotherGateActivationIsNotSwiglu) {
  SwigluGraph s(DType::BFloat16, /*down=*/false, "aten.sigmoid.default");
  const auto d = discover(s.b.finish({s.out}));
  EXPECT_EQ(find_rule(d.matches, "swiglu"), nullptr) << describe(d.matches);
  EXPECT_NE(find_rule(d.matches, "gemm_sigmoid_mul"), nullptr) << describe(d.matches);
}

TEST(SwigluRule, UnbuildableKernelsFallBackToGemmDeclines) {
  SwigluGraph s(DType::Float64);
  const auto d = discover(s.b.finish({s.out}));
  EXPECT_EQ(find_rule(d.matches, "swiglu_mlp"), nullptr) << describe(d.matches);
  // The GEMM rule's own declines: the gate GEMM with its SiLU and product, the up GEMM and the
  // down GEMM.
  ASSERT_EQ(d.matches.size(), 3u) << describe(d.matches);
  for (const auto& m : d.matches) {
    EXPECT_EQ(m.status, MatchStatus::Declined);
    EXPECT_EQ(m.reason, "dtype float64 has no template");
  }
}

}  // namespace
}  // namespace fact::discover
