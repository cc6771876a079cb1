// The GEMM kind's problem: D[o, l] = epilogue(alpha · A[o, l] · B[o, l]), A: M×K, B: K×N,
// D: M×N, l < batch (the kernel's batch mode), o < outer_batch (a second batch mode: the batch
// dims of a 4-D matmul whose operands need two strides, gemm_abi.h). Discovery builds it (chain.hpp), realization turns it into kernels
// (realize/spec_from_problem.hpp), kind.cpp tells the engine's stages about it, and the ABI
// struct it becomes is gemm_abi.h. Its step kinds and activations have one declaration,
// patterns/gemm/epilogue/ops.def (op_table.hpp reads it).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/graph/graph.hpp"
#include "fact/problem/problem.hpp"

namespace fact::gemm {

using graph::DType;

inline constexpr const char* kKindName = "gemm";

// Memory order of a 2-D operand. For A (M×K) RowMajor means K is contiguous; for B (K×N)
// ColumnMajor means K is contiguous (an nn.Linear weight [N, K] read as B is ColumnMajor).
enum class Layout { RowMajor, ColumnMajor };
std::string_view layout_name(Layout l);      // "row" / "col"
char layout_token(Layout l);                  // 't' (row-major, "transposed" in BLAS terms) / 'n'

struct GemmOperand {
  graph::ValueId value;      // tensor in the graph (empty when synthesized)
  DType dtype = DType::Unknown;
  Layout layout = Layout::RowMajor;
  int64_t ld = 0;            // leading dimension in elements
  int64_t batch_stride = 0;  // elements between batches; 0 = broadcast over the batch
  int64_t offset = 0;        // elements from the value's first element to the operand's
  int64_t outer_batch_stride = 0;  // elements between outer batches (the second batch mode)
  // A or B: the value already holds zeros up to the extents the kernel runs (a weight the plan
  // padded once: kind/padding.hpp), so the kernel reads it in place (FactGemmArgs::padded).
  // D: its rows hold the padded extent (ld = N rounded up to 16 bytes, the result allocated as
  // [.., M, ld] and handed on as its [..., :N] view: discover/checks.cpp, pad_result_rows), so
  // the kernel writes D in place at the padded N (FACT_GEMM_PADDED_D).
  bool padded = false;
};

// Activations and step kinds: one entry each in patterns/gemm/epilogue/ops.def, declared in its
// order (the ordinals enter reference cache keys: entries are only appended).
enum class Activation {
#define FACT_GEMM_ACTIVATION(C_NAME, CPP, ...) CPP,
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_ACTIVATION
};
std::string_view activation_name(Activation a);  // "relu", "gelu_erf", "gelu_tanh", ...
// Inverse of activation_name; nullopt for an unknown name.
std::optional<Activation> parse_activation(std::string_view name);

// One step of the fused epilogue, applied in order to the accumulator (gemm_abi.h's
// FactGemmStep; docs/abi.md).
struct EpilogueStep {
  // What each kind computes: gemm_abi.h's FactGemmStepKind and ops.def.
  enum class Kind {
#define FACT_GEMM_STEP(C_NAME, CPP, ...) CPP,
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_STEP
  };
  Kind kind = Kind::Scale;
  Activation activation = Activation::Identity;
  double value = 1.0;  // Scale factor, AddScalar addend, beta for Residual, multiplier for Bias
  double p0 = 0.0, p1 = 0.0;
  graph::ValueId operand;  // a step's operand (ops.def's OPERAND column is not NONE)
  DType operand_dtype = DType::Unknown;
  int64_t operand_ld = 0;            // MATRIX: leading dimension (row-major); TABLES: per position
  int64_t operand_batch_stride = 0;  // vectors and MATRIX: elements between batches
  int64_t operand_outer_batch_stride = 0;  // the same between outer batches
  // TABLES steps only (gemm_abi.h's FactGemmStep fields of the same names): the second table
  // (one dtype with `operand`, operand_ld = elements between positions), rows of M per sequence
  // (position = m % period), elements between the tables of consecutive sequences (0: one table
  // for all), columns per group (head), and the pairing.
  graph::ValueId operand2;
  int64_t period = 0;
  int64_t period_stride = 0;
  int64_t group = 0;
  bool interleaved = false;
};
std::string_view epilogue_kind_name(EpilogueStep::Kind k);  // "scale", "add", "bias", ...
std::optional<EpilogueStep::Kind> parse_epilogue_kind(std::string_view name);
bool reads_operand(EpilogueStep::Kind k);  // ops.def's OPERAND column is not NONE

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t outer_batch = 1;       // the second batch mode (1: none)
  GemmOperand a, b;
  GemmOperand d;                 // output (RowMajor M×N)
  DType accumulate = DType::Float32;
  double alpha = 1.0;
  std::vector<EpilogueStep> epilogue;

  // True when the last epilogue step pairs two product columns into one column of D (ops.def's
  // STORES_D 2): D has n/2 columns.
  bool gated() const;
  // Columns of D: n, or n/2 for a gated problem.
  int64_t d_cols() const { return gated() ? n / 2 : n; }
  // Every batch of both modes: batch · outer_batch.
  int64_t batches() const { return batch * outer_batch; }
  double flops() const { return 2.0 * double(m) * double(n) * double(k) * double(batches()); }
  // Bytes that must cross device memory once: A, B, D and every epilogue operand.
  double min_bytes() const;
  // "gemm_bias_gelu_tanh": "gemm" or "bgemm" followed by the epilogue step names.
  std::string fusion_name() const;
  // "65536x3072x768", "128x(512x2048x1024)", or with two batch modes "2x8x(128x128x64)"
  // (outer_batch x batch x (M x N x K)).
  std::string shape_string() const;
};

// The epilogue as a kernel runs it: leading Scale steps folded into alpha, identity
// activations dropped. The kernel's spec (its compiled step kinds) and the call's argument
// image (its constants) are both made from this, so they cannot disagree.
struct KernelEpilogue {
  double alpha = 1.0;
  std::vector<EpilogueStep> steps;
};
KernelEpilogue kernel_epilogue(const GemmProblem& p);

// JSON form of a problem (the "problems" entries of `fact discover --json`, the plan's
// "problem"): {"m","n","k","batch","alpha","accumulate","fusion","shape","a":{operand},"b":..,
// "d":.., "epilogue":[{"kind","activation","value","p0","p1","operand","operand_dtype",
// "operand_ld","operand_batch_stride"}]} (a TABLES step also "operand2", "period",
// "period_stride", "group", "interleaved"), operand = {"value","dtype","layout":"row"|"col","ld",
// "batch_stride","offset"} ("padded": true for an operand the plan padded), and "padding" (e.g.
// "K padded 770→776": kind/padding.hpp) when the call runs padded. With two batch modes (outer_batch > 1) also "outer_batch", each
// operand's "outer_batch_stride" and each operand step's "operand_outer_batch_stride" (absent:
// 1 and 0). Non-finite numbers (clamp bounds) are written as the strings "inf" /
// "-inf" / "nan". from_json throws std::invalid_argument naming the field when one is missing
// or malformed.
nlohmann::json gemm_problem_to_json(const GemmProblem& p);
GemmProblem gemm_problem_from_json(const nlohmann::json& j);

// The engine's kind-tagged form and back (throws std::invalid_argument for another kind).
Problem to_problem(const GemmProblem& p);
GemmProblem gemm_problem_of(const Problem& problem);

}  // namespace fact::gemm
