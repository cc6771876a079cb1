// Precision modes of a run (docs/architecture.md, "Precision contract") and the tolerance
// each one implies: the one place these numbers live. Implemented in src/problem/precision.cpp
// (no CUDA needed); problem kinds use it for their tolerance, which the plan carries to Python.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "fact/graph/tensor_desc.hpp"

namespace fact::runtime {

enum class PrecisionMode {
  Strict,  // float32 operands, float32-accurate math (3xTF32 or FFMA)
  Tf32,    // float32 operands, one TF32 product allowed (PyTorch's allow_tf32)
  Native,  // bf16/fp16 operands with float32 accumulation
};

// "strict", "tf32", "native".
std::string_view precision_name(PrecisionMode mode);
// Inverse of precision_name; throws std::invalid_argument naming the accepted spellings.
PrecisionMode parse_precision(std::string_view text);

// Relative-error bounds ‖out − ref‖₂ / ‖ref‖₂ against the float64 reference (docs/runtime.md
// explains each number). The bound of a run is max(mode bound, output-dtype bound).
inline constexpr double kStrictTolerance = 1e-5;        // float32-accurate
inline constexpr double kTf32Tolerance = 5e-3;          // ~10x the TF32 rounding of K products
inline constexpr double kNativeTolerance = 1e-4;        // bf16/fp16 operands, float32 output
inline constexpr double kHalfOutputTolerance = 2e-2;    // bf16/fp16 output rounding, ~10x
// In strict mode the report also compares the kernel's error with cuBLAS SGEMM's on the same
// inputs; within this factor it is "as accurate as the framework's float32 path".
inline constexpr double kSgemmErrorRatioLimit = 20.0;

// The tolerance of a run in `mode` whose output has dtype `output`.
double tolerance_for(PrecisionMode mode, graph::DType output);

}  // namespace fact::runtime
