// The GEMM epilogue's op table (patterns/gemm/epilogue/ops.def) against the realize side: kernel
// tokens round-trip through specs, CUTLASS / device spellings come from the table, and every
// link a rendered chain names is the table's DeviceLink with the template argument its step
// reads. The spellings of the ops that existed before the table are pinned: they are in kernel
// names, cache keys and tuning-database keys.
#include <gtest/gtest.h>

#include <string>

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/realize/cutlass_names.hpp"
#include "patterns/gemm/realize/render.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

TEST(EpilogueOpTableRealize, KernelTokensRoundTrip) {
  for (const StepOp& op : kStepOps) {
    SCOPED_TRACE(std::string(op.name));
    EXPECT_EQ(epilogue_kind_token(op.kind), op.kernel_token);
    EXPECT_EQ(parse_epilogue_kind_token(op.kernel_token), op.kind);
    EXPECT_EQ(epilogue_link_cpp(op.kind), op.device_link);
  }
  for (const ActivationOp& op : kActivationOps) {
    SCOPED_TRACE(std::string(op.name));
    EXPECT_EQ(activation_token(op.activation), op.name);
    EXPECT_EQ(parse_activation_token(op.name), op.activation);
    if (op.activation == Activation::Identity) {
      EXPECT_THROW(activation_cpp(op.activation, false), std::invalid_argument);
      continue;
    }
    EXPECT_EQ(activation_cpp(op.activation, false), op.functor_16bit);
    EXPECT_EQ(activation_cpp(op.activation, true), op.functor_f32);
  }
  EXPECT_THROW(parse_epilogue_kind_token("no_such_step"), std::invalid_argument);
  EXPECT_THROW(parse_activation_token("no_such_activation"), std::invalid_argument);
}

TEST(EpilogueOpTableRealize, SpellingsOfTheFirstOpsAreKept) {
  const std::pair<Kind, const char*> tokens[] = {
      {Kind::Scale, "scale"},     {Kind::AddScalar, "add"}, {Kind::Bias, "bias"},
      {Kind::Activation, "act"},  {Kind::Residual, "residual"}, {Kind::Multiply, "mul"},
      {Kind::GeluTanhGrad, "gelu_tanh_grad"}};
  for (const auto& [kind, token] : tokens) EXPECT_EQ(epilogue_kind_token(kind), token);
  EXPECT_EQ(epilogue_kind_name(Kind::Activation), "activation");
  EXPECT_EQ(epilogue_link_cpp(Kind::Bias), "fact::gemm::epilogue::ColumnBias");
  EXPECT_EQ(activation_cpp(Activation::GeluTanh, false), "cutlass::epilogue::thread::GELU_taylor");
  EXPECT_EQ(activation_cpp(Activation::GeluTanh, true), "fact::gemm::epilogue::GeluTanhAccurate");
  EXPECT_EQ(activation_cpp(Activation::Tanh, true), "fact::gemm::epilogue::TanhAccurate");
  EXPECT_EQ(activation_cpp(Activation::HardTanh, true), "cutlass::epilogue::thread::Clamp");
  EXPECT_EQ(activation_cpp(Activation::GeluErf, false), "fact::gemm::epilogue::GeluErfFast");
  EXPECT_EQ(activation_cpp(Activation::GeluErf, true), "cutlass::epilogue::thread::GELU");
}

// One link per step, innermost first: its DeviceLink, then the operand's element type, the
// activation functor, or nothing, as the step reads.
TEST(EpilogueOpTableRealize, RenderedChainNamesEveryStepsLink) {
  for (const StepOp& op : kStepOps) {
    SCOPED_TRACE(std::string(op.name));
    GemmSpec spec;
    EpilogueOpSpec step{op.kind, Activation::Identity, DType::Unknown};
    if (op.operand != OperandShape::NONE) step.operand_dtype = DType::BFloat16;
    if (op.constants == StepConstantsRead::ACTIVATION) step.activation = Activation::SiLU;
    spec.epilogue = {step};
    const std::string chain = epilogue_chain_type(spec);
    std::string argument = "\n      ";
    if (op.operand != OperandShape::NONE) argument = "cutlass::bfloat16_t,\n      ";
    if (op.constants == StepConstantsRead::ACTIVATION) argument = "cutlass::epilogue::thread::SiLu,\n      ";
    EXPECT_EQ(chain, std::string(op.device_link) + "<" + argument + "fact::gemm::epilogue::ScaledAccumulator>");
  }
}

}  // namespace
}  // namespace fact::gemm
