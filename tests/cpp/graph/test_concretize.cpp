// Symbolic graph documents: declared ranges, concretize, and the errors that name the place.
#include <gtest/gtest.h>

#include "fact/graph/concretize.hpp"
#include "fact/graph/graph_json.hpp"

namespace fact::graph {
namespace {

using nlohmann::json;

// x [batch, seq, 8] -> view [batch*seq, 8] -> linear -> out.
json symbolic_document() {
  return json::parse(R"({
    "schema": "fact.graph/1",
    "source": {"module": "Small", "capture": "torch.export"},
    "symbols": [{"name": "batch", "min": 1, "max": 64, "hint": 4, "multiple": 1, "typical": [3]},
                {"name": "seq", "min": 8, "max": 512, "hint": 16, "multiple": 8, "typical": []}],
    "values": [
      {"id": "x", "kind": "input", "shape": ["batch", "seq", 8], "stride": ["8*seq", 8, 1], "dtype": "float32", "device": "cpu"},
      {"id": "w", "kind": "parameter", "target": "fc.weight", "shape": [6, 8], "stride": [8, 1], "dtype": "float32", "device": "cpu"},
      {"id": "flat", "kind": "intermediate", "shape": ["batch*seq", 8], "stride": [8, 1], "dtype": "float32", "device": "cpu"},
      {"id": "out", "kind": "intermediate", "shape": ["batch * seq", 6], "stride": [6, 1], "dtype": "float32", "device": "cpu"}
    ],
    "nodes": [
      {"id": "view", "target": "aten.view.default", "args": [{"tensor": "x"}, {"syms": ["batch*seq", 8]}],
       "kwargs": {}, "outputs": ["flat"]},
      {"id": "linear", "target": "aten.linear.default", "args": [{"tensor": "flat"}, {"tensor": "w"}],
       "kwargs": {"rows": {"sym": "batch*seq"}}, "outputs": ["out"]}
    ],
    "inputs": ["x"],
    "outputs": ["out"]
  })");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const GraphFormatError& e) {
    return e.what();
  }
  return "";
}

TEST(Concretize, ReadsTheDeclaredRanges) {
  const auto symbols = graph_symbols(symbolic_document());
  ASSERT_EQ(symbols.size(), 2u);
  EXPECT_EQ(symbols[0].name, "batch");
  EXPECT_EQ(symbols[0].typical, std::vector<int64_t>{3});
  EXPECT_EQ(symbols[1].multiple, 8);
  EXPECT_EQ(symbols[1].hint, 16);
  EXPECT_TRUE(is_symbolic(symbolic_document()));
  json static_doc = symbolic_document();
  static_doc.erase("symbols");
  EXPECT_FALSE(is_symbolic(static_doc));
  EXPECT_TRUE(graph_symbols(static_doc).empty());
}

TEST(Concretize, MakesAStaticDocumentTheLoaderReads) {
  const json doc = concretize(symbolic_document(), {{"batch", 3}, {"seq", 24}});
  EXPECT_FALSE(doc.contains("symbols"));
  EXPECT_EQ(doc["values"][0]["shape"], json::parse("[3, 24, 8]"));
  EXPECT_EQ(doc["values"][0]["stride"], json::parse("[192, 8, 1]"));
  EXPECT_EQ(doc["values"][3]["shape"], json::parse("[72, 6]"));
  EXPECT_EQ(doc["nodes"][0]["args"][1], json::parse(R"({"const": [72, 8]})"));
  EXPECT_EQ(doc["nodes"][1]["kwargs"]["rows"], json::parse(R"({"const": 72})"));
  const Graph g = graph_from_json(doc);
  EXPECT_EQ(g.value("flat").desc.shape, (std::vector<int64_t>{72, 8}));
}

TEST(Concretize, TheLoaderRefusesASymbolicDocument) {
  EXPECT_NE(error_of([] { graph_from_json(symbolic_document()); }).find("concretize"), std::string::npos);
}

TEST(Concretize, ErrorsNameThePlaceAndTheExpression) {
  json doc = symbolic_document();
  doc["values"][2]["shape"][0] = "batch*sq";
  std::string e = error_of([&] { concretize(doc, {{"batch", 3}, {"seq", 24}}); });
  EXPECT_NE(e.find("values[2] (id 'flat').shape[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown symbol 'sq'"), std::string::npos) << e;

  doc = symbolic_document();
  doc["values"][2]["shape"][0] = "batch*(seq";
  e = error_of([&] { concretize(doc, {{"batch", 3}, {"seq", 24}}); });
  EXPECT_NE(e.find("size expression 'batch*(seq'"), std::string::npos) << e;

  doc = symbolic_document();
  doc["nodes"][0]["args"][1]["syms"][0] = "batch - seq";
  e = error_of([&] { concretize(doc, {{"batch", 3}, {"seq", 24}}); });
  EXPECT_NE(e.find("nodes[0] (id 'view').args[1].syms[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("negative size -21"), std::string::npos) << e;

  e = error_of([&] { concretize(symbolic_document(), {{"batch", 3}}); });
  EXPECT_NE(e.find("no size given for symbol 'seq'"), std::string::npos) << e;
  e = error_of([&] { concretize(symbolic_document(), {{"batch", 3}, {"seq", 8}, {"heads", 2}}); });
  EXPECT_NE(e.find("undeclared symbol 'heads'"), std::string::npos) << e;

  doc = symbolic_document();
  doc["values"][0]["shape"][0] = 2.5;
  e = error_of([&] { concretize(doc, {{"batch", 3}, {"seq", 24}}); });
  EXPECT_NE(e.find("expected an integer or a size expression"), std::string::npos) << e;
}

TEST(Concretize, RejectsMalformedRanges) {
  auto with = [](const char* field, json value) {
    json doc = symbolic_document();
    doc["symbols"][1][field] = std::move(value);
    return error_of([&] { graph_symbols(doc); });
  };
  EXPECT_NE(with("name", "2x").find("not an identifier"), std::string::npos);
  EXPECT_NE(with("name", "batch").find("declared twice"), std::string::npos);
  EXPECT_NE(with("max", 4).find("below min"), std::string::npos);
  EXPECT_NE(with("hint", 1024).find("hint 1024 is outside [8, 512]"), std::string::npos);
  EXPECT_NE(with("multiple", 0).find("not positive"), std::string::npos);
  EXPECT_NE(with("multiple", 1000).find("no multiple of 1000"), std::string::npos);
  EXPECT_NE(with("typical", json::parse("[4]")).find("typical size 4"), std::string::npos);
  EXPECT_NE(with("min", "8").find("symbols[1] (name 'seq').min"), std::string::npos);
}

TEST(Concretize, AssignmentTextFollowsTheGivenOrder) {
  EXPECT_EQ(assignment_text({{"batch", 65}, {"seq", 129}}, {"seq", "batch"}), "seq=129, batch=65");
}

}  // namespace
}  // namespace fact::graph
