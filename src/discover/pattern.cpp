#include <utility>

#include "fact/discover/rule.hpp"

namespace fact::discover {

std::string_view op_base(std::string_view target) {
  if (target.rfind("aten.", 0) != 0) return target;
  const size_t second_dot = target.find('.', 5);
  return second_dot == std::string_view::npos ? target : target.substr(0, second_dot);
}

bool target_is(const graph::Node& node, std::string_view name) {
  return node.target == name || op_base(node.target) == name;
}

bool target_in(const graph::Node& node, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    if (target_is(node, name)) return true;
  }
  return false;
}

std::vector<graph::ValueId> tensor_args(const graph::Node& node) {
  std::vector<graph::ValueId> ids;
  for (const auto& arg : node.args) {
    if (arg.kind == graph::Arg::Kind::Tensor) ids.push_back(arg.tensor);
  }
  return ids;
}

bool single_use(const graph::Graph& g, const graph::ValueId& value) {
  return !g.is_graph_output(value) && g.consumers(value).size() == 1;
}

Pattern Pattern::op(std::vector<std::string> targets, std::vector<Pattern> args) {
  Pattern p;
  p.kind_ = Kind::Op;
  p.targets_ = std::move(targets);
  p.args_ = std::move(args);
  return p;
}

Pattern Pattern::any() { return Pattern{}; }

Pattern Pattern::one_of(std::vector<Pattern> alternatives) {
  Pattern p;
  p.kind_ = Kind::OneOf;
  p.args_ = std::move(alternatives);
  return p;
}

Pattern Pattern::cast(Pattern inner) {
  return op({"aten.to", "aten._to_copy"}, {std::move(inner)}).optional();
}

Pattern Pattern::as(std::string role) const {
  Pattern p = *this;
  p.role_ = std::move(role);
  return p;
}

Pattern Pattern::commutative() const {
  Pattern p = *this;
  p.commutative_ = true;
  return p;
}

Pattern Pattern::optional() const {
  Pattern p = *this;
  p.optional_ = true;
  return p;
}

Pattern Pattern::where(NodeCheck check) const {
  Pattern p = *this;
  p.node_checks_.push_back(std::move(check));
  return p;
}

Pattern Pattern::where_value(ValueCheck check) const {
  Pattern p = *this;
  p.value_checks_.push_back(std::move(check));
  return p;
}

Pattern Pattern::shared() const {
  Pattern p = *this;
  p.shared_ = true;
  return p;
}

bool Pattern::bind(const graph::ValueId& value, const graph::Node* node, Binding& binding) const {
  if (role_.empty()) return true;
  auto it = binding.values.find(role_);
  if (it != binding.values.end()) return it->second == value;
  binding.values[role_] = value;
  if (node != nullptr) binding.nodes[role_] = node->id;
  return true;
}

bool Pattern::match_args(const std::vector<graph::ValueId>& tensor_args, const graph::Graph& g,
                         Binding& binding) const {
  if (args_.size() > tensor_args.size()) return false;
  auto match_in_order = [&](const std::vector<size_t>& order) {
    Binding attempt = binding;
    for (size_t i = 0; i < args_.size(); ++i) {
      if (!args_[i].match_into(tensor_args[order[i]], g, false, attempt)) return false;
    }
    binding = std::move(attempt);
    return true;
  };
  std::vector<size_t> order(args_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (match_in_order(order)) return true;
  if (commutative_ && args_.size() >= 2) {
    std::swap(order[0], order[1]);
    return match_in_order(order);
  }
  return false;
}

bool Pattern::match_op_node(const graph::Node& node, const graph::ValueId& value,
                            const graph::Graph& g, Binding& binding) const {
  if (!target_in(node, targets_)) return false;
  for (const auto& check : node_checks_) {
    if (!check(node, g)) return false;
  }
  if (!value_checks_.empty()) {
    if (!g.has_value(value)) return false;
    for (const auto& check : value_checks_) {
      if (!check(g.value(value), g)) return false;
    }
  }
  Binding attempt = binding;
  if (!bind(value, &node, attempt)) return false;
  attempt.matched.push_back(node.id);
  if (!match_args(tensor_args(node), g, attempt)) return false;
  binding = std::move(attempt);
  return true;
}

bool Pattern::match_into(const graph::ValueId& value, const graph::Graph& g, bool is_root,
                         Binding& binding) const {
  switch (kind_) {
    case Kind::Any: {
      if (!value_checks_.empty()) {
        if (!g.has_value(value)) return false;
        for (const auto& check : value_checks_) {
          if (!check(g.value(value), g)) return false;
        }
      }
      return bind(value, g.producer(value), binding);
    }
    case Kind::OneOf: {
      for (const auto& alternative : args_) {
        Binding attempt = binding;
        if (alternative.match_into(value, g, is_root, attempt) &&
            bind(value, g.producer(value), attempt)) {
          binding = std::move(attempt);
          return true;
        }
      }
      return false;
    }
    case Kind::Op: {
      const graph::Node* node = g.producer(value);
      if (node != nullptr && (is_root || shared_ || single_use(g, value))) {
        Binding attempt = binding;
        if (match_op_node(*node, value, g, attempt)) {
          binding = std::move(attempt);
          return true;
        }
      }
      if (optional_ && args_.size() == 1) return args_[0].match_into(value, g, is_root, binding);
      return false;
    }
  }
  return false;
}

std::optional<Binding> Pattern::match_node(const graph::Node& root, const graph::Graph& g,
                                           const Binding& seed) const {
  if (kind_ != Kind::Op || root.outputs.empty()) return std::nullopt;
  Binding binding = seed;
  if (!match_op_node(root, root.outputs.front(), g, binding)) return std::nullopt;
  return binding;
}

std::optional<Binding> Pattern::match_value(const graph::ValueId& value, const graph::Graph& g,
                                            const Binding& seed) const {
  Binding binding = seed;
  if (!match_into(value, g, true, binding)) return std::nullopt;
  return binding;
}

}  // namespace fact::discover
