// Graph JSON loader and writer: valid documents, round trips, every malformed case with its
// location and problem, opaque unknown ops, and the committed capture fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "fact/graph/graph_json.hpp"

namespace fact::graph {
namespace {

using nlohmann::json;

const std::filesystem::path kFixtures = std::filesystem::path(FACT_SOURCE_DIR) / "tests/data/graphs";

// x[4,8] -> linear(x, w, b) -> relu -> out, plus a split into two tuple elements.
json small_document() {
  return json::parse(R"({
    "schema": "fact.graph/1",
    "source": {"module": "Small", "capture": "torch.export", "export_error": null, "torch": "2.11.0"},
    "values": [
      {"id": "x", "kind": "input", "shape": [4, 8], "stride": [8, 1], "dtype": "float32", "device": "cpu"},
      {"id": "w", "kind": "parameter", "target": "fc.weight", "shape": [6, 8], "stride": [8, 1], "dtype": "float32", "device": "cpu"},
      {"id": "b", "kind": "parameter", "target": "fc.bias", "shape": [6], "stride": [1], "dtype": "float32", "device": "cpu"},
      {"id": "c", "kind": "constant", "target": "c_lifted_tensor_0", "shape": [], "stride": [], "dtype": "float32", "device": "cpu", "scalar": 0.5},
      {"id": "linear", "kind": "intermediate", "shape": [4, 6], "stride": [6, 1], "dtype": "float32", "device": "cpu"},
      {"id": "relu", "kind": "intermediate", "shape": [4, 6], "stride": [6, 1], "dtype": "float32", "device": "cpu"},
      {"id": "part_0", "kind": "intermediate", "shape": [4, 3], "stride": [6, 1], "dtype": "float32", "device": "cpu"},
      {"id": "part_1", "kind": "intermediate", "shape": [4, 3], "stride": [6, 1], "dtype": "float32", "device": "cpu"},
      {"id": "cat", "kind": "intermediate", "shape": [4, 6], "stride": [6, 1], "dtype": "float32", "device": "cpu"}
    ],
    "nodes": [
      {"id": "linear", "target": "aten.linear.default",
       "args": [{"tensor": "x"}, {"tensor": "w"}, {"tensor": "b"}], "kwargs": {}, "outputs": ["linear"]},
      {"id": "relu", "target": "aten.relu.default", "args": [{"tensor": "linear"}], "kwargs": {}, "outputs": ["relu"]},
      {"id": "split", "target": "aten.split.Tensor", "args": [{"tensor": "relu"}, {"const": 3}, {"const": 1}],
       "kwargs": {}, "outputs": ["part_0", "part_1"]},
      {"id": "cat", "target": "aten.cat.default", "args": [{"tensors": ["part_1", "part_0"]}, {"const": -1}],
       "kwargs": {"other": {"tensor": "c"}, "fill": {"float": "-inf"}, "dtype": {"dtype": "bfloat16"},
                  "device": {"device": "cuda:0"}, "layout": {"repr": "torch.strided"}, "sizes": {"const": [1, 2]},
                  "maybe": {"tensors": ["x", null]}},
       "outputs": ["cat"]}
    ],
    "inputs": ["x"],
    "outputs": ["cat"]
  })");
}

// Values keyed by id, so that documents compare regardless of the order values are listed in.
json values_by_id(const json& doc) {
  json out = json::object();
  for (const json& v : doc.at("values")) out[v.at("id").get<std::string>()] = v;
  return out;
}

void expect_same_document(const json& expected, const json& actual) {
  EXPECT_EQ(expected.at("schema"), actual.at("schema"));
  EXPECT_EQ(expected.at("source"), actual.at("source"));
  EXPECT_EQ(values_by_id(expected), values_by_id(actual));
  EXPECT_EQ(expected.at("nodes"), actual.at("nodes"));
  EXPECT_EQ(expected.at("inputs"), actual.at("inputs"));
  EXPECT_EQ(expected.at("outputs"), actual.at("outputs"));
}

TEST(GraphJson, ReadsValuesNodesAndArguments) {
  Graph g = graph_from_json(small_document());
  EXPECT_EQ(g.schema, "fact.graph/1");
  EXPECT_EQ(g.source.at("module"), "Small");
  EXPECT_EQ(g.values().size(), 9u);
  ASSERT_EQ(g.nodes().size(), 4u);
  EXPECT_EQ(g.inputs, std::vector<ValueId>{"x"});
  EXPECT_EQ(g.outputs, std::vector<ValueId>{"cat"});

  const Value& w = g.value("w");
  EXPECT_EQ(w.kind, ValueKind::Parameter);
  EXPECT_EQ(w.target, "fc.weight");
  EXPECT_EQ(w.desc.shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(w.desc.stride, (std::vector<int64_t>{8, 1}));
  EXPECT_EQ(w.desc.dtype, DType::Float32);
  EXPECT_EQ(w.desc.device, "cpu");
  ASSERT_TRUE(g.value("c").scalar.has_value());
  EXPECT_DOUBLE_EQ(*g.value("c").scalar, 0.5);
  EXPECT_FALSE(g.value("x").scalar.has_value());

  const Node& split = g.nodes()[2];
  EXPECT_EQ(split.outputs, (std::vector<ValueId>{"part_0", "part_1"}));
  EXPECT_EQ(split.args[1].kind, Arg::Kind::Constant);
  EXPECT_EQ(split.args[1].constant, 3);

  const Node& cat = g.nodes()[3];
  ASSERT_EQ(cat.args[0].kind, Arg::Kind::TensorList);
  EXPECT_EQ(cat.args[0].tensors.size(), 2u);
  EXPECT_EQ(cat.args[0].tensors[0], std::optional<ValueId>("part_1"));
  EXPECT_EQ(cat.kwargs.at("other").kind, Arg::Kind::Tensor);
  EXPECT_EQ(cat.kwargs.at("other").tensor, "c");
  const json& fill = cat.kwargs.at("fill").constant;
  ASSERT_TRUE(fill.is_number_float());
  EXPECT_TRUE(std::isinf(fill.get<double>()) && fill.get<double>() < 0);
  EXPECT_EQ(cat.kwargs.at("dtype").constant, json({{"dtype", "bfloat16"}}));
  EXPECT_EQ(cat.kwargs.at("device").constant, json({{"device", "cuda:0"}}));
  EXPECT_EQ(cat.kwargs.at("layout").constant, json({{"repr", "torch.strided"}}));
  EXPECT_EQ(cat.kwargs.at("sizes").constant, json::array({1, 2}));
  EXPECT_EQ(cat.kwargs.at("maybe").tensors[1], std::nullopt);
}

TEST(GraphJson, RoundTripIsLossless) {
  const json doc = small_document();
  const json written = graph_to_json(graph_from_json(doc));
  expect_same_document(doc, written);
  EXPECT_EQ(written, graph_to_json(graph_from_json(written)));
}

TEST(GraphJson, RoundTripKeepsNonFiniteScalarsAttrsAndOrigin) {
  json doc = small_document();
  doc["values"][3]["scalar"] = "-inf";
  doc["nodes"][1]["attrs"] = {{"activation", "relu"}};
  doc["nodes"][1]["origin"] = {"relu_a", "relu_b"};
  Graph g = graph_from_json(doc);
  ASSERT_TRUE(g.value("c").scalar.has_value());
  EXPECT_TRUE(std::isinf(*g.value("c").scalar));
  EXPECT_EQ(g.nodes()[1].attrs.at("activation"), "relu");
  EXPECT_EQ(g.nodes()[1].origin, (std::vector<NodeId>{"relu_a", "relu_b"}));
  expect_same_document(doc, graph_to_json(g));
}

TEST(GraphJson, WriterListsInputsFirstAndIntermediatesInNodeOrder) {
  const json written = graph_to_json(graph_from_json(small_document()));
  std::vector<std::string> ids;
  for (const json& v : written.at("values")) ids.push_back(v.at("id"));
  EXPECT_EQ(ids.front(), "x");
  EXPECT_EQ(std::vector<std::string>(ids.end() - 5, ids.end()),
            (std::vector<std::string>{"linear", "relu", "part_0", "part_1", "cat"}));
}

TEST(GraphJson, UnknownOpsStayOpaqueNodes) {
  json doc = small_document();
  doc["nodes"][1]["target"] = "mylib.fused_thing.default";
  doc["nodes"][1]["args"].push_back({{"repr", "<object at 0x1>"}});
  Graph g = graph_from_json(doc);
  const Node& opaque = g.nodes()[1];
  EXPECT_EQ(opaque.target, "mylib.fused_thing.default");
  EXPECT_EQ(opaque.args.size(), 2u);
  EXPECT_EQ(opaque.outputs, std::vector<ValueId>{"relu"});
  expect_same_document(doc, graph_to_json(g));
}

TEST(GraphJson, UnknownTorchDtypeIsKeptAsUnknown) {
  json doc = small_document();
  doc["values"][0]["dtype"] = "float8_e4m3fn";
  EXPECT_EQ(graph_from_json(doc).value("x").desc.dtype, DType::Unknown);
}

// --- malformed documents ----------------------------------------------------------------------

struct Malformed {
  std::string name;
  std::function<void(json&)> damage;
  std::string where;
  std::string problem;  // expected substring of the problem
};

class GraphJsonMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(GraphJsonMalformed, ReportsPlaceAndProblem) {
  const Malformed& c = GetParam();
  json doc = small_document();
  c.damage(doc);
  try {
    graph_from_json(doc);
    FAIL() << "accepted a malformed document (" << c.name << ")";
  } catch (const GraphFormatError& error) {
    EXPECT_EQ(error.where(), c.where);
    EXPECT_NE(error.problem().find(c.problem), std::string::npos) << "problem: " << error.problem();
    EXPECT_EQ(std::string(error.what()), c.where + ": " + error.problem());
  }
}

const Malformed kMalformed[] = {
    {"not_an_object", [](json& d) { d = json::array(); }, "document", "expected a JSON object, got an array"},
    {"wrong_schema", [](json& d) { d["schema"] = "fact.graph/2"; }, "schema", "unsupported schema 'fact.graph/2'"},
    {"schema_not_string", [](json& d) { d["schema"] = 1; }, "schema", "expected a string, got an integer"},
    {"missing_schema", [](json& d) { d.erase("schema"); }, "document", "missing field 'schema'"},
    {"missing_nodes", [](json& d) { d.erase("nodes"); }, "document", "missing field 'nodes'"},
    {"missing_outputs", [](json& d) { d.erase("outputs"); }, "document", "missing field 'outputs'"},
    {"source_not_object", [](json& d) { d["source"] = "x"; }, "source", "expected an object, got a string"},
    {"values_not_array", [](json& d) { d["values"] = json::object(); }, "values", "expected an array, got an object"},
    {"value_not_object", [](json& d) { d["values"][2] = 5; }, "values[2]", "expected an object, got an integer"},
    {"value_missing_id", [](json& d) { d["values"][2].erase("id"); }, "values[2]", "missing field 'id'"},
    {"duplicate_value_id", [](json& d) { d["values"][2]["id"] = "x"; }, "values[2] (id 'x').id",
     "duplicate value id 'x' (first at values[0])"},
    {"unknown_kind", [](json& d) { d["values"][1]["kind"] = "weight"; }, "values[1] (id 'w').kind",
     "unknown kind 'weight'"},
    {"shape_not_array", [](json& d) { d["values"][0]["shape"] = 4; }, "values[0] (id 'x').shape",
     "expected an array of integers, got an integer"},
    {"shape_element_string", [](json& d) { d["values"][0]["shape"][1] = "8"; }, "values[0] (id 'x').shape[1]",
     "expected an integer, got a string"},
    {"shape_element_fraction", [](json& d) { d["values"][0]["shape"][0] = 4.5; }, "values[0] (id 'x').shape[0]",
     "expected an integer, got a number"},
    {"negative_size", [](json& d) { d["values"][0]["shape"][0] = -4; }, "values[0] (id 'x').shape[0]",
     "negative size -4"},
    {"stride_rank", [](json& d) { d["values"][1]["stride"] = {1}; }, "values[1] (id 'w').stride",
     "rank 1 differs from the shape's rank 2"},
    {"missing_stride", [](json& d) { d["values"][1].erase("stride"); }, "values[1] (id 'w')", "missing field 'stride'"},
    {"dtype_not_string", [](json& d) { d["values"][0]["dtype"] = 32; }, "values[0] (id 'x').dtype",
     "expected a string, got an integer"},
    {"dtype_misspelled", [](json& d) { d["values"][0]["dtype"] = "Float 32"; }, "values[0] (id 'x').dtype",
     "invalid dtype 'Float 32'"},
    {"missing_device", [](json& d) { d["values"][0].erase("device"); }, "values[0] (id 'x')", "missing field 'device'"},
    {"parameter_without_target", [](json& d) { d["values"][1].erase("target"); }, "values[1] (id 'w')",
     "missing field 'target'"},
    {"scalar_bad_string", [](json& d) { d["values"][3]["scalar"] = "infinity"; }, "values[3] (id 'c').scalar",
     "expected a number or \"inf\", \"-inf\", \"nan\", got 'infinity'"},
    {"nodes_not_array", [](json& d) { d["nodes"] = "linear"; }, "nodes", "expected an array, got a string"},
    {"node_missing_target", [](json& d) { d["nodes"][1].erase("target"); }, "nodes[1] (id 'relu')",
     "missing field 'target'"},
    {"duplicate_node_id", [](json& d) { d["nodes"][1]["id"] = "linear"; }, "nodes[1] (id 'linear').id",
     "duplicate node id 'linear' (first at nodes[0])"},
    {"args_not_array", [](json& d) { d["nodes"][1]["args"] = json::object(); }, "nodes[1] (id 'relu').args",
     "expected an array, got an object"},
    {"unknown_value", [](json& d) { d["nodes"][1]["args"][0]["tensor"] = "v9"; }, "nodes[1] (id 'relu').args[0]",
     "unknown value 'v9'"},
    {"not_topological", [](json& d) { std::swap(d["nodes"][0], d["nodes"][1]); }, "nodes[0] (id 'relu').args[0]",
     "value 'linear' is used before nodes[1] produces it"},
    {"own_output_as_input", [](json& d) { d["nodes"][1]["args"][0]["tensor"] = "relu"; },
     "nodes[1] (id 'relu').args[0]", "value 'relu' is used before nodes[1] produces it"},
    {"never_produced", [](json& d) { d["nodes"][3]["outputs"] = json::array(); d["outputs"] = {"linear"}; d["nodes"].push_back(
         {{"id", "late"}, {"target", "aten.neg.default"}, {"args", json::array({json{{"tensor", "cat"}}})},
          {"outputs", json::array()}}); },
     "nodes[4] (id 'late').args[0]", "value 'cat' is an intermediate that no node produces"},
    {"arg_two_keys", [](json& d) { d["nodes"][1]["args"][0]["const"] = 1; }, "nodes[1] (id 'relu').args[0]",
     "expected an object with exactly one key"},
    {"arg_not_object", [](json& d) { d["nodes"][1]["args"][0] = "linear"; }, "nodes[1] (id 'relu').args[0]",
     "got a string"},
    {"arg_unknown_form", [](json& d) { d["nodes"][1]["args"][0] = {{"value", "linear"}}; },
     "nodes[1] (id 'relu').args[0]", "unknown argument form 'value'"},
    {"tensor_not_string", [](json& d) { d["nodes"][1]["args"][0] = {{"tensor", 3}}; },
     "nodes[1] (id 'relu').args[0].tensor", "expected a value id (string), got an integer"},
    {"tensors_element_unknown", [](json& d) { d["nodes"][3]["args"][0]["tensors"][1] = "nope"; },
     "nodes[3] (id 'cat').args[0].tensors[1]", "unknown value 'nope'"},
    {"const_object", [](json& d) { d["nodes"][2]["args"][1] = {{"const", {{"a", 1}}}}; },
     "nodes[2] (id 'split').args[1].const", "expected a number, bool, string, null or a list of those"},
    {"float_bad", [](json& d) { d["nodes"][3]["kwargs"]["fill"] = {{"float", "-infinity"}}; },
     "nodes[3] (id 'cat').kwargs.fill.float", "expected \"inf\", \"-inf\" or \"nan\""},
    {"kwarg_unknown_value", [](json& d) { d["nodes"][3]["kwargs"]["other"] = {{"tensor", "missing"}}; },
     "nodes[3] (id 'cat').kwargs.other", "unknown value 'missing'"},
    {"kwargs_not_object", [](json& d) { d["nodes"][0]["kwargs"] = json::array(); }, "nodes[0] (id 'linear').kwargs",
     "expected an object, got an array"},
    {"arg_dtype_bad", [](json& d) { d["nodes"][3]["kwargs"]["dtype"] = {{"dtype", "BF16!"}}; },
     "nodes[3] (id 'cat').kwargs.dtype.dtype", "invalid dtype 'BF16!'"},
    {"output_unknown", [](json& d) { d["nodes"][1]["outputs"][0] = "ghost"; }, "nodes[1] (id 'relu').outputs[0]",
     "unknown value 'ghost'"},
    {"output_is_parameter", [](json& d) { d["nodes"][1]["outputs"][0] = "w"; }, "nodes[1] (id 'relu').outputs[0]",
     "value 'w' is a parameter, not an intermediate"},
    {"output_produced_twice", [](json& d) { d["nodes"][1]["outputs"][0] = "linear"; },
     "nodes[1] (id 'relu').outputs[0]", "value 'linear' is already produced by nodes[0]"},
    {"missing_outputs_field", [](json& d) { d["nodes"][0].erase("outputs"); }, "nodes[0] (id 'linear')",
     "missing field 'outputs'"},
    {"origin_not_strings", [](json& d) { d["nodes"][0]["origin"] = {1}; }, "nodes[0] (id 'linear').origin[0]",
     "expected a string, got an integer"},
    {"input_unknown", [](json& d) { d["inputs"] = {"y"}; }, "inputs[0]", "unknown value 'y'"},
    {"input_not_input_kind", [](json& d) { d["inputs"] = {"x", "w"}; }, "inputs[1]",
     "value 'w' is a parameter, not an input"},
    {"input_twice", [](json& d) { d["inputs"] = {"x", "x"}; }, "inputs[1]", "value 'x' is listed twice"},
    {"output_not_string", [](json& d) { d["outputs"] = {7}; }, "outputs[0]", "expected a value id (string), got an integer"},
    {"graph_output_unknown", [](json& d) { d["outputs"] = {"cat", "zzz"}; }, "outputs[1]", "unknown value 'zzz'"},
};

INSTANTIATE_TEST_SUITE_P(Cases, GraphJsonMalformed, ::testing::ValuesIn(kMalformed),
                         [](const ::testing::TestParamInfo<Malformed>& info) { return info.param.name; });

// --- files ------------------------------------------------------------------------------------

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / ("fact_test_graph_json_" + name);
  std::ofstream(path) << text;
  return path;
}

TEST(GraphJsonFile, MissingFileNamesThePath) {
  const auto path = kFixtures / "does_not_exist.json";
  try {
    load_graph(path);
    FAIL() << "loaded a missing file";
  } catch (const GraphFormatError& error) {
    EXPECT_EQ(error.where(), path.string());
    EXPECT_NE(error.problem().find("cannot open"), std::string::npos);
  }
}

TEST(GraphJsonFile, InvalidJsonIsReported) {
  const auto path = write_temp("bad.json", "{\"schema\": \"fact.graph/1\", ");
  try {
    load_graph(path);
    FAIL() << "loaded invalid JSON";
  } catch (const GraphFormatError& error) {
    EXPECT_EQ(error.where(), path.string());
    EXPECT_EQ(error.problem().rfind("invalid JSON", 0), 0u) << error.problem();
  }
  std::filesystem::remove(path);
}

TEST(GraphJsonFile, ValidationErrorsArePrefixedWithThePath) {
  json doc = small_document();
  doc["nodes"][1]["args"][0]["tensor"] = "v9";
  const auto path = write_temp("unknown.json", doc.dump());
  try {
    load_graph(path);
    FAIL() << "loaded a malformed file";
  } catch (const GraphFormatError& error) {
    EXPECT_EQ(error.where(), path.string() + ": nodes[1] (id 'relu').args[0]");
    EXPECT_EQ(error.problem(), "unknown value 'v9'");
  }
  std::filesystem::remove(path);
}

// --- committed capture fixtures (tests/data/graphs/regenerate.py) -----------------------------

std::map<std::string, int> target_counts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) ++counts[n.target];
  return counts;
}

json read_json(const std::filesystem::path& path) {
  std::ifstream file(path);
  return json::parse(file);
}

class GraphJsonFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphJsonFixture, LoadsAndRoundTrips) {
  const auto path = kFixtures / GetParam();
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  Graph g = load_graph(path);
  EXPECT_FALSE(g.nodes().empty());
  EXPECT_FALSE(g.inputs.empty());
  EXPECT_FALSE(g.outputs.empty());
  EXPECT_EQ(g.source.at("capture"), "torch.export");
  expect_same_document(read_json(path), graph_to_json(g));
}

INSTANTIATE_TEST_SUITE_P(Committed, GraphJsonFixture,
                         ::testing::Values("linear_relu.json", "bmm.json", "matmul_transposed.json",
                                           "mingpt_block_fp32.json", "mingpt_block_bf16.json",
                                           "llama_block_bf16.json"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.find('.'));
                           return name;
                         });

TEST(GraphJsonFixtures, MinGptBlockHasTheExpectedStructure) {
  Graph g = load_graph(kFixtures / "mingpt_block_bf16.json");
  auto counts = target_counts(g);
  EXPECT_EQ(counts["aten.linear.default"], 4);
  EXPECT_EQ(counts["aten.matmul.default"], 2);
  EXPECT_EQ(counts["aten.softmax.int"], 1);
  EXPECT_EQ(counts["aten.tanh.default"], 1);
  EXPECT_EQ(counts["aten.layer_norm.default"], 2);
  EXPECT_EQ(counts["aten.masked_fill.Scalar"], 1);

  const Value& x = g.value(g.inputs.at(0));
  EXPECT_EQ(x.desc.shape, (std::vector<int64_t>{128, 512, 768}));
  EXPECT_EQ(x.desc.dtype, DType::BFloat16);
  EXPECT_EQ(g.value("p_attn_c_attn_weight").target, "attn.c_attn.weight");
  EXPECT_EQ(g.value("p_attn_c_attn_weight").desc.shape, (std::vector<int64_t>{2304, 768}));
  EXPECT_EQ(g.value("b_attn_bias").kind, ValueKind::Buffer);

  for (const Node& n : g.nodes()) {
    if (n.target == "aten.split.Tensor") EXPECT_EQ(n.outputs.size(), 3u);
    if (n.target == "aten.masked_fill.Scalar") {
      const json& fill = n.args.at(2).constant;
      ASSERT_TRUE(fill.is_number_float());
      EXPECT_TRUE(std::isinf(fill.get<double>()) && fill.get<double>() < 0);
    }
  }
}

TEST(GraphJsonFixtures, LlamaBlockHasTheExpectedStructure) {
  Graph g = load_graph(kFixtures / "llama_block_bf16.json");
  auto counts = target_counts(g);
  EXPECT_EQ(counts["aten.linear.default"], 7);
  EXPECT_EQ(counts["aten.matmul.default"], 2);
  EXPECT_EQ(counts["aten.silu.default"], 1);
  EXPECT_EQ(counts["aten.softmax.int"], 1);
  EXPECT_EQ(counts["aten.repeat_interleave.self_int"], 2);
  EXPECT_EQ(g.value("p_mlp_gate_proj_weight").desc.shape, (std::vector<int64_t>{14336, 4096}));
  EXPECT_EQ(g.value("p_attn_k_proj_weight").desc.shape, (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(g.value(g.outputs.at(0)).desc.shape, (std::vector<int64_t>{4, 2048, 4096}));
}

}  // namespace
}  // namespace fact::graph
