#include "patterns/gemm/kind/step_hooks.hpp"

#include <stdexcept>

#include "patterns/gemm/epilogue/op_table.hpp"

namespace fact::gemm {
namespace {

std::vector<StepKindHooks>& registry() {
  static std::vector<StepKindHooks> hooks;
  return hooks;
}

}  // namespace

const StepKindHooks* step_kind_hooks(EpilogueStep::Kind kind) {
  for (const StepKindHooks& hooks : registry()) {
    if (hooks.kind == kind) return &hooks;
  }
  return nullptr;
}

const StepKindHooks* step_kind_hooks_by_abi_id(int32_t abi_id) {
  const StepOp* op = find_step_op_by_abi_id(abi_id);
  return op == nullptr ? nullptr : step_kind_hooks(op->kind);
}

const std::vector<StepKindHooks>& all_step_kind_hooks() { return registry(); }

StepKindHooksRegistrar::StepKindHooksRegistrar(StepKindHooks hooks) {
  if (step_kind_hooks(hooks.kind) != nullptr) {
    throw std::logic_error("epilogue step '" + std::string(step_op(hooks.kind).name) +
                           "' has its kind hooks registered twice");
  }
  registry().push_back(hooks);
}

}  // namespace fact::gemm
