#include "fact/core/size_expr.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

namespace fact::core {

namespace {

[[noreturn]] void fail(const std::string& text, const std::string& problem) {
  throw SizeExprError("size expression '" + text + "': " + problem);
}

int64_t checked(__int128 value, const std::string& text) {
  if (value > std::numeric_limits<int64_t>::max() || value < std::numeric_limits<int64_t>::min())
    fail(text, "value out of the 64-bit range");
  return static_cast<int64_t>(value);
}

int64_t floor_div(int64_t a, int64_t b, const std::string& text) {
  if (b == 0) fail(text, "division by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) fail(text, "value out of the 64-bit range");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

// Recursive descent over the grammar in the header.
class SizeExprParser {
 public:
  explicit SizeExprParser(std::string_view text) : text_(text) {}

  std::shared_ptr<const SizeExpr::Node> parse() {
    skip_space();
    if (pos_ == text_.size()) fail(std::string(text_), "empty expression");
    auto root = expr();
    skip_space();
    if (pos_ != text_.size()) error("unexpected '" + std::string(1, text_[pos_]) + "'");
    return root;
  }

 private:
  using NodePtr = std::shared_ptr<const SizeExpr::Node>;

  [[noreturn]] void error(const std::string& problem) {
    fail(std::string(text_), problem + (pos_ < text_.size() ? " at position " + std::to_string(pos_) : " at the end"));
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  static NodePtr binary(SizeExpr::Op op, NodePtr l, NodePtr r) {
    auto n = std::make_shared<SizeExpr::Node>();
    n->op = op;
    n->left = std::move(l);
    n->right = std::move(r);
    return n;
  }

  NodePtr expr() {
    NodePtr left = term();
    for (;;) {
      skip_space();
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) {
        const SizeExpr::Op op = text_[pos_] == '+' ? SizeExpr::Op::Add : SizeExpr::Op::Sub;
        ++pos_;
        left = binary(op, left, term());
      } else {
        return left;
      }
    }
  }

  NodePtr term() {
    NodePtr left = unary();
    for (;;) {
      skip_space();
      if (text_.substr(pos_, 2) == "//") {
        pos_ += 2;
        left = binary(SizeExpr::Op::FloorDiv, left, unary());
      } else if (pos_ < text_.size() && text_[pos_] == '*') {
        ++pos_;
        if (pos_ < text_.size() && text_[pos_] == '*') error("'**' is not a size operator");
        left = binary(SizeExpr::Op::Mul, left, unary());
      } else if (pos_ < text_.size() && text_[pos_] == '/') {
        error("'/' is not a size operator (floor division is '//')");
      } else {
        return left;
      }
    }
  }

  NodePtr unary() {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '-') {
      ++pos_;
      auto n = std::make_shared<SizeExpr::Node>();
      n->op = SizeExpr::Op::Neg;
      n->left = unary();
      return n;
    }
    return atom();
  }

  NodePtr atom() {
    skip_space();
    if (pos_ == text_.size()) error("expected a number, a name or '('");
    const char c = text_[pos_];
    auto n = std::make_shared<SizeExpr::Node>();
    if (c == '(') {
      ++pos_;
      NodePtr inner = expr();
      skip_space();
      if (pos_ == text_.size() || text_[pos_] != ')') error("expected ')'");
      ++pos_;
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      __int128 value = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        value = value * 10 + (text_[pos_] - '0');
        if (value > std::numeric_limits<int64_t>::max()) error("integer out of the 64-bit range");
        ++pos_;
      }
      if (pos_ < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
        error("a name cannot start with a digit");
      n->op = SizeExpr::Op::Integer;
      n->value = static_cast<int64_t>(value);
      return n;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = pos_;
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
        ++pos_;
      n->op = SizeExpr::Op::Symbol;
      n->name = std::string(text_.substr(start, pos_ - start));
      return n;
    }
    if (c == ')') error("unbalanced ')'");
    error("expected a number, a name or '(', got '" + std::string(1, c) + "'");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

SizeExpr SizeExpr::parse(std::string_view text) {
  SizeExpr e;
  e.root_ = SizeExprParser(text).parse();
  e.text_ = std::string(text);
  return e;
}

SizeExpr SizeExpr::integer(int64_t value) {
  auto n = std::make_shared<Node>();
  n->op = Op::Integer;
  n->value = value;
  SizeExpr e;
  e.root_ = n;
  e.text_ = std::to_string(value);
  return e;
}

SizeExpr SizeExpr::symbol(std::string name) {
  auto n = std::make_shared<Node>();
  n->op = Op::Symbol;
  n->name = name;
  SizeExpr e;
  e.root_ = n;
  e.text_ = std::move(name);
  return e;
}

int64_t SizeExpr::eval(const Node& node, const SizeAssignment& assignment, const std::string& text) {
  switch (node.op) {
    case Op::Integer:
      return node.value;
    case Op::Symbol: {
      auto it = assignment.find(node.name);
      if (it == assignment.end()) fail(text, "unknown symbol '" + node.name + "'");
      return it->second;
    }
    case Op::Neg:
      return checked(-static_cast<__int128>(eval(*node.left, assignment, text)), text);
    default:
      break;
  }
  const __int128 l = eval(*node.left, assignment, text);
  const __int128 r = eval(*node.right, assignment, text);
  switch (node.op) {
    case Op::Add: return checked(l + r, text);
    case Op::Sub: return checked(l - r, text);
    case Op::Mul: return checked(l * r, text);
    case Op::FloorDiv: return floor_div(static_cast<int64_t>(l), static_cast<int64_t>(r), text);
    default: break;
  }
  fail(text, "malformed expression");
}

int64_t SizeExpr::evaluate(const SizeAssignment& assignment) const {
  if (!root_) fail(text_, "empty expression");
  return eval(*root_, assignment, text_);
}

int64_t SizeExpr::evaluate_size(const SizeAssignment& assignment) const {
  const int64_t value = evaluate(assignment);
  if (value < 0) {
    std::string at;
    for (const auto& name : symbols()) {
      auto it = assignment.find(name);
      at += (at.empty() ? "" : ", ") + name + "=" + std::to_string(it->second);
    }
    fail(text_, "negative size " + std::to_string(value) + (at.empty() ? "" : " at " + at));
  }
  return value;
}

void SizeExpr::collect(const Node& node, std::set<std::string>& out) {
  if (node.op == Op::Symbol) out.insert(node.name);
  if (node.left) collect(*node.left, out);
  if (node.right) collect(*node.right, out);
}

std::set<std::string> SizeExpr::symbols() const {
  std::set<std::string> out;
  if (root_) collect(*root_, out);
  return out;
}

Poly SizeExpr::poly_of(const Node& node, const std::vector<std::string>& symbols, const std::string& text) {
  switch (node.op) {
    case Op::Integer:
      return Poly::constant(symbols, node.value);
    case Op::Symbol: {
      auto it = std::find(symbols.begin(), symbols.end(), node.name);
      if (it == symbols.end()) fail(text, "unknown symbol '" + node.name + "'");
      std::vector<int> exponents(symbols.size(), 0);
      exponents[static_cast<size_t>(it - symbols.begin())] = 1;
      Poly p(symbols);
      p.add_term(1, exponents);
      return p;
    }
    case Op::Neg: {
      Poly p(symbols);
      for (const auto& t : poly_of(*node.left, symbols, text).terms()) p.add_term(-t.coefficient, t.exponents);
      return p;
    }
    default:
      break;
  }
  const Poly l = poly_of(*node.left, symbols, text);
  const Poly r = poly_of(*node.right, symbols, text);
  Poly out(symbols);
  switch (node.op) {
    case Op::Add:
    case Op::Sub:
      for (const auto& t : l.terms()) out.add_term(t.coefficient, t.exponents);
      for (const auto& t : r.terms()) out.add_term(node.op == Op::Add ? t.coefficient : -t.coefficient, t.exponents);
      return out;
    case Op::Mul:
      for (const auto& a : l.terms())
        for (const auto& b : r.terms()) {
          std::vector<int> e(symbols.size());
          for (size_t i = 0; i < e.size(); ++i) e[i] = a.exponents[i] + b.exponents[i];
          out.add_term(checked(static_cast<__int128>(a.coefficient) * b.coefficient, text), e);
        }
      return out;
    case Op::FloorDiv: {
      if (!r.is_constant() || r.constant_value() == 0) fail(text, "not a polynomial (floor division by a size that varies)");
      const int64_t d = r.constant_value();
      for (const auto& t : l.terms()) {
        if (t.coefficient % d != 0) fail(text, "not a polynomial (floor division that is not exact)");
        out.add_term(t.coefficient / d, t.exponents);
      }
      return out;
    }
    default:
      break;
  }
  fail(text, "malformed expression");
}

Poly SizeExpr::to_poly(const std::vector<std::string>& symbols) const {
  if (!root_) fail(text_, "empty expression");
  return poly_of(*root_, symbols, text_);
}

int64_t evaluate_size_expr(std::string_view text, const SizeAssignment& assignment) {
  return SizeExpr::parse(text).evaluate_size(assignment);
}

// ---------------------------------------------------------------------------------------------

Poly Poly::constant(std::vector<std::string> symbols, int64_t value) {
  Poly p(std::move(symbols));
  p.add_term(value, std::vector<int>(p.symbols_.size(), 0));
  return p;
}

void Poly::add_term(int64_t coefficient, std::vector<int> exponents) {
  if (exponents.size() != symbols_.size())
    throw std::invalid_argument("polynomial term with " + std::to_string(exponents.size()) + " exponents over " +
                                std::to_string(symbols_.size()) + " symbols");
  for (int e : exponents)
    if (e < 0) throw std::invalid_argument("polynomial term with a negative exponent");
  auto it = std::find_if(terms_.begin(), terms_.end(), [&](const Monomial& m) { return m.exponents == exponents; });
  if (it != terms_.end()) {
    it->coefficient += coefficient;
    if (it->coefficient == 0) terms_.erase(it);
  } else if (coefficient != 0) {
    terms_.push_back({coefficient, std::move(exponents)});
  }
  // Highest total degree first, then by exponents (descending): the constant is last.
  std::sort(terms_.begin(), terms_.end(), [](const Monomial& a, const Monomial& b) {
    int da = 0, db = 0;
    for (int e : a.exponents) da += e;
    for (int e : b.exponents) db += e;
    if (da != db) return da > db;
    return a.exponents > b.exponents;
  });
}

bool Poly::is_constant() const {
  for (const auto& t : terms_)
    for (int e : t.exponents)
      if (e != 0) return false;
  return true;
}

int64_t Poly::constant_value() const {
  for (const auto& t : terms_)
    if (std::all_of(t.exponents.begin(), t.exponents.end(), [](int e) { return e == 0; })) return t.coefficient;
  return 0;
}

int64_t Poly::evaluate(const std::vector<int64_t>& values) const {
  if (values.size() != symbols_.size())
    throw std::invalid_argument("polynomial over " + std::to_string(symbols_.size()) + " symbols given " +
                                std::to_string(values.size()) + " values");
  __int128 sum = 0;
  for (const auto& t : terms_) {
    __int128 term = t.coefficient;
    for (size_t i = 0; i < values.size(); ++i)
      for (int e = 0; e < t.exponents[i]; ++e) term = static_cast<__int128>(checked(term, to_expr())) * values[i];
    sum += static_cast<__int128>(checked(term, to_expr()));
  }
  return checked(sum, to_expr());
}

int64_t Poly::evaluate(const SizeAssignment& assignment) const {
  std::vector<int64_t> values;
  for (const auto& name : symbols_) {
    auto it = assignment.find(name);
    if (it == assignment.end()) fail(to_expr(), "unknown symbol '" + name + "'");
    values.push_back(it->second);
  }
  return evaluate(values);
}

std::string Poly::to_expr() const {
  if (terms_.empty()) return "0";
  std::string out;
  for (size_t i = 0; i < terms_.size(); ++i) {
    const Monomial& t = terms_[i];
    const int64_t magnitude = t.coefficient < 0 ? -t.coefficient : t.coefficient;
    if (i == 0) {
      if (t.coefficient < 0) out += "-";
    } else {
      out += t.coefficient < 0 ? " - " : " + ";
    }
    std::string factors;
    for (size_t s = 0; s < symbols_.size(); ++s)
      for (int e = 0; e < t.exponents[s]; ++e) factors += (factors.empty() ? "" : "*") + symbols_[s];
    if (factors.empty()) {
      out += std::to_string(magnitude);
    } else {
      out += magnitude == 1 ? factors : std::to_string(magnitude) + "*" + factors;
    }
  }
  return out;
}

nlohmann::json Poly::poly_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : terms_) list.push_back(nlohmann::json::array({t.coefficient, t.exponents}));
  return list;
}

nlohmann::json Poly::to_json() const { return {{"expr", to_expr()}, {"poly", poly_json()}}; }

Poly Poly::from_json(const nlohmann::json& j, std::vector<std::string> symbols) {
  const nlohmann::json& list = j.is_object() ? j.at("poly") : j;
  if (!list.is_array()) throw std::invalid_argument("a polynomial is a list of [coefficient, [exponents]]");
  Poly p(std::move(symbols));
  for (const auto& term : list) {
    if (!term.is_array() || term.size() != 2 || !term[0].is_number_integer() || !term[1].is_array())
      throw std::invalid_argument("a polynomial term is [coefficient, [exponents]], got " + term.dump());
    std::vector<int> exponents;
    for (const auto& e : term[1]) {
      if (!e.is_number_integer()) throw std::invalid_argument("a polynomial exponent is an integer, got " + e.dump());
      exponents.push_back(e.get<int>());
    }
    p.add_term(term[0].get<int64_t>(), std::move(exponents));
  }
  return p;
}

}  // namespace fact::core
