// The aten spellings of the GEMM epilogue's activations, registered with the engine's
// elementwise canonicalization (fact.activation): every row of the op table
// (patterns/gemm/epilogue/ops.def) that names aten targets. Adding an activation row there is
// all it takes for discovery to find it after a GEMM.
#include <string>
#include <string_view>
#include <vector>

#include "fact/discover/canonicalize.hpp"

namespace fact::gemm {
namespace {

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(' ', at), text.size());
    if (end > at) out.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

struct ActivationSpellingsRegistrar {
  ActivationSpellingsRegistrar() {
#define FACT_GEMM_ACTIVATION(C_NAME, CPP, ID, NAME, F16, F32, FORMULA, ATEN, ATEN_DEFAULTS, ...) \
  if (!std::string_view(ATEN).empty())                                                          \
    discover::register_activation_spelling({NAME, words(ATEN), ATEN_DEFAULTS});
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_ACTIVATION
  }
};
const ActivationSpellingsRegistrar kActivationSpellings;

}  // namespace
}  // namespace fact::gemm
