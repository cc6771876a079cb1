#include "patterns/gemm/kind/problem_args.hpp"

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/kind/step_hooks.hpp"

#include <charconv>
#include <set>
#include <stdexcept>

namespace fact::gemm {
namespace {

std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string part(text.substr(start, end - start));
    auto first = part.find_first_not_of(" \t");
    auto last = part.find_last_not_of(" \t");
    part = first == std::string::npos ? std::string() : part.substr(first, last - first + 1);
    if (!part.empty()) parts.push_back(part);
    start = end + 1;
  }
  return parts;
}

Layout parse_layout_letter(char letter, std::string_view whole) {
  if (letter == 't') return Layout::RowMajor;
  if (letter == 'n') return Layout::ColumnMajor;
  throw std::invalid_argument("layout '" + std::string(whole) + "': letters are t (row-major) or n (column-major)");
}

GemmOperand compact_operand(graph::DType dtype, Layout layout, int64_t rows, int64_t cols,
                                      int64_t batch, int64_t outer_batch) {
  GemmOperand operand;
  operand.dtype = dtype;
  operand.layout = layout;
  operand.ld = layout == Layout::RowMajor ? cols : rows;
  operand.batch_stride = batch > 1 ? rows * cols : 0;
  operand.outer_batch_stride = outer_batch > 1 ? batch * rows * cols : 0;
  return operand;
}

}  // namespace

GemmSizes parse_gemm_sizes(std::string_view text) {
  GemmSizes sizes;
  std::set<std::string> seen;
  for (const std::string& token : split_commas(text)) {
    auto equals = token.find('=');
    if (equals == std::string::npos) throw std::invalid_argument("problem: '" + token + "' is not key=value");
    std::string key = token.substr(0, equals), value = token.substr(equals + 1);
    if (!seen.insert(key).second) throw std::invalid_argument("problem: '" + key + "' given twice");
    int64_t number = 0;
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc() || end != value.data() + value.size()) {
      throw std::invalid_argument("problem: '" + token + "': not an integer");
    }
    if (key == "m") sizes.m = number;
    else if (key == "n") sizes.n = number;
    else if (key == "k") sizes.k = number;
    else if (key == "batch" || key == "b") sizes.batch = number;
    else if (key == "outer" || key == "outer_batch") sizes.outer_batch = number;
    else throw std::invalid_argument("problem: unknown key '" + key + "' (m, n, k, batch, outer)");
  }
  for (auto [name, value] : {std::pair{"m", sizes.m}, std::pair{"n", sizes.n}, std::pair{"k", sizes.k}}) {
    if (value < 1) throw std::invalid_argument(std::string("problem: ") + name + " missing or < 1");
  }
  if (sizes.batch < 1) throw std::invalid_argument("problem: batch < 1");
  if (sizes.outer_batch < 1) throw std::invalid_argument("problem: outer < 1");
  return sizes;
}

graph::DType parse_operand_dtype(std::string_view text) {
  const graph::DType dtype = graph::parse_dtype(text);  // any spelling of the dtype table
  if (dtype == graph::DType::BFloat16 || dtype == graph::DType::Float16 || dtype == graph::DType::Float32) return dtype;
  throw std::invalid_argument("dtype '" + std::string(text) + "': expected bf16, fp16 or fp32");
}

core::PrecisionMode default_precision_for(graph::DType dtype) {
  return core::default_precision(dtype);
}

GemmProblem make_gemm_problem(const GemmSizes& sizes, graph::DType dtype, std::string_view epilogue,
                                        std::string_view layouts) {
  if (layouts.size() != 2) throw std::invalid_argument("layout '" + std::string(layouts) + "': two letters (A, B)");
  GemmProblem problem;
  problem.m = sizes.m;
  problem.n = sizes.n;
  problem.k = sizes.k;
  problem.batch = sizes.batch;
  problem.outer_batch = sizes.outer_batch;
  const int64_t batch = sizes.batch, outer = sizes.outer_batch;
  problem.a = compact_operand(dtype, parse_layout_letter(layouts[0], layouts), sizes.m, sizes.k, batch, outer);
  problem.b = compact_operand(dtype, parse_layout_letter(layouts[1], layouts), sizes.k, sizes.n, batch, outer);
  problem.d = compact_operand(dtype, Layout::RowMajor, sizes.m, sizes.n, batch, outer);
  problem.accumulate = graph::DType::Float32;
  problem.alpha = 1.0;
  for (const std::string& token : split_commas(epilogue)) {
    if (token == "none") continue;
    // A step's CLI token is its ops.def name ("mul" also as "multiply"), an activation's name,
    // or a form the step's pattern registers (step_hooks.hpp: from_cli_token); what the step
    // reads (ops.def's OPERAND and CONSTANTS columns) says how it is filled in.
    EpilogueStep step;
    const StepOp* op = find_step_op(token == "multiply" ? std::string_view("mul") : std::string_view(token));
    const ActivationOp* activation = find_activation_op(token);
    std::optional<EpilogueStep> registered;
    for (const StepKindHooks& hooks : all_step_kind_hooks()) {
      if (!registered && hooks.from_cli_token) registered = hooks.from_cli_token(token, sizes, dtype);
    }
    if (registered) {
      step = *registered;
    } else if (op != nullptr && op->constants != StepConstantsRead::ACTIVATION &&
               op->operand != OperandShape::TABLES) {
      // A constant after the GEMM stands in for the model's (a leading scale folds into alpha;
      // the call carries the constant at run time).
      step.kind = op->kind;
      step.value = op->cli_value;
      switch (op->operand) {
        case OperandShape::COLUMN_VECTOR: step.operand_dtype = dtype; break;
        case OperandShape::ROW_VECTOR:
          // One float32 entry per row (a norm's statistic), shared by
          // every batch.
          step.operand = op->name;
          step.operand_dtype = graph::DType::Float32;
          break;
        case OperandShape::MATRIX:
          step.operand_dtype = dtype;
          step.operand_ld = sizes.n;
          step.operand_batch_stride = problem.d.batch_stride;
          step.operand_outer_batch_stride = problem.d.outer_batch_stride;
          break;
        case OperandShape::NONE:
        case OperandShape::TABLES: break;
      }
    } else if (activation != nullptr) {
      step.kind = EpilogueStep::Kind::Activation;
      step.activation = activation->activation;
      step.p0 = activation->cli_p0;
      step.p1 = activation->cli_p1;
    } else {
      std::string steps, activations;
      for (const StepOp& known : kStepOps) {
        if (known.constants != StepConstantsRead::ACTIVATION && known.operand != OperandShape::TABLES)
          steps += std::string(known.name) + ", ";
      }
      for (const ActivationOp& known : kActivationOps) activations += (activations.empty() ? "" : ", ") + std::string(known.name);
      std::string forms;
      for (const StepKindHooks& hooks : all_step_kind_hooks()) {
        if (!hooks.cli_forms.empty()) forms += (forms.empty() ? "" : " / ") + std::string(hooks.cli_forms);
      }
      throw std::invalid_argument("epilogue step '" + token + "': expected " + steps + "an activation (" +
                                  activations + ")" + (forms.empty() ? "" : " or " + forms + " (last)"));
    }
    problem.epilogue.push_back(step);
  }
  // A step that stores D (ops.def's STORES_D) pairs product columns: it is the last, over an
  // even N, with no M x N operand before it (its kernel reads no C).
  for (size_t i = 0; i < problem.epilogue.size(); ++i) {
    const StepOp& store = step_op(problem.epilogue[i].kind);
    if (!store.stores_d) continue;
    const std::string at = "epilogue " + std::string(store.name) + ": ";
    if (sizes.n % 2 != 0) throw std::invalid_argument(at + "n must be even (pairs of columns)");
    if (i + 1 != problem.epilogue.size()) throw std::invalid_argument(at + "must be the last step");
    for (size_t j = 0; j < i; ++j) {
      if (step_op(problem.epilogue[j].kind).operand == OperandShape::MATRIX)
        throw std::invalid_argument(at + "no M x N operand before it");
    }
  }
  if (problem.gated()) {
    problem.d = compact_operand(dtype, Layout::RowMajor, sizes.m, sizes.n / 2, batch, outer);
  }
  return problem;
}

}  // namespace fact::gemm
