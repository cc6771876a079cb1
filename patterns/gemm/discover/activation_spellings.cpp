// The aten spellings of the GEMM epilogue's activations, registered with the engine's
// elementwise canonicalization (fact.activation): every activation of the op table
// (patterns/gemm/epilogue/ops.def, read through op_table.hpp) that names aten targets. Adding
// an activation row there is all it takes for discovery to find it after a GEMM.
#include "fact/discover/canonicalize.hpp"
#include "fact/util/words.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"

namespace fact::gemm {
namespace {

struct ActivationSpellingsRegistrar {
  ActivationSpellingsRegistrar() {
    for (const ActivationOp& op : kActivationOps) {
      if (op.aten_targets.empty()) continue;
      discover::register_activation_spelling(
          {std::string(op.name), util::split_words(op.aten_targets), std::string(op.aten_defaults)});
    }
  }
};
const ActivationSpellingsRegistrar kActivationSpellings;

}  // namespace
}  // namespace fact::gemm
