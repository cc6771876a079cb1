#include "fact/core/precision.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace fact::core {

namespace {

constexpr std::array<PrecisionInfo, 3> kPrecisions{{
    {PrecisionMode::Strict, "strict", kStrictTolerance, kThreeTf32},
    {PrecisionMode::Tf32, "tf32", kTf32Tolerance, "tf32"},
    {PrecisionMode::Native, "native", kNativeTolerance, "native"},
}};

double output_tolerance(DType output) {
  return (output == DType::BFloat16 || output == DType::Float16) ? kHalfOutputTolerance : 0.0;
}

}  // namespace

std::span<const PrecisionInfo> precision_table() { return kPrecisions; }

const PrecisionInfo& precision_info(PrecisionMode mode) {
  for (const auto& entry : kPrecisions) {
    if (entry.mode == mode) return entry;
  }
  return kPrecisions.front();
}

std::string_view precision_name(PrecisionMode mode) { return precision_info(mode).name; }

std::optional<PrecisionMode> find_precision(std::string_view text) {
  for (const auto& entry : kPrecisions) {
    if (entry.name == text) return entry.mode;
  }
  return std::nullopt;
}

PrecisionMode parse_precision(std::string_view text) {
  if (auto mode = find_precision(text)) return *mode;
  std::string accepted;
  for (const auto& entry : kPrecisions) {
    accepted += (accepted.empty() ? "" : entry.mode == kPrecisions.back().mode ? " or " : ", ");
    accepted += entry.name;
  }
  throw std::invalid_argument("unknown precision mode '" + std::string(text) + "' (expected " + accepted + ")");
}

void to_json(nlohmann::json& j, PrecisionMode mode) { j = std::string(precision_name(mode)); }

void from_json(const nlohmann::json& j, PrecisionMode& mode) { mode = parse_precision(j.get<std::string>()); }

PrecisionMode default_precision(DType dtype) {
  return (dtype == DType::BFloat16 || dtype == DType::Float16) ? PrecisionMode::Native : PrecisionMode::Strict;
}

bool is_three_tf32(std::string_view math) { return math == kThreeTf32 || math == "tf32x3"; }

double tolerance_for(PrecisionMode mode, DType output) {
  return std::max(precision_info(mode).tolerance, output_tolerance(output));
}

}  // namespace fact::core
