// Canonicalization: captured ATen ops rewritten into a few canonical "fact." nodes, so that
// rules match one form. Every canonical node keeps in `origin` the ids of
// the captured nodes it replaces; nodes no pass touches stay as captured (empty origin).
//
// The engine's canonical nodes are elementwise (args are tensors; parameters in attrs); pattern
// folders add their own (fact.gemm, fact.attention, ...), documented in their
// discover/canonicalize.hpp:
//   fact.gelu_tanh  from aten.gelu(approximate='tanh') and 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))
//                   in any spelling (pow or x*x*x, the 0.5 first or last, constants to 1e-6
//                   relative); args [x].
//   fact.gelu_erf   from aten.gelu and 0.5*x*(1+erf(x/sqrt(2))); args [x].
//   fact.activation from leaky_relu, hardtanh, relu6, clamp, clamp_min, x*sigmoid(x) (silu) and
//                   every aten op a pattern folder registered as an activation spelling (below:
//                   relu, silu, sigmoid, tanh, softplus, ...); args [x];
//                   attrs {kind: the activation's name, p0, p1 (leaky slope; hardtanh/clamp
//                   bounds, ±inf if absent)}.
//   fact.scale      from mul / div of a tensor by a scalar; args [x]; attrs {value} (the factor).
//   fact.add_scalar from add / sub of a scalar (x + c, c + x, x - c, with alpha); args [x];
//                   attrs {value} (what is added).
#pragma once
#include <string>
#include <vector>

#include "fact/graph/graph.hpp"

namespace fact::discover {

// A canonicalization pass: rewrites `g` in place. Passes run in increasing `order`; pattern
// folders register theirs (patterns/gemm: fact.gemm at 100; patterns/attention:
// fact.attention at 500), the elementwise passes below are the engine's own (200-400).
struct CanonicalPass {
  std::string name;
  int order = 0;
  void (*run)(graph::Graph& g) = nullptr;
};
// Throws std::logic_error when a pass of that name is already registered.
void register_canonical_pass(CanonicalPass pass);
std::vector<CanonicalPass> canonical_passes();  // by order, then name

struct CanonicalPassRegistrar {
  explicit CanonicalPassRegistrar(CanonicalPass pass) { register_canonical_pass(std::move(pass)); }
};

// An activation that aten ops spell without parameters, registered by the pattern folder that
// owns the activation (patterns/gemm/discover registers every row of its epilogue op table):
// the activation's name (fact.activation's `kind`), the aten targets that spell it, and the
// constants the op's further arguments must have when given, as "name=value" words in argument
// order from the second (e.g. "beta=1 threshold=20"; empty: none).
struct ActivationSpelling {
  std::string name;
  std::vector<std::string> targets;
  std::string defaults;
};
// Throws std::logic_error when a target is already registered for another activation.
void register_activation_spelling(ActivationSpelling spelling);
std::vector<ActivationSpelling> activation_spellings();  // in registration order

// Every registered pass in order. Never throws for unknown ops (they stay as they are).
graph::Graph canonicalize(const graph::Graph& captured);

// The engine's elementwise passes (exposed for tests).
void canonicalize_gelu(graph::Graph& g);
void canonicalize_activations(graph::Graph& g);
void canonicalize_scales(graph::Graph& g);
void canonicalize_scalar_adds(graph::Graph& g);

}  // namespace fact::discover
