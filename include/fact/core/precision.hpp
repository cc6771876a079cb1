// Precision modes of a run (docs/architecture.md, "Precision contract") and the verification tolerance
// each implies: the one table of their names and numbers. A mode is parsed once where it enters
// (command line, C API request, Python through fact_engine_tables) and travels as PrecisionMode
// through discovery, the tuner, the tuning database and verification; its name is written back
// only into files (plans, reports, tuning-database keys), spelled as precision_name says.
#pragma once
#include <array>
#include <optional>
#include <span>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "fact/core/dtype.hpp"

namespace fact::core {

enum class PrecisionMode {
  Strict,  // float32 operands, float32-accurate math (3xTF32 or FFMA)
  Tf32,    // float32 operands, one TF32 product allowed (PyTorch's allow_tf32)
  Native,  // bf16/fp16 operands with float32 accumulation
};

struct PrecisionInfo {
  PrecisionMode mode;
  std::string_view name;           // "strict", "tf32", "native": the spelling in every file
  double tolerance;                // the mode's relative-error bound (docs/runtime.md)
  std::string_view float32_math;   // how float32 operands multiply: "3xtf32", "tf32", "native"
};

// Every mode, in the order above.
std::span<const PrecisionInfo> precision_table();
const PrecisionInfo& precision_info(PrecisionMode mode);

// "strict", "tf32", "native".
std::string_view precision_name(PrecisionMode mode);
// Inverse of precision_name; throws std::invalid_argument naming the accepted spellings.
PrecisionMode parse_precision(std::string_view text);
// Inverse of precision_name; nullopt for an empty or unknown name.
std::optional<PrecisionMode> find_precision(std::string_view text);
// JSON spells a mode by its name ("strict"); reading another name throws std::invalid_argument.
// (Found by argument-dependent lookup: `json j = mode;`, `j.get<PrecisionMode>()`.)
void to_json(nlohmann::json& j, PrecisionMode mode);
void from_json(const nlohmann::json& j, PrecisionMode& mode);
// The mode a model runs in unless the user says otherwise: Native when its floating tensors are
// bf16/fp16, Strict for float32 (and anything else).
PrecisionMode default_precision(DType dtype);

// The one spelling of split-operand 3xTF32 math (kernel names, specs, match reports). Files
// written before it was settled say "tf32x3"; is_three_tf32 accepts both.
inline constexpr std::string_view kThreeTf32 = "3xtf32";
bool is_three_tf32(std::string_view math);

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
double tolerance_for(PrecisionMode mode, DType output);

}  // namespace fact::core
