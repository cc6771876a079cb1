#include "fact/discover/gemm_problem.hpp"

#include <array>
#include <sstream>
#include <utility>

namespace fact::discover {

namespace {

constexpr std::array<std::pair<Activation, std::string_view>, 8> kActivationNames{{
    {Activation::Identity, "identity"},
    {Activation::ReLU, "relu"},
    {Activation::GeluErf, "gelu_erf"},
    {Activation::GeluTanh, "gelu_tanh"},
    {Activation::SiLU, "silu"},
    {Activation::Sigmoid, "sigmoid"},
    {Activation::LeakyReLU, "leaky_relu"},
    {Activation::HardTanh, "hardtanh"},
}};

constexpr std::array<std::pair<EpilogueStep::Kind, std::string_view>, 5> kEpilogueKindNames{{
    {EpilogueStep::Kind::Scale, "scale"},
    {EpilogueStep::Kind::Bias, "bias"},
    {EpilogueStep::Kind::Activation, "activation"},
    {EpilogueStep::Kind::Residual, "residual"},
    {EpilogueStep::Kind::Multiply, "mul"},
}};

double operand_bytes(const GemmOperand& operand, int64_t rows, int64_t cols, int64_t batch) {
  const int64_t copies = operand.batch_stride == 0 ? 1 : batch;
  return double(rows) * double(cols) * double(copies) * graph::dtype_bytes(operand.dtype);
}

}  // namespace

std::string_view layout_name(Layout l) { return l == Layout::RowMajor ? "row" : "col"; }
char layout_token(Layout l) { return l == Layout::RowMajor ? 't' : 'n'; }

std::string_view activation_name(Activation a) {
  for (const auto& [activation, name] : kActivationNames) {
    if (activation == a) return name;
  }
  return "unknown";
}

std::optional<Activation> parse_activation(std::string_view name) {
  for (const auto& [activation, entry] : kActivationNames) {
    if (entry == name) return activation;
  }
  return std::nullopt;
}

std::string_view epilogue_kind_name(EpilogueStep::Kind k) {
  for (const auto& [kind, name] : kEpilogueKindNames) {
    if (kind == k) return name;
  }
  return "unknown";
}

double GemmProblem::min_bytes() const {
  double bytes = operand_bytes(a, m, k, batch) + operand_bytes(b, k, n, batch) +
                 operand_bytes(d, m, n, batch);
  for (const auto& step : epilogue) {
    const int bytes_per = graph::dtype_bytes(step.operand_dtype);
    if (step.kind == EpilogueStep::Kind::Bias) bytes += double(n) * bytes_per;
    if (step.kind == EpilogueStep::Kind::Residual || step.kind == EpilogueStep::Kind::Multiply)
      bytes += double(m) * double(n) * double(batch) * bytes_per;
  }
  return bytes;
}

std::string GemmProblem::fusion_name() const {
  std::string name = batch > 1 ? "bgemm" : "gemm";
  for (const auto& step : epilogue) {
    name += '_';
    name += step.kind == EpilogueStep::Kind::Activation ? activation_name(step.activation)
                                                         : epilogue_kind_name(step.kind);
  }
  return name;
}

std::string GemmProblem::shape_string() const {
  std::ostringstream out;
  if (batch > 1) out << batch << "x(";
  out << m << 'x' << n << 'x' << k;
  if (batch > 1) out << ')';
  return out.str();
}

}  // namespace fact::discover
