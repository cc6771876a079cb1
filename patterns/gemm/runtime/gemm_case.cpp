#include "patterns/gemm/runtime/gemm_case.hpp"

#include <stdexcept>

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/realize/cutlass_names.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"

namespace fact::gemm {

using Kind = EpilogueStep::Kind;

namespace {

bool is_storage_dtype(DType t) {
  return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16;
}

int64_t leading_dimension(Layout layout, int64_t rows, int64_t cols) {
  return layout == Layout::RowMajor ? cols : rows;
}

GemmOperand compact(const std::string& value, DType dtype, Layout layout, int64_t rows,
                    int64_t cols, int64_t batch) {
  GemmOperand o;
  o.value = value;
  o.dtype = dtype;
  o.layout = layout;
  o.ld = leading_dimension(layout, rows, cols);
  o.batch_stride = rows * cols;
  o.outer_batch_stride = batch * rows * cols;
  return o;
}

// The stand-in constants of make_gemm_problem for a step of this kind.
void default_constants(EpilogueStep& step) {
  // ops.def's CLI columns: the step's stand-in value, an activation's PyTorch default p0 / p1.
  step.value = step_op(step.kind).cli_value;
  step.p0 = step.p1 = 0.0;
  if (step.kind == Kind::Activation) {
    step.p0 = activation_op(step.activation).cli_p0;
    step.p1 = activation_op(step.activation).cli_p1;
  }
}

std::string dtype_text(DType t) { return std::string(graph::dtype_name(t)); }

}  // namespace

GemmCase make_gemm_case(const GemmSpec& spec, const GemmProblem& problem, PrecisionMode precision) {
  if (problem.m <= 0 || problem.n <= 0 || problem.k <= 0 || problem.batch < 1 ||
      problem.outer_batch < 1) {
    throw std::invalid_argument("problem sizes must be positive");
  }
  if (problem.batch > 1 && !spec.batched) {
    throw std::invalid_argument("batch=" + std::to_string(problem.batch) +
                                " but the kernel is not built for batched problems");
  }
  for (DType t : {spec.a_dtype, spec.b_dtype, spec.d_dtype}) {
    if (!is_storage_dtype(t)) {
      throw std::invalid_argument("dtype " + dtype_text(t) +
                                  " is not supported (float32, bfloat16, float16)");
    }
  }
  if (spec.epilogue.size() > FACT_GEMM_MAX_STEPS) {
    throw std::invalid_argument(std::to_string(spec.epilogue.size()) +
                                " epilogue steps (a call carries at most " +
                                std::to_string(FACT_GEMM_MAX_STEPS) + ")");
  }

  GemmCase c;
  c.precision = precision;
  c.math = spec.math;
  GemmProblem& p = c.problem;
  p.m = problem.m;
  p.n = problem.n;
  p.k = problem.k;
  p.batch = problem.batch;
  p.outer_batch = problem.outer_batch;
  p.accumulate = spec.accumulate;
  const KernelEpilogue given = kernel_epilogue(problem);
  p.alpha = given.alpha;
  p.a = compact("A", spec.a_dtype, spec.a_layout, p.m, p.k, p.batch);
  p.b = compact("B", spec.b_dtype, spec.b_layout, p.k, p.n, p.batch);
  // D has N/2 columns behind a step that pairs product columns into one (ops.def's STORES_D 2),
  // N otherwise.
  const bool gated = !spec.epilogue.empty() && step_op(spec.epilogue.back().kind).halves_columns;
  if (gated && p.n % 2 != 0) {
    throw std::invalid_argument("a gated epilogue pairs columns: n=" + std::to_string(p.n) + " is odd");
  }
  p.d = compact("D", spec.d_dtype, spec.d_layout, p.m, gated ? p.n / 2 : p.n, p.batch);

  bool same_kinds = given.steps.size() == spec.epilogue.size();
  for (size_t i = 0; same_kinds && i < spec.epilogue.size(); ++i) {
    same_kinds = given.steps[i].kind == spec.epilogue[i].kind &&
                 (step_op(spec.epilogue[i].kind).constants != StepConstantsRead::ACTIVATION ||
                  given.steps[i].activation == spec.epilogue[i].activation);
  }
  for (size_t i = 0; i < spec.epilogue.size(); ++i) {
    const EpilogueOpSpec& op = spec.epilogue[i];
    EpilogueStep step;
    step.kind = op.kind;
    const StepOp& descriptor = step_op(op.kind);
    step.activation =
        descriptor.constants == StepConstantsRead::ACTIVATION ? op.activation : Activation::Identity;
    if (same_kinds) {
      step.value = given.steps[i].value;
      step.p0 = given.steps[i].p0;
      step.p1 = given.steps[i].p1;
    } else {
      default_constants(step);
    }
    if (reads_operand(op.kind)) {
      step.operand = "E" + std::to_string(i);
      step.operand_dtype = op.operand_dtype == DType::Unknown ? spec.d_dtype : op.operand_dtype;
      if (!is_storage_dtype(step.operand_dtype)) {
        throw std::invalid_argument("epilogue operand dtype " + dtype_text(step.operand_dtype) +
                                    " is not supported");
      }
      if (descriptor.operand == OperandShape::TABLES) {
        // The problem's groups (heads) and sequences when it has this step, else one sequence
        // of M rows and groups of 128 (or 64) columns; compact [period, group] tables, one per
        // sequence when the problem's differ by sequence.
        const EpilogueStep* given_tables = same_kinds ? &given.steps[i] : nullptr;
        step.group = given_tables && given_tables->group > 0 ? given_tables->group
                     : p.n % 128 == 0                        ? 128
                                                             : 64;
        step.period = given_tables && given_tables->period > 0 ? given_tables->period : p.m;
        step.interleaved = given_tables && given_tables->interleaved;
        step.operand2 = "E" + std::to_string(i) + "_sin";
        step.operand_ld = step.group;
        step.period_stride =
            given_tables && given_tables->period_stride != 0 ? step.period * step.group : 0;
        if (p.n % step.group != 0 || p.m % step.period != 0 || p.batch != 1 || p.outer_batch != 1) {
          throw std::invalid_argument("a " + std::string(descriptor.name) +
                                      " step needs one batch, N a multiple of its head size and "
                                      "M a multiple of its sequence length");
        }
      } else if (descriptor.operand == OperandShape::COLUMN_VECTOR ||
                 descriptor.operand == OperandShape::ROW_VECTOR) {
        step.operand_ld = 0;
        step.operand_batch_stride = 0;  // one vector for every batch
        step.operand_outer_batch_stride = 0;
      } else {
        step.operand_ld = p.d.ld;
        step.operand_batch_stride = p.d.batch_stride;
        step.operand_outer_batch_stride = p.d.outer_batch_stride;
      }
    }
    p.epilogue.push_back(step);
  }
  if (kernel_epilogue(p).steps.size() != p.epilogue.size()) {
    throw std::invalid_argument(
        "the kernel's epilogue is not in the form a kernel runs it (a leading scale step is "
        "alpha, an identity activation no step): its steps and the call's would not line up");
  }
  return c;
}

GemmCase with_adversarial_constants(GemmCase c, bool vary_bias_multiplier) {
  c.problem.alpha = -1.25;
  for (size_t i = 0; i < c.problem.epilogue.size(); ++i) {
    EpilogueStep& step = c.problem.epilogue[i];
    const double at = static_cast<double>(i);
    switch (step.kind) {
      case Kind::Scale: step.value = 0.625 + 0.0625 * at; break;
      case Kind::AddScalar: step.value = -0.375 - 0.0625 * at; break;
      case Kind::Residual: step.value = 1.375 + 0.0625 * at; break;
      case Kind::Bias:  // its multiplier
        if (vary_bias_multiplier) step.value = -1.5 - 0.0625 * at;
        break;
      case Kind::Activation:
        if (step.activation == Activation::LeakyReLU) step.p0 = 0.2 + 0.0625 * at;
        if (step.activation == Activation::HardTanh) {
          step.p0 = -0.6 + 0.03125 * at;
          step.p1 = 0.4 + 0.03125 * at;
        }
        break;
      default:  // no constants to vary (a gate's activations take none; operands are data)
        break;
    }
  }
  return c;
}

GemmProblem as_one_batch_mode(GemmProblem p) {
  if (p.outer_batch == 1) return p;
  auto merges = [&](int64_t stride, int64_t outer_stride) {
    return outer_stride == p.batch * stride || (p.batch == 1 && stride == 0 && outer_stride == 0);
  };
  bool ok = merges(p.a.batch_stride, p.a.outer_batch_stride) &&
            merges(p.b.batch_stride, p.b.outer_batch_stride) &&
            merges(p.d.batch_stride, p.d.outer_batch_stride);
  for (const EpilogueStep& step : p.epilogue) {
    if (reads_operand(step.kind)) {
      ok = ok && merges(step.operand_batch_stride, step.operand_outer_batch_stride);
    }
  }
  if (!ok) {
    throw std::invalid_argument("the two batch modes of " + p.shape_string() +
                                " do not merge into one batch stride");
  }
  auto merge = [&](int64_t& stride, int64_t& outer_stride) {
    if (p.batch == 1) stride = outer_stride;
    outer_stride = 0;
  };
  merge(p.a.batch_stride, p.a.outer_batch_stride);
  merge(p.b.batch_stride, p.b.outer_batch_stride);
  merge(p.d.batch_stride, p.d.outer_batch_stride);
  for (EpilogueStep& step : p.epilogue) {
    merge(step.operand_batch_stride, step.operand_outer_batch_stride);
  }
  p.batch *= p.outer_batch;
  p.outer_batch = 1;
  return p;
}

GemmProblem with_epilogue_prefix(GemmProblem problem, size_t steps) {
  if (steps < problem.epilogue.size()) problem.epilogue.resize(steps);
  return problem;
}

GemmSpec baseline_spec(const GemmProblem& problem, PrecisionMode precision) {
  GemmSpec spec = spec_from_problem(problem, precision);
  spec.pattern = "baseline";
  if (spec.math == MathMode::Tf32x3) spec.math = MathMode::Simt;  // cuBLAS SGEMM
  return spec;
}

std::optional<std::string> precision_mismatch(const GemmSpec& spec, PrecisionMode mode) {
  const std::string mode_text(core::precision_name(mode));
  if (spec.accumulate != DType::Float32 && spec.accumulate != DType::Float64) {
    return "kernel accumulates in " + dtype_text(spec.accumulate) +
           "; every precision mode requires float32 accumulation";
  }
  const bool fp32_operands = spec.a_dtype == DType::Float32 && spec.b_dtype == DType::Float32;
  const auto is_half = [](DType t) { return t == DType::BFloat16 || t == DType::Float16; };
  switch (mode) {
    case PrecisionMode::Strict:
    case PrecisionMode::Tf32: {
      if (!fp32_operands) {
        return "precision '" + mode_text + "' needs float32 operands, kernel reads " +
               dtype_text(spec.a_dtype) + "/" + dtype_text(spec.b_dtype) + " (use --precision native)";
      }
      const bool accurate = spec.math == MathMode::Tf32x3 || spec.math == MathMode::Simt;
      const bool allowed = accurate || (mode == PrecisionMode::Tf32 && spec.math == MathMode::Tf32);
      if (!allowed) {
        return "precision '" + mode_text + "' does not allow math '" +
               std::string(math_token(spec.math)) + "' for float32 operands";
      }
      return std::nullopt;
    }
    case PrecisionMode::Native: {
      if (!is_half(spec.a_dtype) || !is_half(spec.b_dtype)) {
        return "precision 'native' is for bf16/fp16 operands, kernel reads " +
               dtype_text(spec.a_dtype) + "/" + dtype_text(spec.b_dtype) +
               " (use --precision strict or tf32)";
      }
      if (spec.math != MathMode::Native) {
        return "precision 'native' expects math 'native' for bf16/fp16 operands, kernel uses '" +
               std::string(math_token(spec.math)) + "'";
      }
      return std::nullopt;
    }
  }
  return "unknown precision mode";
}

}  // namespace fact::gemm
