#include <gtest/gtest.h>

#include "fact/core/size_expr.hpp"

namespace fact::core {
namespace {

std::string error_of(std::string_view text, const SizeAssignment& at = {}) {
  try {
    evaluate_size_expr(text, at);
  } catch (const SizeExprError& e) {
    return e.what();
  }
  return "";
}

TEST(SizeExpr, EvaluatesTheGrammar) {
  const SizeAssignment at{{"batch", 3}, {"seq", 10}};
  EXPECT_EQ(evaluate_size_expr("768*batch*seq", at), 23040);
  EXPECT_EQ(evaluate_size_expr("seq - 1", at), 9);
  EXPECT_EQ(evaluate_size_expr("(seq + 2) // 4", at), 3);
  EXPECT_EQ(evaluate_size_expr("seq // 4 * 4", at), 8);          // left to right
  EXPECT_EQ(evaluate_size_expr("2 + 3*batch", at), 11);          // * binds tighter
  EXPECT_EQ(evaluate_size_expr("-(1 - seq) // 3", at), 3);
  EXPECT_EQ(SizeExpr::parse("(1 - seq) // 4").evaluate(at), -3);  // floor, not truncation
  EXPECT_EQ(evaluate_size_expr("42", {}), 42);
}

TEST(SizeExpr, NamesTheSymbolsItReads) {
  EXPECT_EQ(SizeExpr::parse("batch*seq + batch - 1").symbols(), (std::set<std::string>{"batch", "seq"}));
  EXPECT_TRUE(SizeExpr::parse("12").symbols().empty());
}

TEST(SizeExpr, RejectsBadExpressionsWithTheExpression) {
  for (const char* bad : {"", "  ", "seq -", "(seq", "seq)", "seq / 2", "seq ** 2", "2seq", "seq $ 1",
                          "batch seq", "99999999999999999999"}) {
    const std::string message = error_of(bad, {{"seq", 4}, {"batch", 2}});
    EXPECT_NE(message.find("size expression '" + std::string(bad) + "'"), std::string::npos)
        << bad << " -> " << message;
  }
  EXPECT_NE(error_of("seq / 2").find("floor division is '//'"), std::string::npos);
}

TEST(SizeExpr, EvaluationErrorsNameTheCause) {
  EXPECT_NE(error_of("batch*heads", {{"batch", 2}}).find("unknown symbol 'heads'"), std::string::npos);
  const std::string negative = error_of("seq - 8", {{"seq", 3}});
  EXPECT_NE(negative.find("negative size -5"), std::string::npos) << negative;
  EXPECT_NE(negative.find("seq=3"), std::string::npos) << negative;
  EXPECT_NE(error_of("seq // (seq - 3)", {{"seq", 3}}).find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("9223372036854775807 + seq", {{"seq", 3}}).find("64-bit"), std::string::npos);
}

TEST(SizeExpr, ToPolyExpandsProductsAndExactDivisions) {
  const std::vector<std::string> symbols{"batch", "seq"};
  const Poly p = SizeExpr::parse("(batch + 1) * 64 * seq // 2 - seq").to_poly(symbols);
  EXPECT_EQ(p.to_expr(), "32*batch*seq + 31*seq");
  EXPECT_EQ(p.evaluate(std::vector<int64_t>{3, 5}), (3 + 1) * 64 * 5 / 2 - 5);
  EXPECT_THROW(SizeExpr::parse("seq // 2").to_poly(symbols), SizeExprError);
  EXPECT_THROW(SizeExpr::parse("64 // seq").to_poly(symbols), SizeExprError);
  EXPECT_THROW(SizeExpr::parse("heads").to_poly(symbols), SizeExprError);
}

TEST(Poly, PrintsEvaluatesAndWritesTheDocumentedJson) {
  Poly p({"batch", "seq"});
  p.add_term(768, {1, 1});
  EXPECT_EQ(p.to_json(), nlohmann::json::parse(R"({"expr": "768*batch*seq", "poly": [[768, [1, 1]]]})"));
  EXPECT_EQ(p.evaluate(SizeAssignment{{"batch", 2}, {"seq", 3}}), 4608);
  p.add_term(-1, {0, 0});
  p.add_term(1, {0, 1});
  EXPECT_EQ(p.to_expr(), "768*batch*seq + seq - 1");
  EXPECT_FALSE(p.is_constant());
  EXPECT_EQ(p.constant_value(), -1);
  EXPECT_EQ(Poly::from_json(p.to_json(), {"batch", "seq"}), p);
  EXPECT_EQ(Poly::from_json(p.poly_json(), {"batch", "seq"}), p);
  p.add_term(1, {0, 0});  // cancels the constant
  EXPECT_EQ(p.to_expr(), "768*batch*seq + seq");
  EXPECT_EQ(Poly({"x"}).to_expr(), "0");
  EXPECT_EQ(Poly::constant({"x"}, -4).to_expr(), "-4");
  EXPECT_TRUE(Poly::constant({"x"}, 7).is_constant());
  Poly neg({"x"});
  neg.add_term(-2, {1});
  EXPECT_EQ(neg.to_expr(), "-2*x");
}

TEST(Poly, RejectsMalformedJsonAndUnknownSymbols) {
  EXPECT_THROW(Poly::from_json(nlohmann::json::parse("[[1, [1, 0]]]"), {"x"}), std::invalid_argument);
  EXPECT_THROW(Poly::from_json(nlohmann::json::parse("[[1.5, [1]]]"), {"x"}), std::invalid_argument);
  EXPECT_THROW(Poly::from_json(nlohmann::json::parse("{\"poly\": 3}"), {"x"}), std::invalid_argument);
  Poly p({"x"});
  p.add_term(1, {1});
  EXPECT_THROW(p.evaluate(SizeAssignment{{"y", 1}}), SizeExprError);
  EXPECT_THROW(p.evaluate(std::vector<int64_t>{1, 2}), std::invalid_argument);
}

}  // namespace
}  // namespace fact::core
