#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/kind/padding.hpp"

#include <array>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "fact/util/json_fields.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"

namespace fact::gemm {

namespace {

using nlohmann::json;
using util::dtype_field;
using util::field;
using util::int_field;
using util::number;
using util::number_field;
using util::string_field;

// Distinct matrices an operand holds over both batch modes (a zero stride shares one).
double copies(int64_t batch_stride, int64_t outer_batch_stride, int64_t batch, int64_t outer_batch) {
  return double(batch_stride == 0 ? 1 : batch) * double(outer_batch_stride == 0 ? 1 : outer_batch);
}

double operand_bytes(const GemmOperand& operand, int64_t rows, int64_t cols, int64_t batch,
                     int64_t outer_batch) {
  return double(rows) * double(cols) *
         copies(operand.batch_stride, operand.outer_batch_stride, batch, outer_batch) *
         graph::dtype_bytes(operand.dtype);
}

json operand_to_json(const GemmOperand& o, bool two_modes) {
  json j = {{"value", o.value},
            {"dtype", graph::dtype_name(o.dtype)},
            {"layout", layout_name(o.layout)},
            {"ld", o.ld},
            {"batch_stride", o.batch_stride},
            {"offset", o.offset}};
  if (two_modes) j["outer_batch_stride"] = o.outer_batch_stride;
  if (o.padded) j["padded"] = true;
  return j;
}

GemmOperand operand_from_json(const json& j, const std::string& where) {
  GemmOperand o;
  o.value = j.value("value", std::string());
  o.dtype = dtype_field(j, "dtype", where);
  const std::string layout = string_field(j, "layout", where);
  if (layout == "row") o.layout = Layout::RowMajor;
  else if (layout == "col") o.layout = Layout::ColumnMajor;
  else throw std::invalid_argument(where + ".layout: expected \"row\" or \"col\"");
  o.ld = int_field(j, "ld", where);
  o.batch_stride = j.contains("batch_stride") ? int_field(j, "batch_stride", where) : 0;
  o.outer_batch_stride =
      j.contains("outer_batch_stride") ? int_field(j, "outer_batch_stride", where) : 0;
  o.offset = j.contains("offset") ? int_field(j, "offset", where) : 0;
  o.padded = j.value("padded", false);
  return o;
}

}  // namespace

std::string_view layout_name(Layout l) { return l == Layout::RowMajor ? "row" : "col"; }
char layout_token(Layout l) { return l == Layout::RowMajor ? 't' : 'n'; }

// Names come from ops.def (op_table.hpp): the problem's JSON, fusion names, reports and command
// lines all read them.
std::string_view activation_name(Activation a) { return activation_op(a).name; }

std::optional<Activation> parse_activation(std::string_view name) {
  const ActivationOp* op = find_activation_op(name);
  return op ? std::optional<Activation>(op->activation) : std::nullopt;
}

std::string_view epilogue_kind_name(EpilogueStep::Kind k) { return step_op(k).name; }

std::optional<EpilogueStep::Kind> parse_epilogue_kind(std::string_view name) {
  const StepOp* op = find_step_op(name);
  return op ? std::optional<EpilogueStep::Kind>(op->kind) : std::nullopt;
}

bool reads_operand(EpilogueStep::Kind k) { return step_op(k).operand != OperandShape::NONE; }

double GemmProblem::min_bytes() const {
  double bytes = operand_bytes(a, m, k, batch, outer_batch) +
                 operand_bytes(b, k, n, batch, outer_batch) +
                 operand_bytes(d, m, d_cols(), batch, outer_batch);
  for (const auto& step : epilogue) {
    const int bytes_per = graph::dtype_bytes(step.operand_dtype);
    const double held = copies(step.operand_batch_stride, step.operand_outer_batch_stride, batch,
                               outer_batch);
    const OperandShape shape = step_op(step.kind).operand;
    if (shape == OperandShape::COLUMN_VECTOR) bytes += double(n) * bytes_per * held;
    if (shape == OperandShape::ROW_VECTOR) bytes += double(m) * bytes_per * held;
    if (shape == OperandShape::MATRIX) bytes += double(m) * double(n) * held * bytes_per;
    if (shape == OperandShape::TABLES && step.period > 0) {
      // cos and sin, [sequences or 1, period, group] each
      const double sequences = step.period_stride == 0 ? 1.0 : double(m / step.period);
      bytes += 2.0 * sequences * double(step.period) * double(step.group) * bytes_per;
    }
  }
  return bytes;
}

bool GemmProblem::gated() const {
  return !epilogue.empty() && step_op(epilogue.back().kind).halves_columns;
}

std::string GemmProblem::fusion_name() const {
  std::string name = batches() > 1 ? "bgemm" : "gemm";
  for (const auto& step : epilogue) {
    name += '_';
    name += step.kind == EpilogueStep::Kind::Activation ? activation_name(step.activation)
                                                         : epilogue_kind_name(step.kind);
    // A step other than an activation that reads one (a gate) names it too.
    if (step.kind != EpilogueStep::Kind::Activation &&
        step_op(step.kind).constants == StepConstantsRead::ACTIVATION) {
      name += '_';
      name += activation_name(step.activation);
    }
  }
  return name;
}

std::string GemmProblem::shape_string() const {
  std::ostringstream out;
  if (outer_batch > 1) out << outer_batch << 'x';
  if (batches() > 1) out << batch << "x(";
  out << m << 'x' << n << 'x' << k;
  if (batches() > 1) out << ')';
  return out.str();
}

KernelEpilogue kernel_epilogue(const GemmProblem& p) {
  KernelEpilogue out;
  out.alpha = p.alpha;
  bool leading = true;
  for (const auto& step : p.epilogue) {
    if (leading && step.kind == EpilogueStep::Kind::Scale) {
      out.alpha *= step.value;
      continue;
    }
    leading = false;
    if (step.kind == EpilogueStep::Kind::Activation && step.activation == Activation::Identity) continue;
    out.steps.push_back(step);
  }
  return out;
}

json gemm_problem_to_json(const GemmProblem& p) {
  const bool two_modes = p.outer_batch != 1;
  json epilogue = json::array();
  for (const auto& step : p.epilogue) {
    const StepOp& op = step_op(step.kind);
    json s = {{"kind", op.name}};
    if (op.constants == StepConstantsRead::ACTIVATION) {
      s["activation"] = activation_name(step.activation);
      s["p0"] = number(step.p0);
      s["p1"] = number(step.p1);
    }
    if (op.constants == StepConstantsRead::VALUE ||
        (op.constants == StepConstantsRead::VALUE_DEFAULT_ONE && step.value != 1.0)) {
      s["value"] = number(step.value);
    }
    if (!step.operand.empty()) {
      s["operand"] = step.operand;
      s["operand_dtype"] = graph::dtype_name(step.operand_dtype);
      s["operand_ld"] = step.operand_ld;
      s["operand_batch_stride"] = step.operand_batch_stride;
      if (two_modes) s["operand_outer_batch_stride"] = step.operand_outer_batch_stride;
    }
    if (op.operand == OperandShape::TABLES) {
      s["operand2"] = step.operand2;
      s["period"] = step.period;
      s["period_stride"] = step.period_stride;
      s["group"] = step.group;
      s["interleaved"] = step.interleaved;
    }
    epilogue.push_back(std::move(s));
  }
  json j = {{"fusion", p.fusion_name()},
            {"shape", p.shape_string()},
            {"m", p.m},
            {"n", p.n},
            {"k", p.k},
            {"batch", p.batch},
            {"alpha", number(p.alpha)},
            {"accumulate", graph::dtype_name(p.accumulate)},
            {"a", operand_to_json(p.a, two_modes)},
            {"b", operand_to_json(p.b, two_modes)},
            {"d", operand_to_json(p.d, two_modes)},
            {"epilogue", std::move(epilogue)}};
  if (two_modes) j["outer_batch"] = p.outer_batch;
  if (const std::string padding = padding_summary(p); !padding.empty()) j["padding"] = padding;
  return j;
}

GemmProblem gemm_problem_from_json(const json& j) {
  const std::string where = "gemm";
  GemmProblem p;
  p.m = int_field(j, "m", where);
  p.n = int_field(j, "n", where);
  p.k = int_field(j, "k", where);
  p.batch = j.contains("batch") ? int_field(j, "batch", where) : 1;
  p.outer_batch = j.contains("outer_batch") ? int_field(j, "outer_batch", where) : 1;
  if (p.batch < 1 || p.outer_batch < 1)
    throw std::invalid_argument(where + ".batch / outer_batch: expected >= 1");
  p.alpha = number_field(j, "alpha", where, 1.0);
  if (j.contains("accumulate")) p.accumulate = dtype_field(j, "accumulate", where);
  p.a = operand_from_json(field(j, "a", where), where + ".a");
  p.b = operand_from_json(field(j, "b", where), where + ".b");
  p.d = operand_from_json(field(j, "d", where), where + ".d");
  if (j.contains("epilogue")) {
    const json& steps = j.at("epilogue");
    if (!steps.is_array()) throw std::invalid_argument(where + ".epilogue: expected an array");
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::string at = where + ".epilogue[" + std::to_string(i) + "]";
      EpilogueStep step;
      const auto kind = parse_epilogue_kind(string_field(steps[i], "kind", at));
      if (!kind) throw std::invalid_argument(at + ".kind: unknown step kind");
      step.kind = *kind;
      if (step_op(step.kind).constants == StepConstantsRead::ACTIVATION) {
        auto act = parse_activation(string_field(steps[i], "activation", at));
        if (!act) throw std::invalid_argument(at + ".activation: unknown activation");
        step.activation = *act;
      }
      step.value = number_field(steps[i], "value", at, 1.0);
      step.p0 = number_field(steps[i], "p0", at, 0.0);
      step.p1 = number_field(steps[i], "p1", at, 0.0);
      step.operand = steps[i].value("operand", std::string());
      step.operand_dtype = dtype_field(steps[i], "operand_dtype", at);
      step.operand_ld = steps[i].value("operand_ld", int64_t{0});
      step.operand_batch_stride = steps[i].value("operand_batch_stride", int64_t{0});
      step.operand_outer_batch_stride = steps[i].value("operand_outer_batch_stride", int64_t{0});
      if (step_op(step.kind).operand == OperandShape::TABLES) {
        step.operand2 = steps[i].value("operand2", std::string());
        step.period = int_field(steps[i], "period", at);
        step.period_stride = steps[i].value("period_stride", int64_t{0});
        step.group = int_field(steps[i], "group", at);
        step.interleaved = steps[i].value("interleaved", false);
        if (step.period <= 0 || step.group <= 0 || step.group % 2 != 0)
          throw std::invalid_argument(at + ": a " + std::string(step_op(step.kind).name) +
                                      " step needs period > 0 and an even group > 0");
      }
      p.epilogue.push_back(std::move(step));
    }
  }
  return p;
}

Problem to_problem(const GemmProblem& p) { return Problem{kKindName, gemm_problem_to_json(p)}; }

GemmProblem gemm_problem_of(const Problem& problem) {
  if (problem.kind != kKindName) {
    throw std::invalid_argument("expected a problem of kind gemm, not '" + problem.kind + "'");
  }
  return gemm_problem_from_json(problem.desc);
}

}  // namespace fact::gemm
