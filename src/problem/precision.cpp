#include "fact/runtime/precision.hpp"

#include <algorithm>
#include <stdexcept>

namespace fact::runtime {

using graph::DType;

std::string_view precision_name(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::Strict: return "strict";
    case PrecisionMode::Tf32: return "tf32";
    case PrecisionMode::Native: return "native";
  }
  return "unknown";
}

PrecisionMode parse_precision(std::string_view text) {
  for (PrecisionMode mode : {PrecisionMode::Strict, PrecisionMode::Tf32, PrecisionMode::Native}) {
    if (precision_name(mode) == text) return mode;
  }
  throw std::invalid_argument("unknown precision mode '" + std::string(text) +
                              "' (expected strict, tf32 or native)");
}

static double mode_tolerance(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::Strict: return kStrictTolerance;
    case PrecisionMode::Tf32: return kTf32Tolerance;
    case PrecisionMode::Native: return kNativeTolerance;
  }
  return kStrictTolerance;
}

static double output_tolerance(DType output) {
  return (output == DType::BFloat16 || output == DType::Float16) ? kHalfOutputTolerance : 0.0;
}

double tolerance_for(PrecisionMode mode, DType output) {
  return std::max(mode_tolerance(mode), output_tolerance(output));
}

}  // namespace fact::runtime
