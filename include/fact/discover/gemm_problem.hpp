// The canonical GEMM description shared by discovery (what was found) and realization (what
// to build): D[l] = epilogue(alpha * A[l] · B[l]), with A: M×K, B: K×N, D: M×N, l < batch.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fact/graph/graph.hpp"

namespace fact::discover {

using graph::DType;

// Memory order of a 2-D operand. For A (M×K) RowMajor means K is contiguous; for B (K×N)
// ColumnMajor means K is contiguous (an nn.Linear weight [N, K] read as B is ColumnMajor).
enum class Layout { RowMajor, ColumnMajor };
std::string_view layout_name(Layout l);      // "row" / "col"
char layout_token(Layout l);                  // 't' (row-major, "transposed" in BLAS terms) / 'n'

struct GemmOperand {
  graph::ValueId value;   // tensor in the graph (empty when synthesized)
  DType dtype = DType::Unknown;
  Layout layout = Layout::RowMajor;
  int64_t ld = 0;            // leading dimension in elements
  int64_t batch_stride = 0;  // elements between batches; 0 = broadcast over the batch
};

enum class Activation { Identity, ReLU, GeluErf, GeluTanh, SiLU, Sigmoid, LeakyReLU, HardTanh };
std::string_view activation_name(Activation a);  // "relu", "gelu_erf", "gelu_tanh", ...
// Inverse of activation_name; nullopt for an unknown name.
std::optional<Activation> parse_activation(std::string_view name);

// One step of the fused epilogue, applied in order to the accumulator.
struct EpilogueStep {
  enum class Kind {
    Scale,       // x *= value                      (alpha folded in when first)
    Bias,        // x += bias[n]                     (operand: length-N vector)
    Activation,  // x = act(x; p0, p1)              (leaky slope / clamp bounds)
    Residual,    // x += beta * C[m, n]             (operand: M×N tensor)
    Multiply,    // x *= C[m, n]                     (operand: M×N tensor; SwiGLU up-projection)
  };
  Kind kind = Kind::Scale;
  Activation activation = Activation::Identity;
  double value = 1.0;  // Scale factor, or beta for Residual
  double p0 = 0.0, p1 = 0.0;
  graph::ValueId operand;  // Bias / Residual / Multiply
  DType operand_dtype = DType::Unknown;
};
std::string_view epilogue_kind_name(EpilogueStep::Kind k);

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  GemmOperand a, b;
  GemmOperand d;                 // output (RowMajor M×N)
  DType accumulate = DType::Float32;
  double alpha = 1.0;
  std::vector<EpilogueStep> epilogue;

  double flops() const { return 2.0 * double(m) * double(n) * double(k) * double(batch); }
  // Bytes that must cross device memory once: A, B, D and every epilogue operand.
  double min_bytes() const;
  // "gemm_bias_gelu_tanh": "gemm" or "bgemm" followed by the epilogue step names.
  std::string fusion_name() const;
  // "65536x3072x768" or "128x(512x2048x1024)"
  std::string shape_string() const;
};

// JSON form of a problem (what `fact discover --json` writes for each kernel of a match):
// {"m","n","k","batch","alpha","accumulate","fusion","a":{operand},"b":..,"d":..,
//  "epilogue":[{"kind","activation","value","p0","p1","operand","operand_dtype"}]}, operand =
// {"value","dtype","layout":"row"|"col","ld","batch_stride"}. Non-finite numbers (clamp
// bounds) are written as the strings "inf" / "-inf" / "nan". from_json throws
// std::invalid_argument naming the field when one is missing or malformed.
nlohmann::json gemm_problem_to_json(const GemmProblem& p);
GemmProblem gemm_problem_from_json(const nlohmann::json& j);

}  // namespace fact::discover
