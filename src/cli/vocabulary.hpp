// The words command-line options accept for precision modes and dtypes, taken from the engine's
// tables (fact/core/precision.hpp, fact/core/dtype.hpp) so no command lists them itself.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "fact/core/dtype.hpp"
#include "fact/core/precision.hpp"

namespace fact::cli {

// "strict", "tf32", "native".
inline std::vector<std::string> precision_words() {
  std::vector<std::string> words;
  for (const auto& mode : core::precision_table()) words.emplace_back(mode.name);
  return words;
}

// A --precision value, parsed where it enters: nullopt when not given (""), the engine then picks
// the mode from the model's dtypes. The option's check (precision_words) rejects other names.
inline std::optional<core::PrecisionMode> precision_option(const std::string& text) {
  if (text.empty()) return std::nullopt;
  return core::parse_precision(text);
}

// Every spelling of the floating dtypes a model runs in (bfloat16, float16, float32): names,
// labels and aliases ("bf16", "fp16", "f16", "half", "fp32", "f32", "float", ...).
inline std::vector<std::string> model_dtype_words() {
  std::vector<std::string> words;
  for (const auto& entry : core::dtype_table()) {
    if (entry.dtype != core::DType::BFloat16 && entry.dtype != core::DType::Float16 &&
        entry.dtype != core::DType::Float32) {
      continue;
    }
    words.emplace_back(entry.name);
    words.emplace_back(entry.label);
    for (std::string_view alias : entry.aliases) {
      if (!alias.empty()) words.emplace_back(alias);
    }
  }
  return words;
}

}  // namespace fact::cli
