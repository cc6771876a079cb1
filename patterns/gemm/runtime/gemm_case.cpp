#include "patterns/gemm/runtime/gemm_case.hpp"

#include <charconv>
#include <cmath>
#include <set>
#include <stdexcept>

namespace fact::runtime {

using discover::Activation;
using discover::EpilogueStep;
using discover::GemmProblem;
using discover::Layout;
using graph::DType;
using Kind = discover::EpilogueStep::Kind;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    parts.push_back(trim(text.substr(start, end - start)));
    start = end + 1;
  }
  return parts;
}

int64_t parse_int(std::string_view key, std::string_view value) {
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || ptr != value.data() + value.size()) {
    throw std::invalid_argument("problem: '" + std::string(key) + "=" + std::string(value) +
                                "' is not an integer");
  }
  return out;
}

double parse_double(std::string_view key, std::string_view value) {
  double out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || ptr != value.data() + value.size() || !std::isfinite(out)) {
    throw std::invalid_argument("problem: '" + std::string(key) + "=" + std::string(value) +
                                "' is not a finite number");
  }
  return out;
}

std::string format_double(double v) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  return std::string(buf, result.ptr);
}

bool is_output_dtype(DType t) {
  return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16;
}

int64_t leading_dimension(Layout layout, int64_t rows, int64_t cols) {
  return layout == Layout::RowMajor ? cols : rows;
}

}  // namespace

ProblemSize parse_problem_size(std::string_view text) {
  ProblemSize size;
  std::set<std::string, std::less<>> seen;
  bool has_m = false, has_n = false, has_k = false;
  for (std::string_view token : split(text, ',')) {
    if (token.empty()) continue;
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) {
      throw std::invalid_argument("problem: '" + std::string(token) + "' is not key=value");
    }
    const std::string_view key = trim(token.substr(0, eq));
    const std::string_view value = trim(token.substr(eq + 1));
    if (!seen.insert(std::string(key)).second) {
      throw std::invalid_argument("problem: key '" + std::string(key) + "' given twice");
    }
    if (key == "m") { size.m = parse_int(key, value); has_m = true; }
    else if (key == "n") { size.n = parse_int(key, value); has_n = true; }
    else if (key == "k") { size.k = parse_int(key, value); has_k = true; }
    else if (key == "batch") size.batch = parse_int(key, value);
    else if (key == "alpha") size.alpha = parse_double(key, value);
    else if (key == "beta") size.beta = parse_double(key, value);
    else if (key == "p0") size.p0 = parse_double(key, value);
    else if (key == "p1") size.p1 = parse_double(key, value);
    else {
      throw std::invalid_argument("problem: unknown key '" + std::string(key) +
                                  "' (expected m, n, k, batch, alpha, beta, p0, p1)");
    }
  }
  if (!has_m || !has_n || !has_k) {
    throw std::invalid_argument("problem: '" + std::string(text) + "' must give m, n and k");
  }
  if (size.m <= 0 || size.n <= 0 || size.k <= 0) {
    throw std::invalid_argument("problem: m, n and k must be positive in '" + std::string(text) +
                                "'");
  }
  if (size.batch < 1) {
    throw std::invalid_argument("problem: batch must be at least 1 in '" + std::string(text) + "'");
  }
  return size;
}

std::string to_string(const ProblemSize& size) {
  std::string out = "m=" + std::to_string(size.m) + ",n=" + std::to_string(size.n) +
                    ",k=" + std::to_string(size.k) + ",batch=" + std::to_string(size.batch);
  if (size.alpha) out += ",alpha=" + format_double(*size.alpha);
  if (size.beta) out += ",beta=" + format_double(*size.beta);
  if (size.p0) out += ",p0=" + format_double(*size.p0);
  if (size.p1) out += ",p1=" + format_double(*size.p1);
  return out;
}

static std::pair<double, double> default_activation_params(Activation act) {
  switch (act) {
    case Activation::LeakyReLU: return {0.01, 0.0};
    case Activation::HardTanh: return {-1.0, 1.0};
    default: return {0.0, 0.0};
  }
}

GemmCase make_gemm_case(const realize::KernelSpec& spec, const ProblemSize& size,
                        PrecisionMode precision) {
  if (size.m <= 0 || size.n <= 0 || size.k <= 0 || size.batch < 1) {
    throw std::invalid_argument("problem sizes must be positive");
  }
  if (size.batch > 1 && !spec.batched) {
    throw std::invalid_argument("batch=" + std::to_string(size.batch) +
                                " but the kernel is not built for batched problems");
  }
  if (!is_output_dtype(spec.d_dtype)) {
    throw std::invalid_argument("output dtype " + std::string(graph::dtype_name(spec.d_dtype)) +
                                " is not supported (float32, bfloat16, float16)");
  }
  for (DType t : {spec.a_dtype, spec.b_dtype}) {
    if (!is_output_dtype(t)) {
      throw std::invalid_argument("operand dtype " + std::string(graph::dtype_name(t)) +
                                  " is not supported (float32, bfloat16, float16)");
    }
  }

  GemmCase c;
  c.precision = precision;
  c.math = spec.math;
  GemmProblem& p = c.problem;
  p.m = size.m;
  p.n = size.n;
  p.k = size.k;
  p.batch = size.batch;
  p.accumulate = spec.accumulate;
  p.alpha = size.alpha.value_or(1.0);
  p.a = {.value = "A", .dtype = spec.a_dtype, .layout = spec.a_layout,
         .ld = leading_dimension(spec.a_layout, size.m, size.k), .batch_stride = size.m * size.k};
  p.b = {.value = "B", .dtype = spec.b_dtype, .layout = spec.b_layout,
         .ld = leading_dimension(spec.b_layout, size.k, size.n), .batch_stride = size.k * size.n};
  p.d = {.value = "D", .dtype = spec.d_dtype, .layout = spec.d_layout,
         .ld = leading_dimension(spec.d_layout, size.m, size.n), .batch_stride = size.m * size.n};

  int c_operands = 0;
  for (size_t i = 0; i < spec.epilogue.size(); ++i) {
    const realize::EpilogueOpSpec& op = spec.epilogue[i];
    EpilogueStep step;
    step.kind = op.kind;
    step.activation = op.activation;
    step.operand_dtype = op.operand_dtype == DType::Unknown ? spec.d_dtype : op.operand_dtype;
    switch (op.kind) {
      case Kind::Scale:
        if (i != 0) {
          throw std::invalid_argument(
              "epilogue step " + std::to_string(i) +
              " is a Scale step; the kernel ABI only carries a leading scale (alpha)");
        }
        continue;  // folded into alpha
      case Kind::Bias:
        step.operand = "bias";
        break;
      case Kind::Residual:
        step.operand = "C";
        step.value = size.beta.value_or(1.0);
        ++c_operands;
        break;
      case Kind::Multiply:
        step.operand = "C";
        ++c_operands;
        break;
      case Kind::Activation: {
        auto [p0, p1] = default_activation_params(op.activation);
        step.p0 = size.p0.value_or(p0);
        step.p1 = size.p1.value_or(p1);
        step.operand_dtype = DType::Unknown;
        break;
      }
    }
    if (step.kind == Kind::Bias || step.kind == Kind::Residual || step.kind == Kind::Multiply) {
      if (!is_output_dtype(step.operand_dtype)) {
        throw std::invalid_argument("epilogue operand dtype " +
                                    std::string(graph::dtype_name(step.operand_dtype)) +
                                    " is not supported");
      }
    }
    p.epilogue.push_back(step);
  }
  if (c_operands > 1) {
    throw std::invalid_argument(
        "the epilogue reads two M×N operands (Residual/Multiply); the kernel ABI has one C");
  }
  return c;
}

GemmCase with_scalars(GemmCase c, double alpha, double beta, double p0, double p1) {
  c.problem.alpha = alpha;
  for (EpilogueStep& step : c.problem.epilogue) {
    if (step.kind == Kind::Residual) step.value = beta;
    if (step.kind == Kind::Activation) {
      step.p0 = p0;
      step.p1 = p1;
    }
  }
  return c;
}

GemmCase with_adversarial_scalars(GemmCase c) {
  // Leaky slope 0.2 (default 0.01); clamp bounds (-0.6, 0.4) instead of (-1, 1).
  double p0 = 0.0, p1 = 0.0;
  for (const EpilogueStep& step : c.problem.epilogue) {
    if (step.kind != Kind::Activation) continue;
    if (step.activation == Activation::LeakyReLU) p0 = 0.2;
    if (step.activation == Activation::HardTanh) { p0 = -0.6; p1 = 0.4; }
  }
  return with_scalars(std::move(c), -1.25, 0.5, p0, p1);
}

AbiScalars abi_scalars(const GemmProblem& problem) {
  AbiScalars s;
  s.alpha = static_cast<float>(problem.alpha);
  for (const EpilogueStep& step : problem.epilogue) {
    if (step.kind == Kind::Residual) s.beta = static_cast<float>(step.value);
    if (step.kind == Kind::Activation) {
      s.act_p0 = static_cast<float>(step.p0);
      s.act_p1 = static_cast<float>(step.p1);
    }
  }
  return s;
}

const EpilogueStep* c_operand_step(const GemmProblem& problem) {
  for (const EpilogueStep& step : problem.epilogue) {
    if (step.kind == Kind::Residual || step.kind == Kind::Multiply) return &step;
  }
  return nullptr;
}

const EpilogueStep* bias_step(const GemmProblem& problem) {
  for (const EpilogueStep& step : problem.epilogue) {
    if (step.kind == Kind::Bias) return &step;
  }
  return nullptr;
}

GemmProblem with_epilogue_prefix(GemmProblem problem, size_t steps) {
  if (steps < problem.epilogue.size()) problem.epilogue.resize(steps);
  return problem;
}

DType parse_dtype_token(std::string_view text) {
  if (text == "fp32" || text == "f32") return DType::Float32;
  if (text == "bf16") return DType::BFloat16;
  if (text == "fp16" || text == "f16") return DType::Float16;
  const DType t = graph::parse_dtype(text);
  if (!is_output_dtype(t)) {
    throw std::invalid_argument("unsupported dtype '" + std::string(text) +
                                "' (fp32, bf16, fp16, or float32, bfloat16, float16)");
  }
  return t;
}

std::vector<realize::EpilogueOpSpec> parse_epilogue_tokens(std::string_view text) {
  std::vector<realize::EpilogueOpSpec> ops;
  if (trim(text).empty()) return ops;
  for (std::string_view token : split(text, ',')) {
    realize::EpilogueOpSpec op;
    bool found = false;
    for (Kind kind : {Kind::Scale, Kind::Bias, Kind::Residual, Kind::Multiply}) {
      if (discover::epilogue_kind_name(kind) == token) {
        op.kind = kind;
        found = true;
      }
    }
    if (token == "multiply") {
      op.kind = Kind::Multiply;
      found = true;
    }
    if (!found) {
      if (const std::optional<Activation> act = discover::parse_activation(token)) {
        op.kind = Kind::Activation;
        op.activation = *act;
        found = true;
      }
    }
    if (!found) {
      throw std::invalid_argument("unknown epilogue step '" + std::string(token) +
                                  "' (scale, bias, residual, mul or an activation name)");
    }
    ops.push_back(op);
  }
  return ops;
}

std::pair<Layout, Layout> parse_layout_tokens(std::string_view text) {
  auto one = [&](char c) {
    for (Layout l : {Layout::RowMajor, Layout::ColumnMajor}) {
      if (discover::layout_token(l) == c) return l;
    }
    throw std::invalid_argument("unknown layout '" + std::string(text) +
                                "' (two letters for A and B: t = row-major, n = column-major)");
  };
  if (text.size() != 2) one('?');
  return {one(text[0]), one(text[1])};
}

realize::KernelSpec baseline_spec(DType dtype, std::optional<DType> output,
                                  const std::vector<realize::EpilogueOpSpec>& epilogue,
                                  std::pair<Layout, Layout> layouts, PrecisionMode precision,
                                  bool batched) {
  realize::KernelSpec spec;
  spec.pattern = "baseline";
  spec.a_dtype = spec.b_dtype = dtype;
  spec.d_dtype = output.value_or(dtype);
  spec.accumulate = DType::Float32;
  spec.a_layout = layouts.first;
  spec.b_layout = layouts.second;
  spec.d_layout = Layout::RowMajor;
  spec.batched = batched;
  spec.epilogue = epilogue;
  if (dtype == DType::Float32) {
    spec.math = precision == PrecisionMode::Tf32 ? realize::MathMode::Tf32 : realize::MathMode::Simt;
  } else {
    spec.math = realize::MathMode::Native;
  }
  return spec;
}

}  // namespace fact::runtime
