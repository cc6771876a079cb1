// Sizes as data (docs/dynamic_shapes.md, "Sizes as data"): the one grammar of a symbolic size
// expression, its evaluation for an assignment of the symbols, and the polynomial form the plan
// carries so that executors evaluate sizes without a parser.
//
// Grammar: expr := term (('+' | '-') term)*;  term := unary (('*' | '//') unary)*;
//          unary := '-' unary | atom;  atom := integer | identifier | '(' expr ')'.
// `//` is floor division (Python's: rounds toward negative infinity).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fact::core {

class Poly;

// A symbol's value for each name; evaluation reads it.
using SizeAssignment = std::map<std::string, int64_t>;

// An expression that does not parse or evaluate. The message names the expression
// ("size expression 'seq - ': expected a number, a name or '(' at the end").
class SizeExprError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The syntax tree of one expression. Immutable once parsed; copies share the tree.
class SizeExpr {
 public:
  enum class Op { Integer, Symbol, Add, Sub, Mul, FloorDiv, Neg };

  // Throws SizeExprError for an empty expression, an unknown character, an unbalanced
  // parenthesis, a missing operand or trailing text.
  static SizeExpr parse(std::string_view text);
  static SizeExpr integer(int64_t value);
  static SizeExpr symbol(std::string name);

  // The value for `assignment` (intermediate and final values may be negative). Throws
  // SizeExprError naming the symbol the assignment lacks, a division by zero or an overflow.
  int64_t evaluate(const SizeAssignment& assignment) const;
  // evaluate, and a SizeExprError naming the expression and the value when it is negative.
  int64_t evaluate_size(const SizeAssignment& assignment) const;

  std::set<std::string> symbols() const;  // the names it reads
  // The expression as a polynomial over `symbols` (which must hold every name it reads), or a
  // SizeExprError when it is not one: a floor division whose divisor reads a symbol or that
  // does not divide every coefficient exactly.
  class Poly to_poly(const std::vector<std::string>& symbols) const;
  const std::string& text() const { return text_; }  // as given to parse (or built)

 private:
  struct Node {
    Op op = Op::Integer;
    int64_t value = 0;
    std::string name;
    std::shared_ptr<const Node> left, right;
  };
  friend class SizeExprParser;
  static int64_t eval(const Node& node, const SizeAssignment& assignment, const std::string& text);
  static void collect(const Node& node, std::set<std::string>& out);
  static class Poly poly_of(const Node& node, const std::vector<std::string>& symbols, const std::string& text);

  std::shared_ptr<const Node> root_;
  std::string text_;
};

// Parses and evaluates `text` as a size (non-negative); errors as SizeExpr's.
int64_t evaluate_size_expr(std::string_view text, const SizeAssignment& assignment);

// One term of a Poly: coefficient * prod(symbol_i ** exponents[i]).
struct Monomial {
  int64_t coefficient = 0;
  std::vector<int> exponents;  // one per symbol of the Poly, in its order
  bool operator==(const Monomial&) const = default;
};

// A polynomial with integer coefficients over an ordered list of symbols: the plan's `poly`
// (`[[coef, [exps...]], ...]`). Terms are kept with non-zero coefficients, distinct exponent
// vectors, highest degree first (the constant last); the zero polynomial has no terms.
class Poly {
 public:
  Poly() = default;
  explicit Poly(std::vector<std::string> symbols) : symbols_(std::move(symbols)) {}
  static Poly constant(std::vector<std::string> symbols, int64_t value);

  // Adds coefficient * prod(symbol ** exponents) (merging equal exponent vectors).
  void add_term(int64_t coefficient, std::vector<int> exponents);

  const std::vector<std::string>& symbols() const { return symbols_; }
  const std::vector<Monomial>& terms() const { return terms_; }
  bool is_constant() const;                 // no term reads a symbol
  int64_t constant_value() const;           // the constant term (0 when none)

  // `values` in the order of symbols(). Throws std::invalid_argument on a wrong count and
  // SizeExprError on overflow.
  int64_t evaluate(const std::vector<int64_t>& values) const;
  // Throws SizeExprError naming a symbol the assignment lacks.
  int64_t evaluate(const SizeAssignment& assignment) const;

  // Back to an expression: "768*batch*seq", "64*batch + 64", "seq - 1", "0".
  std::string to_expr() const;
  // The `poly` list: [[coef, [exps...]], ...].
  nlohmann::json poly_json() const;
  // {"expr": to_expr(), "poly": poly_json()}.
  nlohmann::json to_json() const;
  // Reads a `poly` list or an {"expr", "poly"} object (the poly is read, the expr ignored)
  // over `symbols`. Throws std::invalid_argument for a malformed list or a wrong exponent count.
  static Poly from_json(const nlohmann::json& j, std::vector<std::string> symbols);

  bool operator==(const Poly& other) const { return symbols_ == other.symbols_ && terms_ == other.terms_; }

 private:
  std::vector<std::string> symbols_;
  std::vector<Monomial> terms_;
};

}  // namespace fact::core
