#include "fact/runtime/precision.hpp"

#include <algorithm>
#include <stdexcept>

namespace fact::runtime {

using graph::DType;
using realize::MathMode;

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

static bool is_half(DType t) { return t == DType::BFloat16 || t == DType::Float16; }

static std::string math_name(MathMode math) {
  switch (math) {
    case MathMode::Native: return "native";
    case MathMode::Tf32: return "tf32";
    case MathMode::Tf32x3: return "3xtf32";
    case MathMode::Simt: return "simt";
  }
  return "unknown";
}

std::optional<std::string> precision_mismatch(const realize::KernelSpec& spec,
                                              PrecisionMode mode) {
  const std::string mode_text(precision_name(mode));
  if (spec.accumulate != DType::Float32 && spec.accumulate != DType::Float64) {
    return "kernel accumulates in " + std::string(graph::dtype_name(spec.accumulate)) +
           "; every precision mode requires float32 accumulation";
  }
  const bool fp32_operands = spec.a_dtype == DType::Float32 && spec.b_dtype == DType::Float32;
  switch (mode) {
    case PrecisionMode::Strict:
    case PrecisionMode::Tf32: {
      if (!fp32_operands) {
        return "precision '" + mode_text + "' needs float32 operands, kernel reads " +
               std::string(graph::dtype_name(spec.a_dtype)) + "/" +
               std::string(graph::dtype_name(spec.b_dtype)) + " (use --precision native)";
      }
      const bool accurate = spec.math == MathMode::Tf32x3 || spec.math == MathMode::Simt;
      const bool allowed = accurate || (mode == PrecisionMode::Tf32 && spec.math == MathMode::Tf32);
      if (!allowed) {
        return "precision '" + mode_text + "' does not allow math '" + math_name(spec.math) +
               "' for float32 operands";
      }
      return std::nullopt;
    }
    case PrecisionMode::Native: {
      if (!is_half(spec.a_dtype) || !is_half(spec.b_dtype)) {
        return "precision 'native' is for bf16/fp16 operands, kernel reads " +
               std::string(graph::dtype_name(spec.a_dtype)) + "/" +
               std::string(graph::dtype_name(spec.b_dtype)) + " (use --precision strict or tf32)";
      }
      if (spec.math != MathMode::Native) {
        return "precision 'native' expects math 'native' for bf16/fp16 operands, kernel uses '" +
               math_name(spec.math) + "'";
      }
      return std::nullopt;
    }
  }
  return "unknown precision mode";
}

}  // namespace fact::runtime
