// GELU formulas in their spellings (and near misses), activations, scales.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

#include "fact/discover/canonicalize.hpp"
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
using testing::binary;
using testing::count_target;
using testing::find_target;
using testing::unary;

const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

// Builds x -> formula(x) -> graph output and canonicalizes.
graph::Graph canonical_formula(const std::function<ValueId(GraphBuilder&, const ValueId&)>& formula) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {8, 64});
  auto y = formula(b, x);
  return canonicalize(b.finish({y}));
}

ValueId mul(GraphBuilder& b, graph::Arg a, graph::Arg c) { return binary(b, "aten.mul.Tensor", a, c); }
ValueId add(GraphBuilder& b, graph::Arg a, graph::Arg c) { return binary(b, "aten.add.Tensor", a, c); }

// minGPT's NewGELU as torch.export records it: 0.5*x first, pow for the cube.
ValueId gelu_mingpt(GraphBuilder& b, const ValueId& x, double cubic = 0.044715,
                    double outer = kSqrt2OverPi) {
  auto half = mul(b, T(x), C(0.5));
  auto cube = b.op("aten.pow.Tensor_Scalar", {T(x), C(3.0)}, {8, 64});
  auto scaled_cube = mul(b, T(cube), C(cubic));
  auto inner = add(b, T(x), T(scaled_cube));
  auto arg = mul(b, T(inner), C(outer));
  auto th = unary(b, "aten.tanh.default", arg);
  auto one_plus = add(b, T(th), C(1.0));
  return mul(b, T(half), T(one_plus));
}

void expect_single(const graph::Graph& g, const std::string& target, const ValueId& x,
                   size_t origin_size) {
  ASSERT_EQ(g.nodes().size(), 1u) << "left: " << g.nodes().back().target;
  const auto& node = g.nodes().front();
  EXPECT_EQ(node.target, target);
  ASSERT_EQ(node.args.size(), 1u);
  EXPECT_EQ(node.args[0].tensor, x);
  EXPECT_EQ(node.origin.size(), origin_size);
}

TEST(CanonicalizeGelu, TanhFormulaAsMinGptWritesIt) {
  auto g = canonical_formula([](GraphBuilder& b, const ValueId& x) { return gelu_mingpt(b, x); });
  expect_single(g, "fact.gelu_tanh", "x", 8);
}

TEST(CanonicalizeGelu, TanhFormulaWithCubeAsProductsAndHalfLast) {
  // x * (1 + tanh(c * x + (c * 0.044715) * x*x*x)) * 0.5
  auto g = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    auto xx = mul(b, T(x), T(x));
    auto xxx = mul(b, T(xx), T(x));
    auto cubic = mul(b, C(kSqrt2OverPi * 0.044715), T(xxx));
    auto linear = mul(b, T(x), C(kSqrt2OverPi));
    auto arg = add(b, T(linear), T(cubic));
    auto th = unary(b, "aten.tanh.default", arg);
    auto one_plus = add(b, C(1.0), T(th));
    auto prod = mul(b, T(x), T(one_plus));
    return mul(b, T(prod), C(0.5));
  });
  expect_single(g, "fact.gelu_tanh", "x", 9);
}

TEST(CanonicalizeGelu, ConstantsAreCheckedToAMillionth) {
  // sqrt(2/pi) rounded to 8 digits still matches (relative error ~6e-9)...
  auto close = canonical_formula(
      [](GraphBuilder& b, const ValueId& x) { return gelu_mingpt(b, x, 0.044715, 0.79788456); });
  EXPECT_EQ(count_target(close, "fact.gelu_tanh"), 1u);
  // ...a wrong cubic coefficient, a coarse sqrt(2/pi) or a wrong half do not.
  auto wrong_cubic = canonical_formula(
      [](GraphBuilder& b, const ValueId& x) { return gelu_mingpt(b, x, 0.04); });
  EXPECT_EQ(count_target(wrong_cubic, "fact.gelu_tanh"), 0u);
  // The tanh stays a plain activation of the formula's inner polynomial.
  EXPECT_EQ(count_target(wrong_cubic, "fact.activation"), 1u);
  auto coarse = canonical_formula(
      [](GraphBuilder& b, const ValueId& x) { return gelu_mingpt(b, x, 0.044715, 0.7979); });
  EXPECT_EQ(count_target(coarse, "fact.gelu_tanh"), 0u);
  auto near_miss = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    return gelu_mingpt(b, x, 0.044715 * (1 + 1e-5));
  });
  EXPECT_EQ(count_target(near_miss, "fact.gelu_tanh"), 0u);
  auto wrong_half = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    auto th = unary(b, "aten.tanh.default",
                    mul(b, T(add(b, T(x), T(mul(b, T(b.op("aten.pow.Tensor_Scalar", {T(x), C(3)}, {8, 64})), C(0.044715))))),
                        C(kSqrt2OverPi)));
    return mul(b, T(mul(b, T(x), C(0.6))), T(add(b, T(th), C(1.0))));
  });
  EXPECT_EQ(count_target(wrong_half, "fact.gelu_tanh"), 0u);
}

TEST(CanonicalizeGelu, IntermediateReadElsewhereBlocksTheRewrite) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {8, 64});
  auto half = mul(b, T(x), C(0.5));
  auto cube = b.op("aten.pow.Tensor_Scalar", {T(x), C(3.0)}, {8, 64});
  auto inner = add(b, T(x), T(mul(b, T(cube), C(0.044715))));
  auto th = unary(b, "aten.tanh.default", mul(b, T(inner), C(kSqrt2OverPi)));
  auto y = mul(b, T(half), T(add(b, T(th), C(1.0))));
  auto g = canonicalize(b.finish({y, th}));  // tanh's output is also returned
  EXPECT_EQ(count_target(g, "fact.gelu_tanh"), 0u);
}

TEST(CanonicalizeGelu, ErfFormulaDividedOrMultiplied) {
  auto divided = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    auto e = unary(b, "aten.erf.default", binary(b, "aten.div.Tensor", T(x), C(std::sqrt(2.0))));
    return mul(b, T(mul(b, C(0.5), T(x))), T(add(b, T(e), C(1.0))));
  });
  expect_single(divided, "fact.gelu_erf", "x", 5);
  auto multiplied = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    auto e = unary(b, "aten.erf.default", mul(b, T(x), C(0.7071067811865476)));
    return mul(b, T(x), T(mul(b, T(add(b, C(1.0), T(e))), C(0.5))));
  });
  expect_single(multiplied, "fact.gelu_erf", "x", 5);
  auto wrong = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    auto e = unary(b, "aten.erf.default", mul(b, T(x), C(0.7)));
    return mul(b, T(x), T(mul(b, T(add(b, C(1.0), T(e))), C(0.5))));
  });
  EXPECT_EQ(count_target(wrong, "fact.gelu_erf"), 0u);
}

TEST(CanonicalizeGelu, AtenGeluByApproximation) {
  auto erf = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    return unary(b, "aten.gelu.default", x);
  });
  expect_single(erf, "fact.gelu_erf", "x", 1);
  auto tanh = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    OpOptions approximate;
    approximate.kwargs["approximate"] = C("tanh");
    return b.op("aten.gelu.default", {T(x)}, {8, 64}, approximate);
  });
  expect_single(tanh, "fact.gelu_tanh", "x", 1);
}

struct ActivationCase {
  std::string target;
  std::vector<graph::Arg> extra;
  std::string kind;
  double p0, p1;
};

TEST(CanonicalizeActivations, EveryKindWithItsParameters) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<ActivationCase> cases{
      {"aten.relu.default", {}, "relu", 0, 0},
      {"aten.silu.default", {}, "silu", 0, 0},
      {"aten.sigmoid.default", {}, "sigmoid", 0, 0},
      {"aten.leaky_relu.default", {}, "leaky_relu", 0.01, 0},
      {"aten.leaky_relu.default", {C(0.2)}, "leaky_relu", 0.2, 0},
      {"aten.hardtanh.default", {}, "hardtanh", -1, 1},
      {"aten.hardtanh.default", {C(-2.0), C(2.0)}, "hardtanh", -2, 2},
      {"aten.clamp.default", {C(0)}, "relu", 0, 0},
      {"aten.clamp.default", {C(-3.0), C(3.0)}, "hardtanh", -3, 3},
      {"aten.clamp.default", {C(nullptr), C(6.0)}, "hardtanh", -inf, 6},
      {"aten.clamp_min.default", {C(0.0)}, "relu", 0, 0},
      {"aten.relu6.default", {}, "hardtanh", 0, 6},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.target + " -> " + c.kind);
    auto g = canonical_formula([&](GraphBuilder& b, const ValueId& x) { return unary(b, c.target, x, c.extra); });
    ASSERT_EQ(g.nodes().size(), 1u);
    const auto& node = g.nodes().front();
    EXPECT_EQ(node.target, "fact.activation");
    EXPECT_EQ(node.attrs["kind"], c.kind);
    EXPECT_DOUBLE_EQ(node.attrs["p0"].get<double>(), c.p0);
    EXPECT_DOUBLE_EQ(node.attrs["p1"].get<double>(), c.p1);
  }
}

TEST(CanonicalizeActivations, SiluFormula) {
  auto g = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    return mul(b, T(unary(b, "aten.sigmoid.default", x)), T(x));
  });
  expect_single(g, "fact.activation", "x", 2);
  EXPECT_EQ(g.nodes().front().attrs["kind"], "silu");
  // y * sigmoid(x) is not silu: the sigmoid stays an activation of its own.
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {8, 64});
  auto y = b.input("y", {8, 64});
  auto out = mul(b, T(y), T(unary(b, "aten.sigmoid.default", x)));
  auto other = canonicalize(b.finish({out}));
  EXPECT_EQ(find_target(other, "fact.activation")->attrs["kind"], "sigmoid");
  EXPECT_EQ(count_target(other, "aten.mul.Tensor"), 1u);
}

TEST(CanonicalizeScales, MultiplyOrDivideByAScalar) {
  auto times = canonical_formula([](GraphBuilder& b, const ValueId& x) { return mul(b, C(0.25), T(x)); });
  expect_single(times, "fact.scale", "x", 1);
  EXPECT_DOUBLE_EQ(times.nodes().front().attrs["value"].get<double>(), 0.25);
  auto divided = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    return binary(b, "aten.div.Tensor", T(x), C(8.0));
  });
  EXPECT_DOUBLE_EQ(divided.nodes().front().attrs["value"].get<double>(), 0.125);
  auto by_constant = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    auto s = b.scalar_constant("c_scale", 3.0);
    return mul(b, T(x), T(s));
  });
  EXPECT_DOUBLE_EQ(by_constant.nodes().front().attrs["value"].get<double>(), 3.0);
  auto tensor_product = canonical_formula([](GraphBuilder& b, const ValueId& x) { return mul(b, T(x), T(x)); });
  EXPECT_EQ(tensor_product.nodes().front().target, "aten.mul.Tensor");
  auto floor_div = canonical_formula([](GraphBuilder& b, const ValueId& x) {
    OpOptions rounding;
    rounding.kwargs["rounding_mode"] = C("floor");
    return b.op("aten.div.Tensor_mode", {T(x), C(2.0)}, {8, 64}, rounding);
  });
  EXPECT_EQ(floor_div.nodes().front().target, "aten.div.Tensor_mode");
}

}  // namespace
}  // namespace fact::discover
