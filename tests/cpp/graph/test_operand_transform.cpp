// Derived operands (include/fact/problem/operand_transform.hpp): the programs' JSON form and
// their checks against the captured graph (shape and dtype of every op, sources that are
// parameters, buffers or constants).
#include <gtest/gtest.h>

#include "fact/graph/graph_builder.hpp"
#include "fact/problem/operand_transform.hpp"

namespace fact {
namespace {

using graph::DType;
using graph::GraphBuilder;
using graph::T;

graph::Graph weights_graph() {
  GraphBuilder b(DType::BFloat16);
  const auto x = b.input("x", {4, 64});
  b.parameter("wg", {96, 64});
  b.parameter("wu", {96, 64});
  b.parameter("norm", {64});
  b.buffer("cos", {128, 32}, DType::Float32);
  const auto y = b.op("aten.linear.default", {T(x), T("wg")}, {4, 96});
  return b.finish({y});
}

// Gate and up interleaved in blocks of 8 rows, the norm weight folded in (float32), rounded.
DerivedOperand packed() {
  ProgramBuilder p;
  const auto g = p.reshape(source_ref(0), {12, 8, 64});
  const auto u = p.reshape(source_ref(1), {12, 8, 64});
  const auto both = p.reshape(p.stack({g, u}, 1), {192, 64});
  const auto folded = p.mul(p.to(both, DType::Float32), p.to(source_ref(2), DType::Float32));
  p.to(folded, DType::BFloat16);
  DerivedOperand d;
  d.value = "derived:swiglu.gate_up";
  d.from = {"wg", "wu", "norm"};
  d.ops = p.ops;
  d.dtype = DType::BFloat16;
  d.shape = {192, 64};
  d.purpose = "gate/up interleaved, norm folded";
  return d;
}

TEST(OperandTransform, JsonRoundTripAndContiguousStride) {
  const DerivedOperand d = packed();
  const nlohmann::json j = derived_to_json(d);
  EXPECT_EQ(j.at("dtype"), "torch.bfloat16");
  EXPECT_EQ(j.at("stride"), nlohmann::json::array({64, 1}));
  EXPECT_EQ(j.at("ops").size(), 8u);
  EXPECT_EQ(j.at("ops").at(2).at("op"), "stack");
  EXPECT_EQ(j.at("ops").at(2).at("args"), nlohmann::json::array({"%0", "%1"}));
  EXPECT_EQ(derived_from_json(j), d);
  EXPECT_TRUE(is_derived_value(d.value));
  EXPECT_FALSE(is_derived_value("wg"));
}

TEST(OperandTransform, CheckInfersEveryOpsShapeAndDtype) {
  const graph::Graph g = weights_graph();
  EXPECT_NO_THROW(check_derived(packed(), g));

  DerivedOperand wrong = packed();
  wrong.shape = {96, 128};
  try {
    check_derived(wrong, g);
    FAIL() << "a declared shape the program does not make was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "derived value 'derived:swiglu.gate_up': the program makes [192, 64] bfloat16, "
                           "the plan declares [96, 128] bfloat16");
  }
}

TEST(OperandTransform, CheckRefusesMalformedPrograms) {
  const graph::Graph g = weights_graph();
  auto refused = [&](DerivedOperand d, const std::string& needle) {
    try {
      check_derived(d, g);
      ADD_FAILURE() << "accepted, expected: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  DerivedOperand d = packed();
  d.from = {"x", "wu", "norm"};
  refused(d, "source 'x' is computed by the model");
  d = packed();
  d.ops[0].attrs["shape"] = {12, 8, 65};
  refused(d, "op 0 (reshape): reshape of [96, 64] to [12, 8, 65]");
  d = packed();
  d.ops[2].args = {"%0", "%7"};
  refused(d, "op 2 (stack): reference '%7' names nothing before it");
  d = packed();
  d.ops[6].args = {"%4", "$2"};  // a float32 tensor times the bfloat16 norm weight
  refused(d, "op 6 (mul): mul of different dtypes");
  d = packed();
  d.ops[0].op = "gather";
  refused(d, "unknown op 'gather'");
  d = packed();
  d.value = "gate_up";
  refused(d, "its id must start with 'derived:'");

  ProgramBuilder p;
  p.slice(source_ref(0), 0, 0, 130);
  DerivedOperand table{"derived:cos", {"cos"}, p.ops, DType::Float32, {130, 32}, ""};
  refused(table, "slice [0, 130) of a dim of size 128");
}

TEST(OperandTransform, SliceRepeatPermuteAndCatShapes) {
  const graph::Graph g = weights_graph();
  ProgramBuilder p;
  const auto rows = p.slice(source_ref(0), 0, 0, 16);                 // [16, 32]
  p.repeat(rows, {2, 1});                                              // [32, 32]
  const auto heads = p.reshape(source_ref(1), {3, 2, 16, 64});         // wg: [96, 64]
  const auto paired = p.reshape(p.permute(heads, {0, 2, 1, 3}), {96, 64});
  p.cat({paired, source_ref(2)}, 0);                                   // [96+96, 64]
  DerivedOperand d{"derived:cat", {"cos", "wg", "wu"}, p.ops, DType::BFloat16, {192, 64}, ""};
  EXPECT_NO_THROW(check_derived(d, g));
}

}  // namespace
}  // namespace fact
