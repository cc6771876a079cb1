// fact.gelu_tanh / fact.gelu_erf / fact.activation / fact.scale (see canonicalize.hpp).
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <string_view>
#include <vector>
#include <algorithm>

#include "fact/discover/canonicalize.hpp"
#include "fact/discover/rule.hpp"
#include "fact/discover/graph_rewrite.hpp"
#include "fact/util/words.hpp"
#include "src/discover/polynomial.hpp"

namespace fact::discover {

namespace {

using detail::Monomial;
using detail::Polynomial;
using graph::Arg;
using graph::Graph;
using graph::Node;
using graph::ValueId;
using nlohmann::json;

constexpr double kConstantTolerance = 1e-6;
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
const double kInvSqrt2 = 1.0 / std::sqrt(2.0);
constexpr double kGeluCubic = 0.044715;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<graph::NodeId> ids_of(const Graph& g, const std::vector<std::string>& targets) {
  std::vector<graph::NodeId> ids;
  for (const auto& node : g.nodes()) {
    if (target_in(node, targets)) ids.push_back(node.id);
  }
  return ids;
}

Node unary_node(std::string id, std::string target, const ValueId& x, const ValueId& out,
                json attrs = json::object()) {
  Node node;
  node.id = std::move(id);
  node.target = std::move(target);
  node.args = {Arg::of_tensor(x)};
  node.outputs = {out};
  node.attrs = std::move(attrs);
  return node;
}

bool is_floating_tensor(const Graph& g, const ValueId& id) {
  return g.has_value(id) && graph::is_floating(g.value(id).desc.dtype) &&
         g.value(id).desc.rank() >= 1;
}

// One decomposed GELU: `curve` is the tanh or erf node. Returns true when rewritten.
bool rewrite_gelu_formula(Graph& g, const Node& curve, bool is_tanh) {
  const auto inputs = tensor_args(curve);
  if (inputs.size() != 1 || curve.outputs.size() != 1) return false;
  const ValueId curve_out = curve.outputs.front();
  if (!single_use(g, inputs.front()) || !single_use(g, curve_out)) return false;

  // Inside the curve: c1*x + c3*x^3 (tanh) or x/sqrt(2) (erf), in exactly one atom x.
  auto inner = detail::expand_polynomial(g, inputs.front());
  if (!inner || inner->atoms.size() != 1) return false;
  const ValueId x = *inner->atoms.begin();
  if (!is_floating_tensor(g, x)) return false;
  Polynomial expected_inner;
  if (is_tanh) {
    expected_inner[Monomial{{x, 1}}] = kSqrt2OverPi;
    expected_inner[Monomial{{x, 3}}] = kSqrt2OverPi * kGeluCubic;
  } else {
    expected_inner[Monomial{{x, 1}}] = kInvSqrt2;
  }
  if (!detail::polynomials_match(inner->poly, expected_inner, kConstantTolerance)) return false;

  // Outside: 0.5*x + 0.5*x*curve, at the first root up the single-reader chain.
  Polynomial expected_outer;
  expected_outer[Monomial{{x, 1}}] = 0.5;
  expected_outer[Monomial{{x, 1}, {curve_out, 1}}] = 0.5;
  ValueId walk = curve_out;
  for (int step = 0; step < 6 && single_use(g, walk); ++step) {
    const Node* reader = g.consumers(walk).front();
    if (!detail::is_arithmetic(*reader) || reader->outputs.size() != 1) return false;
    const ValueId root = reader->outputs.front();
    auto outer = detail::expand_polynomial(g, root, {x, curve_out});
    if (outer && detail::polynomials_match(outer->poly, expected_outer, kConstantTolerance)) {
      std::vector<graph::NodeId> region = outer->nodes;
      region.push_back(curve.id);
      region.insert(region.end(), inner->nodes.begin(), inner->nodes.end());
      const std::string kind = is_tanh ? "gelu_tanh" : "gelu_erf";
      detail::replace_region(g, region,
                             unary_node(detail::fresh_node_id(g, kind), "fact." + kind, x, root));
      return true;
    }
    walk = root;
  }
  return false;
}

std::optional<double> number_argument(const Node& node, size_t index, const char* name) {
  const Arg* arg = detail::argument(node, index, name);
  if (arg == nullptr || (arg->kind == Arg::Kind::Constant && arg->constant.is_null()))
    return std::nullopt;
  return detail::number_constant(*arg);
}

// Every "name=value" of `defaults` is absent from the node or given as that constant.
bool has_default_arguments(const Node& node, std::string_view defaults) {
  const auto pairs = util::split_words(defaults);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const size_t equals = pairs[i].find('=');
    const std::string name = pairs[i].substr(0, equals);
    const double expected = std::stod(pairs[i].substr(equals + 1));
    const Arg* arg = detail::argument(node, i + 1, name.c_str());
    if (arg == nullptr) continue;
    const auto given = detail::number_constant(*arg);
    if (!given || *given != expected) return false;
  }
  return true;
}

// The registered activation spelling `node` is (register_activation_spelling), or nullopt.
std::optional<std::string> spelled_activation(const Node& node) {
  for (const ActivationSpelling& entry : activation_spellings()) {
    if (entry.targets.empty() || !target_in(node, entry.targets)) continue;
    if (has_default_arguments(node, entry.defaults)) return entry.name;
    return std::nullopt;
  }
  return std::nullopt;
}

// The fact.activation attrs for a captured activation op, if it is one.
std::optional<json> activation_attrs(const Node& node) {
  auto make = [](const char* kind, double p0 = 0.0, double p1 = 0.0) {
    return json{{"kind", kind}, {"p0", p0}, {"p1", p1}};
  };
  if (auto name = spelled_activation(node)) return make(name->c_str());
  if (target_in(node, {"aten.leaky_relu", "aten.leaky_relu_"})) {
    const Arg* slope_arg = detail::argument(node, 1, "negative_slope");
    auto slope = slope_arg ? detail::number_constant(*slope_arg) : std::optional<double>(0.01);
    if (!slope) return std::nullopt;
    return make("leaky_relu", *slope);
  }
  if (target_in(node, {"aten.hardtanh", "aten.hardtanh_"})) {
    const Arg* lo_arg = detail::argument(node, 1, "min_val");
    const Arg* hi_arg = detail::argument(node, 2, "max_val");
    auto lo = lo_arg ? detail::number_constant(*lo_arg) : std::optional<double>(-1.0);
    auto hi = hi_arg ? detail::number_constant(*hi_arg) : std::optional<double>(1.0);
    if (!lo || !hi) return std::nullopt;
    return make("hardtanh", *lo, *hi);
  }
  if (target_is(node, "aten.relu6")) return make("hardtanh", 0.0, 6.0);
  if (node.target == "aten.clamp.default" || node.target == "aten.clamp") {
    auto lo = number_argument(node, 1, "min");
    auto hi = number_argument(node, 2, "max");
    const Arg* lo_arg = detail::argument(node, 1, "min");
    const Arg* hi_arg = detail::argument(node, 2, "max");
    if ((lo_arg && !lo_arg->constant.is_null() && !lo) || (hi_arg && !hi_arg->constant.is_null() && !hi))
      return std::nullopt;  // tensor bounds
    if (!lo && !hi) return std::nullopt;
    if (lo && *lo == 0.0 && !hi) return make("relu");
    return make("hardtanh", lo.value_or(-kInf), hi.value_or(kInf));
  }
  if (node.target == "aten.clamp_min.default") {
    auto lo = number_argument(node, 1, "min");
    if (!lo) return std::nullopt;
    return *lo == 0.0 ? make("relu") : make("hardtanh", *lo, kInf);
  }
  if (node.target == "aten.clamp_max.default") {
    auto hi = number_argument(node, 1, "max");
    if (!hi) return std::nullopt;
    return make("hardtanh", -kInf, *hi);
  }
  return std::nullopt;
}

// x * sigmoid(x) → silu. Returns true when rewritten.
bool rewrite_silu_formula(Graph& g, const Node& sigmoid) {
  const auto inputs = tensor_args(sigmoid);
  if (inputs.size() != 1 || sigmoid.outputs.size() != 1) return false;
  const ValueId s = sigmoid.outputs.front();
  if (!single_use(g, s)) return false;
  const Node* mul = g.consumers(s).front();
  if (!target_is(*mul, "aten.mul") || mul->outputs.size() != 1) return false;
  const auto operands = tensor_args(*mul);
  if (operands.size() != 2) return false;
  const ValueId other = operands[0] == s ? operands[1] : operands[0];
  if (other != inputs.front() || operands[0] == operands[1]) return false;
  const ValueId out = mul->outputs.front();
  const std::string mul_id = mul->id;
  detail::replace_region(g, {sigmoid.id, mul_id},
                         unary_node(detail::fresh_node_id(g, "silu"), "fact.activation",
                                    inputs.front(), out, json{{"kind", "silu"}, {"p0", 0.0},
                                                              {"p1", 0.0}}));
  return true;
}

}  // namespace

void canonicalize_gelu(Graph& g) {
  for (const auto& id : ids_of(g, {"aten.tanh", "aten.erf"})) {
    const Node* curve = g.node(id);
    if (curve == nullptr) continue;
    const Node copy = *curve;
    rewrite_gelu_formula(g, copy, target_is(copy, "aten.tanh"));
  }
  for (const auto& id : ids_of(g, {"aten.gelu", "aten.gelu_"})) {
    const Node* gelu = g.node(id);
    if (gelu == nullptr || gelu->outputs.size() != 1) continue;
    const auto inputs = tensor_args(*gelu);
    if (inputs.empty()) continue;
    const Arg* approximate = detail::argument(*gelu, 1, "approximate");
    std::string mode = "none";
    if (approximate && approximate->constant.is_string()) mode = approximate->constant.get<std::string>();
    if (mode != "none" && mode != "tanh") continue;
    const std::string kind = mode == "tanh" ? "gelu_tanh" : "gelu_erf";
    detail::replace_region(g, {id}, unary_node(id, "fact." + kind, inputs.front(),
                                               gelu->outputs.front()));
  }
}

void canonicalize_activations(Graph& g) {
  for (const auto& id : ids_of(g, {"aten.sigmoid"})) {
    const Node* sigmoid = g.node(id);
    if (sigmoid == nullptr) continue;
    const Node copy = *sigmoid;
    rewrite_silu_formula(g, copy);
  }
  std::vector<graph::NodeId> ids;
  for (const auto& node : g.nodes()) {
    if (op_base(node.target).rfind("aten.", 0) == 0 && activation_attrs(node)) ids.push_back(node.id);
  }
  for (const auto& id : ids) {
    const Node* node = g.node(id);
    if (node == nullptr || node->outputs.size() != 1) continue;
    const auto inputs = tensor_args(*node);
    if (inputs.empty() || !is_floating_tensor(g, inputs.front())) continue;
    auto attrs = activation_attrs(*node);
    detail::replace_region(g, {id}, unary_node(id, "fact.activation", inputs.front(),
                                               node->outputs.front(), *attrs));
  }
}

void canonicalize_scales(Graph& g) {
  for (const auto& id : ids_of(g, {"aten.mul", "aten.div"})) {
    const Node* node = g.node(id);
    if (node == nullptr || node->outputs.size() != 1 || node->args.size() < 2) continue;
    if (node->kwargs.count("rounding_mode")) continue;
    const bool is_div = target_is(*node, "aten.div");
    std::optional<double> factor;
    ValueId x;
    for (size_t i = 0; i < 2 && !factor; ++i) {
      if (is_div && i == 0) {
        // x / s only: the tensor must come first.
        auto divisor = detail::scalar_operand(g, node->args[1]);
        if (divisor && *divisor != 0.0 && node->args[0].is_tensor()) {
          factor = 1.0 / *divisor;
          x = node->args[0].tensor;
        }
        break;
      }
      auto scalar = detail::scalar_operand(g, node->args[1 - i]);
      if (scalar && node->args[i].is_tensor()) {
        factor = *scalar;
        x = node->args[i].tensor;
      }
    }
    if (!factor || !is_floating_tensor(g, x)) continue;
    detail::replace_region(g, {id}, unary_node(id, "fact.scale", x, node->outputs.front(),
                                               json{{"value", *factor}}));
  }
}

void canonicalize_scalar_adds(Graph& g) {
  for (const auto& id : ids_of(g, {"aten.add", "aten.sub"})) {
    const Node* node = g.node(id);
    if (node == nullptr || node->outputs.size() != 1 || node->args.size() < 2) continue;
    const bool is_sub = target_is(*node, "aten.sub");
    std::optional<double> alpha = 1.0;
    if (const Arg* a = detail::argument(*node, 2, "alpha")) alpha = detail::number_constant(*a);
    if (!alpha) continue;
    // x + c, c + x (add only), x - c; the constant times alpha.
    std::optional<double> addend;
    ValueId x;
    if (node->args[0].is_tensor()) {
      if (auto c = detail::scalar_operand(g, node->args[1])) {
        addend = (is_sub ? -1.0 : 1.0) * *alpha * *c;
        x = node->args[0].tensor;
      }
    }
    if (!addend && !is_sub && *alpha == 1.0 && node->args[1].is_tensor()) {
      if (auto c = detail::scalar_operand(g, node->args[0])) {
        addend = *c;
        x = node->args[1].tensor;
      }
    }
    if (!addend || !is_floating_tensor(g, x)) continue;
    detail::replace_region(g, {id}, unary_node(id, "fact.add_scalar", x, node->outputs.front(),
                                               json{{"value", *addend}}));
  }
}

const CanonicalPassRegistrar kGeluPass{{"gelu", 200, &canonicalize_gelu}};
const CanonicalPassRegistrar kActivationPass{{"activations", 300, &canonicalize_activations}};
const CanonicalPassRegistrar kScalePass{{"scales", 400, &canonicalize_scales}};
const CanonicalPassRegistrar kScalarAddPass{{"scalar_adds", 450, &canonicalize_scalar_adds}};

}  // namespace fact::discover
