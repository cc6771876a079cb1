// The host's view of ops.def: one descriptor per step kind and per activation, in ops.def's
// order, for every table the engine keeps (JSON names, ABI ids, kernel tokens, CUTLASS
// spellings, float64 references, CLI defaults, discovery's aten targets of activations and
// steps). Look-ups go through step_op() / activation_op(); nothing else spells an op.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "patterns/gemm/epilogue/op_formulas.h"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

// What a step reads besides x (ops.def's OPERAND column).
enum class OperandShape {
  NONE,           // nothing
  COLUMN_VECTOR,  // operand[n]: a length-N vector (a bias)
  ROW_VECTOR,     // operand[m]: a length-M vector (a row scale)
  MATRIX,         // operand[m, n]: an M×N tensor in D's layout
  TABLES,         // two tables (operand, operand2) read by the step's own store
};

// Which FactGemmStep constants a step reads (ops.def's CONSTANTS column).
enum class StepConstantsRead {
  NONE,
  VALUE,              // value (written to JSON always)
  VALUE_DEFAULT_ONE,  // value, written to JSON only when not 1 (a bias's multiplier)
  ACTIVATION,         // activation, p0, p1
};

struct StepOp {
  EpilogueStep::Kind kind;
  int32_t abi_id;                  // FactGemmStepKind
  std::string_view name;           // JSON / plan / CLI / fusion-name spelling
  std::string_view kernel_token;   // kernel specs and kernel names
  std::string_view device_link;    // the link template a rendered chain names
  OperandShape operand;
  StepConstantsRead constants;
  bool stores_d;                   // the last step; pairs columns and writes D itself
  bool halves_columns;             // it stores D with N/2 columns (two product columns each)
  double cli_value;                // `value` of a step made from its CLI token
  std::string_view derivative;     // the backward op's name ("": none yet)
  std::string_view aten_targets;   // space-separated aten ops that are this step after a GEMM
  std::string_view aten_arguments; // space-separated name=value ([name=value]: or absent)
  // The float64 reference of one element: x after the step, given the operand element.
  double (*reference)(double x, double operand, const ops::StepConstants<double>& constants);
};

struct ActivationOp {
  Activation activation;
  int32_t abi_id;                  // FactActivation
  std::string_view name;           // JSON / plan / CLI / fusion-name spelling and kernel token
  std::string_view functor_16bit;  // device functor for 16-bit outputs
  std::string_view functor_f32;    // device functor for float32 outputs
  std::string_view aten_targets;   // space-separated aten ops that are this activation
  std::string_view aten_defaults;  // space-separated name=value the aten op's arguments must have
  double cli_p0, cli_p1;           // p0, p1 of a step made from its CLI token
  bool gates;                      // a gating step may gate with it
  std::string_view derivative;     // the backward op's name ("": none yet)
  double (*reference)(double x, double p0, double p1);  // float64
};

#define FACT_GEMM_STEP(C_NAME, CPP, ID, NAME, TOKEN, LINK, OPERAND, CONSTANTS, STORES_D, FORMULA, \
                       CLI_VALUE, DERIVATIVE, ATEN, ATEN_ARGUMENTS)                                \
  StepOp{EpilogueStep::Kind::CPP, ID, NAME, TOKEN, #LINK, OperandShape::OPERAND,                  \
         StepConstantsRead::CONSTANTS, STORES_D != 0, STORES_D == 2, CLI_VALUE, DERIVATIVE,        \
         ATEN, ATEN_ARGUMENTS, &FORMULA::apply<double>},
inline constexpr std::array kStepOps{
#include "patterns/gemm/epilogue/ops.def"
};
#undef FACT_GEMM_STEP

#define FACT_GEMM_ACTIVATION(C_NAME, CPP, ID, NAME, F16, F32, FORMULA, ATEN, ATEN_DEFAULTS, P0, P1, \
                             GATES, DERIVATIVE)                                                      \
  ActivationOp{Activation::CPP, ID, NAME, #F16, #F32, ATEN, ATEN_DEFAULTS, P0, P1, GATES != 0,      \
               DERIVATIVE, &FORMULA::apply<double>},
inline constexpr std::array kActivationOps{
#include "patterns/gemm/epilogue/ops.def"
};
#undef FACT_GEMM_ACTIVATION

// Look-ups: the descriptor of a kind / activation (every enumerator has one: both enums are
// declared from ops.def, in its order); by JSON name or ABI id (nullptr when unknown).
// The enums are declared from ops.def in its order: the enumerator's ordinal is its row.
inline const StepOp& step_op(EpilogueStep::Kind kind) { return kStepOps.at(static_cast<size_t>(kind)); }

inline const ActivationOp& activation_op(Activation activation) {
  return kActivationOps.at(static_cast<size_t>(activation));
}

inline const StepOp* find_step_op(std::string_view name) {
  for (const StepOp& op : kStepOps) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

inline const ActivationOp* find_activation_op(std::string_view name) {
  for (const ActivationOp& op : kActivationOps) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

inline const StepOp* find_step_op_by_abi_id(int32_t abi_id) {
  for (const StepOp& op : kStepOps) {
    if (op.abi_id == abi_id) return &op;
  }
  return nullptr;
}

inline const ActivationOp* find_activation_op_by_abi_id(int32_t abi_id) {
  for (const ActivationOp& op : kActivationOps) {
    if (op.abi_id == abi_id) return &op;
  }
  return nullptr;
}

}  // namespace fact::gemm
