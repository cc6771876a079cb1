// The glu epilogue step's host pieces for the gemm kind (its row: epilogue_steps.def): the
// `fact tune` tokens and the float64 reference's store.

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/kind/step_hooks.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

// "glu_<activation>": a gated linear unit over interleaved gate / up columns (D is M x N/2),
// gating with an activation whose GATES column is 1.
std::optional<EpilogueStep> from_cli_token(std::string_view token, const GemmSizes&, graph::DType) {
  if (token.rfind("glu_", 0) != 0) return std::nullopt;
  const ActivationOp* activation = find_activation_op(token.substr(4));
  if (activation == nullptr) return std::nullopt;
  EpilogueStep step;
  step.kind = Kind::Glu;
  step.activation = activation->activation;
  return step;
}

// D[i, j] = act(x[i, 2j]; p0, p1) · x[i, 2j+1].
void store_row(const FactGemmArgs& args, const FactGemmStep& glu, int64_t, const double* row,
               void (*store)(void*, int64_t, double), void* context) {
  for (int64_t j = 0; j < args.n / 2; ++j) {
    store(context, j, ops::activate<double>(glu.activation, row[2 * j], glu.p0, glu.p1) * row[2 * j + 1]);
  }
}

const StepKindHooksRegistrar kGluHooks{{
    .kind = Kind::Glu,
    .from_cli_token = &from_cli_token,
    .cli_forms = "glu_<activation>",
    .store_row = &store_row,
}};

}  // namespace
}  // namespace fact::gemm
