// What a pattern folder registers, for the gemm kind's host code, about an epilogue step that
// belongs to it (a row of its epilogue_steps.def): the parts of the step that the table's columns
// cannot say. The GEMM's own code asks the registry by step kind and names no such step.
//
// A pattern registers from its kind/ folder (compiled with the gemm kind):
//   const gemm::StepKindHooksRegistrar kHooks{{.kind = gemm::EpilogueStep::Kind::<CppName>, ...}};
// Every hook is optional; at most one registration per kind (a second throws at start-up).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fact/graph/graph.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

struct GemmSizes;

struct StepKindHooks {
  EpilogueStep::Kind kind;
  // Checks of a problem whose epilogue has this step at `index`, beyond the table's (pack,
  // `fact tune --problem`): throws std::invalid_argument with the reason.
  void (*check_problem)(const GemmProblem& p, size_t index) = nullptr;
  // True when D, the last step's output, may be `d`, a view of the dense M×N rows other than
  // the row-major matrix itself (pack): e.g. the rows split into heads.
  bool (*accepts_output_view)(const GemmProblem& p, const graph::TensorDesc& d) = nullptr;
  // The step made from a `fact tune --epilogue` token other than its table name (e.g. with an
  // activation appended), or nullopt when the token is not this step's. `dtype` is the operands'.
  std::optional<EpilogueStep> (*from_cli_token)(std::string_view token, const GemmSizes& sizes,
                                                graph::DType dtype) = nullptr;
  std::string_view cli_forms;  // those tokens, for the error message ("<name>_<activation>")
  // The host reference of a call (kind/reference_host.cpp) with this step at `index`: false
  // when the step's fields are unusable (the table's checks already passed).
  bool (*call_valid)(const FactGemmArgs& args, int index) = nullptr;
  // For a step that stores D itself (STORES_D): writes D's row i from
  // `row`, the row's N values before the step, through store(column, value).
  void (*store_row)(const FactGemmArgs& args, const FactGemmStep& step, int64_t i,
                    const double* row, void (*store)(void* context, int64_t column, double value),
                    void* context) = nullptr;
};

// The hooks registered for `kind`, or nullptr.
const StepKindHooks* step_kind_hooks(EpilogueStep::Kind kind);
const StepKindHooks* step_kind_hooks_by_abi_id(int32_t abi_id);
// Every registration (for `fact tune`'s error message and tests).
const std::vector<StepKindHooks>& all_step_kind_hooks();

struct StepKindHooksRegistrar {
  explicit StepKindHooksRegistrar(StepKindHooks hooks);
};

}  // namespace fact::gemm
