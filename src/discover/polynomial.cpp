#include "src/discover/polynomial.hpp"

#include <cmath>

#include "fact/discover/rule.hpp"
#include "fact/discover/graph_rewrite.hpp"

namespace fact::discover::detail {

namespace {

constexpr size_t kMaxTerms = 32;
constexpr int kMaxDegree = 8;
constexpr size_t kMaxNodes = 48;

Polynomial constant(double c) { return Polynomial{{Monomial{}, c}}; }

Polynomial add(const Polynomial& a, const Polynomial& b, double b_scale) {
  Polynomial sum = a;
  for (const auto& [mono, coef] : b) sum[mono] += b_scale * coef;
  for (auto it = sum.begin(); it != sum.end();) {
    it = it->second == 0.0 ? sum.erase(it) : std::next(it);
  }
  return sum;
}

std::optional<Polynomial> multiply(const Polynomial& a, const Polynomial& b) {
  Polynomial product;
  for (const auto& [ma, ca] : a) {
    for (const auto& [mb, cb] : b) {
      Monomial m = ma;
      int degree = 0;
      for (const auto& [atom, power] : mb) m[atom] += power;
      for (const auto& [atom, power] : m) degree += power;
      if (degree > kMaxDegree) return std::nullopt;
      product[m] += ca * cb;
    }
  }
  if (product.size() > kMaxTerms) return std::nullopt;
  return product;
}

class Expander {
 public:
  Expander(const graph::Graph& g, const std::set<graph::ValueId>& stop_at)
      : g_(g), stop_at_(stop_at) {}

  std::optional<Polynomial> value(const graph::ValueId& v, bool is_root) {
    if (!stop_at_.count(v)) {
      const graph::Node* node = g_.producer(v);
      if (node != nullptr && is_arithmetic(*node) && (is_root || single_use(g_, v))) {
        const size_t mark = nodes.size();
        nodes.push_back(node->id);
        if (nodes.size() > kMaxNodes) return std::nullopt;
        if (auto p = expand_node(*node)) return p;
        nodes.resize(mark);
        if (failed_) return std::nullopt;
      }
    }
    if (g_.has_value(v) && g_.value(v).desc.rank() == 0 && g_.producer(v) == nullptr &&
        g_.value(v).scalar) {
      return constant(*g_.value(v).scalar);
    }
    atoms.insert(v);
    return Polynomial{{Monomial{{v, 1}}, 1.0}};
  }

  std::vector<graph::NodeId> nodes;
  std::set<graph::ValueId> atoms;

 private:
  std::optional<Polynomial> operand(const graph::Arg& arg) {
    if (arg.kind == graph::Arg::Kind::Constant) {
      auto c = number_constant(arg);
      if (!c) return std::nullopt;
      return constant(*c);
    }
    if (arg.kind != graph::Arg::Kind::Tensor) return std::nullopt;
    return value(arg.tensor, false);
  }

  // Reads one node; nullopt with failed_ unset means "not expandable, treat as atom".
  std::optional<Polynomial> expand_node(const graph::Node& node) {
    auto arg_at = [&](size_t i, const char* name) { return argument(node, i, name); };
    auto number_at = [&](size_t i, const char* name, double fallback) -> std::optional<double> {
      const graph::Arg* a = arg_at(i, name);
      if (a == nullptr) return fallback;
      return scalar_operand(g_, *a);
    };
    const graph::Arg* first = arg_at(0, "self");
    if (first == nullptr) return std::nullopt;
    if (target_in(node, {"aten.neg"})) return scaled(operand(*first), -1.0);
    if (target_in(node, {"aten.square"})) {
      auto a = operand(*first);
      return a ? checked(multiply(*a, *a)) : fail();
    }
    if (target_in(node, {"aten.pow"})) {
      auto e = number_at(1, "exponent", -1.0);
      if (!e || *e < 0 || *e > 4 || std::floor(*e) != *e) return std::nullopt;
      auto base = operand(*first);
      if (!base) return fail();
      Polynomial result = constant(1.0);
      for (int i = 0; i < static_cast<int>(*e); ++i) {
        auto next = multiply(result, *base);
        if (!next) return fail();
        result = *next;
      }
      return result;
    }
    const graph::Arg* second = arg_at(1, "other");
    if (second == nullptr) return std::nullopt;
    if (target_in(node, {"aten.div"})) {
      if (node.kwargs.count("rounding_mode")) return std::nullopt;
      auto divisor = scalar_operand(g_, *second);
      if (!divisor || *divisor == 0.0) return std::nullopt;
      return scaled(operand(*first), 1.0 / *divisor);
    }
    if (target_in(node, {"aten.mul"})) {
      auto a = operand(*first);
      auto b = a ? operand(*second) : std::nullopt;
      return (a && b) ? checked(multiply(*a, *b)) : fail();
    }
    if (target_in(node, {"aten.add", "aten.sub", "aten.rsub"})) {
      auto alpha = number_at(2, "alpha", 1.0);
      if (!alpha) return std::nullopt;
      auto a = operand(*first);
      auto b = a ? operand(*second) : std::nullopt;
      if (!a || !b) return fail();
      if (target_is(node, "aten.add")) return checked(add(*a, *b, *alpha));
      if (target_is(node, "aten.sub")) return checked(add(*a, *b, -*alpha));
      return checked(add(*b, *a, -*alpha));
    }
    return std::nullopt;
  }

  std::optional<Polynomial> scaled(std::optional<Polynomial> p, double factor) {
    if (!p) return fail();
    for (auto& [mono, coef] : *p) coef *= factor;
    return p;
  }
  std::optional<Polynomial> checked(std::optional<Polynomial> p) {
    if (!p || p->size() > kMaxTerms) return fail();
    return p;
  }
  std::optional<Polynomial> fail() {
    failed_ = true;
    return std::nullopt;
  }

  const graph::Graph& g_;
  const std::set<graph::ValueId>& stop_at_;
  bool failed_ = false;
};

}  // namespace

bool is_arithmetic(const graph::Node& node) {
  return target_in(node, {"aten.add", "aten.sub", "aten.rsub", "aten.mul", "aten.div",
                          "aten.pow", "aten.neg", "aten.square"});
}

std::optional<Expansion> expand_polynomial(const graph::Graph& g, const graph::ValueId& root,
                                           const std::set<graph::ValueId>& stop_at) {
  Expander expander(g, stop_at);
  auto poly = expander.value(root, true);
  if (!poly) return std::nullopt;
  return Expansion{*poly, expander.nodes, expander.atoms};
}

bool polynomials_match(const Polynomial& a, const Polynomial& b, double rel_tol) {
  auto significant = [](const Polynomial& p) {
    Polynomial kept;
    for (const auto& [mono, coef] : p) {
      if (std::abs(coef) > 1e-12) kept[mono] = coef;
    }
    return kept;
  };
  const Polynomial sa = significant(a), sb = significant(b);
  if (sa.size() != sb.size()) return false;
  for (const auto& [mono, coef] : sa) {
    auto it = sb.find(mono);
    if (it == sb.end()) return false;
    if (std::abs(coef - it->second) > rel_tol * std::abs(it->second)) return false;
  }
  return true;
}

}  // namespace fact::discover::detail
