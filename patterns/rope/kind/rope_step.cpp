// The rope epilogue step's host pieces for the gemm kind (its row: epilogue_steps.def): the
// checks of a roped problem and call, the head-split output view, its `fact tune` tokens and the
// float64 reference's store.
#include <stdexcept>

#include "fact/problem/abi_elements.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/kind/step_hooks.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

void check_problem(const GemmProblem& p, size_t index) {
  const EpilogueStep& rope = p.epilogue[index];
  if (p.batches() != 1 || rope.group <= 0 || rope.group % 2 != 0 || p.n % rope.group != 0 ||
      rope.period <= 0 || p.m % rope.period != 0 || rope.operand2.empty()) {
    throw std::invalid_argument("a rope step needs one batch, N a multiple of an even head size, "
                                "M a multiple of the period and a sin table");
  }
}

// A roped problem's output may be the head split of its M×N rows, [B, H, T, hd] read from
// [B·T, H·hd] (strides (T·N, hd, N, 1)): the tensor the rotation produced in the captured graph,
// whose memory is exactly D's. True when `d` is that view (M = B·T, N = H·hd).
bool head_split(const GemmProblem& p, const graph::TensorDesc& d) {
  if (p.epilogue.empty() || p.epilogue.back().kind != Kind::Rope || d.rank() != 4) return false;
  const EpilogueStep& rope = p.epilogue.back();
  const int64_t t = rope.period, hd = rope.group;
  if (t <= 0 || hd <= 0 || p.m % t != 0 || p.n % hd != 0) return false;
  const std::vector<int64_t> shape{p.m / t, p.n / hd, t, hd};
  const std::vector<int64_t> stride{t * p.n, hd, p.n, 1};
  if (d.shape != shape) return false;
  for (size_t i = 0; i < 4; ++i) {
    if (d.shape[i] != 1 && d.stride[i] != stride[i]) return false;
  }
  return true;
}

// "rope" / "rope_interleaved": heads of 128 columns (64 when N is no multiple of 128), one
// sequence of M rows, one [M, head] table pair (the call's tables stand in for the model's).
std::optional<EpilogueStep> from_cli_token(std::string_view token, const GemmSizes& sizes,
                                           graph::DType dtype) {
  if (token != "rope" && token != "rope_interleaved") return std::nullopt;
  EpilogueStep step;
  step.kind = Kind::Rope;
  step.operand = "cos";
  step.operand2 = "sin";
  step.operand_dtype = dtype;
  step.group = sizes.n % 128 == 0 ? 128 : 64;
  step.operand_ld = step.group;
  step.period = sizes.m;
  step.interleaved = token == "rope_interleaved";
  return step;
}

// Pairs of columns within heads of `group` columns, rows of sequences of `period` rows: the
// last step, one batch, whole heads and sequences, both tables.
bool call_valid(const FactGemmArgs& args, int index) {
  const FactGemmStep& step = args.steps[index];
  return index == args.num_steps - 1 && step.operand2 != nullptr && step.group > 0 &&
         step.group % 2 == 0 && args.n % step.group == 0 && step.period > 0 &&
         args.m % step.period == 0 && step.ld >= 0 && step.period_stride >= 0 &&
         args.batch == 1 && args.outer_batch <= 1;
}

// Pairs (2p, 2p+1) of each head's columns, each result to its original column.
void store_row(const FactGemmArgs& args, const FactGemmStep& rope, int64_t i, const double* row,
               void (*store)(void*, int64_t, double), void* context) {
  const int64_t group = rope.group, half = group / 2;
  const int64_t table = (i / rope.period) * rope.period_stride + (i % rope.period) * rope.ld;
  auto cos_at = [&](int64_t c) { return load_abi_element(rope.operand, table + c, rope.operand_type); };
  auto sin_at = [&](int64_t c) { return load_abi_element(rope.operand2, table + c, rope.operand_type); };
  for (int64_t head = 0; head < args.n; head += group) {
    for (int64_t pair = 0; pair < half; ++pair) {
      const double xa = row[head + 2 * pair];
      const double xb = row[head + 2 * pair + 1];
      const int64_t ca = rope.interleaved ? 2 * pair : pair;
      const int64_t cb = rope.interleaved ? 2 * pair + 1 : pair + half;
      store(context, head + ca, xa * cos_at(ca) - xb * sin_at(ca));
      store(context, head + cb, xb * cos_at(cb) + xa * sin_at(cb));
    }
  }
}

const StepKindHooksRegistrar kRopeHooks{{
    .kind = Kind::Rope,
    .check_problem = &check_problem,
    .accepts_output_view = &head_split,
    .from_cli_token = &from_cli_token,
    .cli_forms = "rope / rope_interleaved",
    .call_valid = &call_valid,
    .store_row = &store_row,
}};

}  // namespace
}  // namespace fact::gemm
