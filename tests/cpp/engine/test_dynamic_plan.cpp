// Planning a declared dynamic range (docs/dynamic_shapes.md) on the host path: the decisive check
// is that at sizes that were neither samples nor bucket edges, every call of the dynamic plan
// (its bucket's image with the patches evaluated, its polynomial shapes, strides and element
// offsets) equals the call a static plan of the graph at those sizes writes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "fact/core/size_expr.hpp"
#include "fact/engine/dynamic_plan.hpp"
#include "fact/engine/engine.hpp"
#include "fact/engine/size_fit.hpp"
#include "fact/graph/concretize.hpp"
#include "fact/util/console.hpp"

namespace fact::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json value(const std::string& id, const std::string& kind, json shape, json stride, const std::string& dtype,
           const std::string& target = "") {
  json v = {{"id", id}, {"kind", kind}, {"shape", std::move(shape)}, {"stride", std::move(stride)},
            {"dtype", dtype}, {"device", "cpu"}};
  if (!target.empty()) v["target"] = target;
  return v;
}

json node(const std::string& id, const std::string& target, json args, const std::string& out, json kwargs = json::object()) {
  return {{"id", id}, {"target", target}, {"args", std::move(args)}, {"kwargs", std::move(kwargs)}, {"outputs", {out}}};
}

json tensor(const std::string& id) { return {{"tensor", id}}; }

json document(json symbols, json values, json nodes, json inputs, json outputs) {
  return {{"schema", "fact.graph/1"},
          {"source", {{"module", "Dynamic"}, {"capture", "torch.export"}}},
          {"symbols", std::move(symbols)},
          {"values", std::move(values)},
          {"nodes", std::move(nodes)},
          {"inputs", std::move(inputs)},
          {"outputs", std::move(outputs)}};
}

// x [batch, seq, 256] -> linear(256 -> 1024) -> gelu(tanh) -> linear(1024 -> 256).
json mlp_document() {
  const std::string dt = "bfloat16";
  return document(
      json::parse(R"([{"name": "batch", "min": 1, "max": 16, "hint": 2, "multiple": 1, "typical": []},
                      {"name": "seq", "min": 1, "max": 64, "hint": 8, "multiple": 1, "typical": [24]}])"),
      {value("x", "input", {"batch", "seq", 256}, {"256*seq", 256, 1}, dt),
       value("w1", "parameter", {1024, 256}, {256, 1}, dt, "fc.weight"),
       value("b1", "parameter", {1024}, {1}, dt, "fc.bias"),
       value("w2", "parameter", {256, 1024}, {1024, 1}, dt, "proj.weight"),
       value("b2", "parameter", {256}, {1}, dt, "proj.bias"),
       value("linear", "intermediate", {"batch", "seq", 1024}, {"1024*seq", 1024, 1}, dt),
       value("gelu", "intermediate", {"batch", "seq", 1024}, {"1024*seq", 1024, 1}, dt),
       value("linear_1", "intermediate", {"batch", "seq", 256}, {"256*seq", 256, 1}, dt)},
      {node("linear", "aten.linear.default", {tensor("x"), tensor("w1"), tensor("b1")}, "linear"),
       node("gelu", "aten.gelu.default", {tensor("linear")}, "gelu", {{"approximate", {{"const", "tanh"}}}}),
       node("linear_1", "aten.linear.default", {tensor("gelu"), tensor("w2"), tensor("b2")}, "linear_1")},
      {"x"}, {"linear_1"});
}

// Causal SDPA on q, k, v [batch, 4, seq, 64].
json attention_document() {
  const std::string dt = "bfloat16";
  json shape = {"batch", 4, "seq", 64};
  json stride = {"256*seq", "64*seq", 64, 1};
  return document(
      json::parse(R"([{"name": "batch", "min": 1, "max": 8, "hint": 2, "multiple": 1, "typical": []},
                      {"name": "seq", "min": 16, "max": 256, "hint": 64, "multiple": 16, "typical": []}])"),
      {value("q", "input", shape, stride, dt), value("k", "input", shape, stride, dt),
       value("v", "input", shape, stride, dt), value("o", "intermediate", shape, stride, dt)},
      {node("sdpa", "aten.scaled_dot_product_attention.default", {tensor("q"), tensor("k"), tensor("v")}, "o",
            {{"is_causal", {{"const", true}}}})},
      {"q", "k", "v"}, {"o"});
}

// a [4, 32, seq] @ b [4, seq, 48]: the contraction is the symbolic dim; TMA's 16-byte rows
// need seq to be a multiple of 8 (bf16), or the call padded.
json contraction_document(int64_t multiple) {
  const std::string dt = "bfloat16";
  json symbols = json::array({{{"name", "seq"}, {"min", 8}, {"max", 256}, {"hint", 64}, {"multiple", multiple}}});
  return document(symbols,
                  {value("a", "input", {4, 32, "seq"}, {"32*seq", "seq", 1}, dt),
                   value("b", "input", {4, "seq", 48}, {"48*seq", 48, 1}, dt),
                   value("c", "intermediate", {4, 32, 48}, {1536, 48, 1}, dt)},
                  {node("bmm", "aten.bmm.default", {tensor("a"), tensor("b")}, "c")}, {"a", "b"}, {"c"});
}

// a [4, 32, 48] @ b [4, seq, 48]^T -> c [4, 32, seq]: the GEMM's N is seq; D's rows are
// unaligned at odd seq, where another kernel class (D stored without TMA) runs it.
json scores_document(int64_t multiple) {
  const std::string dt = "bfloat16";
  json symbols = json::array({{{"name", "seq"}, {"min", 8}, {"max", 256}, {"hint", 64}, {"multiple", multiple}}});
  return document(symbols,
                  {value("a", "input", {4, 32, 48}, {1536, 48, 1}, dt),
                   value("b", "input", {4, "seq", 48}, {"48*seq", 48, 1}, dt),
                   value("bt", "intermediate", {4, 48, "seq"}, {"48*seq", 1, 48}, dt),
                   value("c", "intermediate", {4, 32, "seq"}, {"32*seq", "seq", 1}, dt)},
                  {node("transpose", "aten.transpose.int", {tensor("b"), {{"const", 1}}, {{"const", 2}}}, "bt"),
                   node("bmm", "aten.bmm.default", {tensor("a"), tensor("bt")}, "c")},
                  {"a", "b"}, {"c"});
}

// Collects the engine's lines.
class RecordingConsole : public util::Console {
 public:
  bool is_terminal() const override { return false; }
  std::vector<std::string> lines_seen;

 protected:
  void emit(Kind kind, std::string_view text) override {
    if (kind == Kind::Line) lines_seen.emplace_back(text);
  }
};

class DynamicPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fact_dynamic_plan_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  PlanRequest request(const json& doc, const std::string& name) {
    PlanRequest r;
    r.graph_document = doc;
    r.out_dir = dir_ / name;
    r.device = "cpu";
    r.use_registry = false;
    r.use_tuning_db = false;
    r.progress = true;
    r.console = &console_;
    return r;
  }

  fs::path dir_;
  RecordingConsole console_;
};

core::SizeAssignment assignment(const json& symbols, const std::vector<int64_t>& sizes) {
  core::SizeAssignment a;
  for (size_t i = 0; i < symbols.size(); ++i) a[symbols[i].at("name").get<std::string>()] = sizes[i];
  return a;
}

std::vector<std::string> names_of(const json& symbols) {
  std::vector<std::string> names;
  for (const auto& s : symbols) names.push_back(s.at("name").get<std::string>());
  return names;
}

// An integer, or the polynomial's value at `at`.
int64_t size_at(const json& size, const std::vector<std::string>& names, const core::SizeAssignment& at) {
  if (size.is_number_integer()) return size.get<int64_t>();
  return core::Poly::from_json(size, names).evaluate(at);
}

std::vector<uint8_t> bytes_of(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

// The image the executor builds for `call` at `at`: its bucket's bytes, each patch written.
std::vector<uint8_t> executor_image(const json& call, const json& symbols, const core::SizeAssignment& at) {
  const std::vector<std::string> names = names_of(symbols);
  std::vector<std::vector<int64_t>> edges;
  std::vector<int64_t> sizes;
  for (const auto& s : symbols) {
    edges.push_back(s.at("edges").get<std::vector<int64_t>>());
    sizes.push_back(at.at(s.at("name").get<std::string>()));
  }
  const json& bucket = call.at("buckets").at(bucket_index(edges, sizes));
  std::vector<uint8_t> bytes = bytes_of(bucket.contains("hex") ? bucket.at("hex").get<std::string>()
                                                              : call.at("args").at("hex").get<std::string>());
  for (const auto& patch : call.at("args").at("patches")) {
    const int64_t v = core::Poly::from_json(patch, names).evaluate(at);
    for (size_t i = 0; i < patch.at("bytes").get<size_t>(); ++i)
      bytes.at(patch.at("offset").get<size_t>() + i) = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
  }
  return bytes;
}

// Every planned replacement of the dynamic plan, evaluated at `sizes`, equals the static plan's.
void expect_matches_static_plan(const json& dynamic, const json& doc, const std::vector<int64_t>& sizes,
                                const PlanRequest& base, const fs::path& out) {
  const json& symbols = dynamic.at("symbols");
  const std::vector<std::string> names = names_of(symbols);
  const core::SizeAssignment at = assignment(symbols, sizes);
  const std::string where = graph::assignment_text(at, names);
  PlanRequest r = base;
  r.graph_document = graph::concretize(doc, at);
  r.out_dir = out;
  r.progress = false;
  const json fixed = make_plan(r).plan;
  size_t compared = 0;
  for (const auto& replacement : dynamic.at("replacements")) {
    if (replacement.at("status") != "planned") continue;
    const json* other = nullptr;
    for (const auto& s : fixed.at("replacements"))
      if (s.at("nodes") == replacement.at("nodes")) other = &s;
    ASSERT_NE(other, nullptr) << where;
    ASSERT_EQ(other->at("status"), "planned") << where << ": " << other->at("reason");
    ASSERT_EQ(other->at("calls").size(), replacement.at("calls").size()) << where;
    for (size_t c = 0; c < replacement.at("calls").size(); ++c) {
      const json& call = replacement.at("calls")[c];
      const json& want = other->at("calls")[c];
      EXPECT_EQ(executor_image(call, symbols, at), bytes_of(want.at("args").at("hex").get<std::string>()))
          << where << " call " << call.at("label");
      for (const char* side : {"operands", "results"}) {
        ASSERT_EQ(call.at(side).size(), want.at(side).size());
        for (size_t t = 0; t < call.at(side).size(); ++t) {
          for (const char* key : {"shape", "stride"}) {
            if (!want.at(side)[t].contains(key)) continue;
            std::vector<int64_t> got;
            for (const auto& size : call.at(side)[t].at(key)) got.push_back(size_at(size, names, at));
            EXPECT_EQ(got, want.at(side)[t].at(key).get<std::vector<int64_t>>()) << where << " " << side << "[" << t << "]." << key;
          }
        }
      }
      const json& pointers = call.at("args").at("pointers");
      ASSERT_EQ(pointers.size(), want.at("args").at("pointers").size());
      for (size_t p = 0; p < pointers.size(); ++p)
        EXPECT_EQ(size_at(pointers[p].at("element_offset"), names, at),
                  want.at("args").at("pointers")[p].at("element_offset").get<int64_t>())
            << where;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0u) << where;
}

TEST(DynamicPlanPieces, SampleSizesAreOddMultiplesNearTheHint) {
  graph::SymbolRange batch{"batch", 1, 256, 64, 1, {}};
  EXPECT_EQ(sample_sizes(batch), (std::vector<int64_t>{65, 67, 69}));
  graph::SymbolRange seq{"seq", 16, 4096, 128, 8, {}};
  EXPECT_EQ(sample_sizes(seq), (std::vector<int64_t>{136, 152, 168}));  // 17*8, 19*8, 21*8
  graph::SymbolRange top{"seq", 8, 72, 72, 8, {}};  // the hint is the maximum: odd multiples below it
  EXPECT_EQ(sample_sizes(top), (std::vector<int64_t>{72, 56, 40}));
  graph::SymbolRange narrow{"n", 4, 5, 4, 1, {}};
  EXPECT_EQ(sample_sizes(narrow), (std::vector<int64_t>{5, 4, 4}));
  graph::SymbolRange fixed{"n", 3, 3, 3, 1, {}};
  EXPECT_EQ(sample_sizes(fixed), (std::vector<int64_t>{3, 3, 3}));
}

TEST(DynamicPlanPieces, EdgesArePowersOfTwoTypicalSizesAndTheMaximum) {
  EXPECT_EQ(bucket_edges({"batch", 1, 256, 64, 1, {}}), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  EXPECT_EQ(bucket_edges({"seq", 16, 4000, 128, 8, {100}}),
            (std::vector<int64_t>{16, 32, 64, 104, 128, 256, 512, 1024, 2048, 4000}));
  // The maximum is no multiple: the last edge is the last multiple inside the range.
  EXPECT_EQ(bucket_edges({"seq", 3, 30, 8, 8, {}}), (std::vector<int64_t>{8, 16, 24}));
  EXPECT_EQ(bucket_edges({"n", 5, 7, 5, 1, {}}), (std::vector<int64_t>{7}));
}

TEST(DynamicPlanPieces, BucketIndexIsRowMajorOverTheEdges) {
  const std::vector<std::vector<int64_t>> edges{{1, 2, 4}, {16, 32}};
  EXPECT_EQ(bucket_index(edges, {1, 16}), 0u);
  EXPECT_EQ(bucket_index(edges, {1, 17}), 1u);   // the last symbol is fastest
  EXPECT_EQ(bucket_index(edges, {2, 1}), 2u);
  EXPECT_EQ(bucket_index(edges, {3, 32}), 5u);   // first edge >= 3 is 4
  EXPECT_THROW(bucket_index(edges, {5, 16}), std::out_of_range);
}

TEST(DynamicPlanPieces, FitRecoversProductsAndRefusesWhatIsNone) {
  const std::vector<std::string> names{"batch", "seq"};
  const std::vector<std::array<int64_t, 2>> sizes{{{3, 5}}, {{7, 11}}};
  auto values = [&](auto f) {
    std::vector<int64_t> v;
    for (size_t mask = 0; mask < 4; ++mask) v.push_back(f(sizes[0][mask & 1], sizes[1][(mask >> 1) & 1]));
    return v;
  };
  auto fit = fit_multilinear(names, sizes, values([](int64_t b, int64_t s) { return 768 * b * s + 4 * s - 2; }));
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->to_expr(), "768*batch*seq + 4*seq - 2");
  EXPECT_FALSE(fit_multilinear(names, sizes, values([](int64_t b, int64_t s) { return (b * s) / 2; })));
  // Equal sizes of one symbol: it does not appear.
  fit = fit_multilinear({"x"}, {{{4, 4}}}, {9, 9});
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->to_expr(), "9");
}

TEST_F(DynamicPlan, MlpImagesEqualStaticPlansAtSizesNeitherSampledNorEdges) {
  const json doc = mlp_document();
  const PlanRequest r = request(doc, "plan");
  const PlanResult result = make_plan(r);
  const json& plan = result.plan;
  ASSERT_TRUE(plan.contains("symbols"));
  EXPECT_EQ(plan["symbols"][0]["edges"], json::parse("[1, 2, 4, 8, 16]"));
  EXPECT_EQ(plan["symbols"][1]["edges"], json::parse("[1, 2, 4, 8, 16, 24, 32, 64]"));
  EXPECT_FALSE(fs::exists(r.out_dir / ".range"));  // the scratch folder is gone
  EXPECT_TRUE(fs::exists(r.out_dir / "discovery.json"));
  size_t planned = 0;
  for (const auto& replacement : plan["replacements"]) {
    if (replacement["status"] != "planned") continue;
    ++planned;
    for (const auto& call : replacement["calls"]) {
      EXPECT_EQ(call["buckets"].size(), 5u * 8u);
      EXPECT_FALSE(call["args"]["patches"].empty()) << call["label"];
      for (const auto& patch : call["args"]["patches"]) {
        EXPECT_TRUE(patch.contains("expr") && patch.contains("poly") && patch.contains("offset") && patch.contains("bytes"));
      }
    }
  }
  EXPECT_GT(planned, 0u) << plan["replacements"].dump(1);
  // The rows of the first GEMM: M = batch*seq, its leading stride constant.
  const json& first = plan["replacements"][0]["calls"][0];
  EXPECT_EQ(first["results"][0]["shape"][0], json::parse(R"({"expr": "batch", "poly": [[1, [1, 0]]]})"));
  EXPECT_EQ(first["results"][0]["stride"][0], json::parse(R"({"expr": "1024*seq", "poly": [[1024, [0, 1]]]})"));
  EXPECT_EQ(plan["inputs"], json::array());  // none given, none written
  // Progress lines name the samples and buckets.
  bool sample_line = false, bucket_line = false;
  for (const auto& line : console_.lines_seen) {
    sample_line |= line.rfind("planning the range: sample 1/", 0) == 0 && line.find("(batch=3, seq=9)") != std::string::npos;
    bucket_line |= line.rfind("planning the range: bucket 40/40 (batch=16, seq=64)", 0) == 0;
  }
  EXPECT_TRUE(sample_line);
  EXPECT_TRUE(bucket_line);

  for (const auto& sizes : std::vector<std::vector<int64_t>>{{13, 37}, {1, 1}, {16, 64}, {6, 23}, {2, 8}}) {
    expect_matches_static_plan(plan, doc, sizes, r, dir_ / "static");
  }
}

// Sets an environment variable for a scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (saved_) ::setenv(name_, saved_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

TEST_F(DynamicPlan, TheRangesKernelsCompileInOneBuildBeforeAnyPlan) {
  // A stand-in compiler: writes an empty library and records what it built.
  const fs::path log = dir_ / "compiles.log";
  const fs::path fake = dir_ / "fake_nvcc";
  fs::create_directories(dir_);
  {
    std::ofstream script(fake);
    script << "#!/bin/sh\n"
              "if [ \"$1\" = --version ]; then echo 'fake nvcc 1'; exit 0; fi\n"
              "out=; prev=\n"
              "for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
              "echo \"$out\" >> '" << log.string() << "'\n"
              ": > \"$out\"\n";
  }
  fs::permissions(fake, fs::perms::owner_all);
  const ScopedEnv nvcc("FACT_NVCC", fake.string());
  const ScopedEnv cache("FACT_CACHE_DIR", (dir_ / "cache").string());
  PlanRequest r = request(mlp_document(), "plan");
  r.compile = true;
  r.device = "cuda";
  const json plan = make_plan(r).plan;

  std::set<std::string> keys;
  for (const auto& [key, kernel] : plan.at("kernels").items()) {
    keys.insert(key);
    // every static plan found its kernels in the cache: the one build made them all
    EXPECT_EQ(kernel.value("status", std::string()), "cached") << kernel.dump();
  }
  ASSERT_FALSE(keys.empty()) << plan.dump(1).substr(0, 2000);
  std::ifstream compiled(log);
  size_t compiles = 0;
  for (std::string line; std::getline(compiled, line);) ++compiles;
  EXPECT_EQ(compiles, keys.size());  // each kernel compiled once
  bool one_build = false;
  for (const auto& line : console_.lines_seen)
    one_build |= line.rfind("planning the range: compiling the " + std::to_string(keys.size()) +
                                " kernel(s) of the hint and 40 bucket tuple(s) in one build", 0) == 0;
  EXPECT_TRUE(one_build);
}

TEST_F(DynamicPlan, InputsGetSymbolicShapes) {
  PlanRequest r = request(contraction_document(8), "plan");
  r.inputs = json::parse(R"([{"shape": [4, 32, 64], "dtype": "torch.bfloat16"},
                             {"shape": [4, 64, 48], "dtype": "torch.bfloat16"}])");
  const json plan = make_plan(r).plan;
  EXPECT_EQ(plan["inputs"][0]["shape"], json::parse(R"([4, 32, {"expr": "seq", "poly": [[1, [1]]]}])"));
  EXPECT_EQ(plan["inputs"][1]["dtype"], "torch.bfloat16");
}

TEST_F(DynamicPlan, AttentionWithSymbolicSequenceEqualsStaticPlans) {
  const json doc = attention_document();
  const PlanRequest r = request(doc, "plan");
  const json plan = make_plan(r).plan;
  size_t planned = 0;
  for (const auto& replacement : plan["replacements"]) planned += replacement["status"] == "planned";
  ASSERT_GT(planned, 0u) << plan["replacements"].dump(1);
  for (const auto& sizes : std::vector<std::vector<int64_t>>{{3, 48}, {1, 16}, {8, 256}, {5, 208}}) {
    expect_matches_static_plan(plan, doc, sizes, r, dir_ / "static");
  }
}

// An unaligned contraction at some sizes of the range (seq = 65) runs zero-padded there: the
// kernel's entry pads K per call (patterns/gemm/README.md, "Alignment: padding"), so one kernel
// class and one argument image form serve the whole range, declared in multiples of 8 or not.
TEST_F(DynamicPlan, AlignmentDependentContractionRunsPaddedOverTheRange) {
  for (int64_t multiple : {1, 8}) {
    const json plan = make_plan(request(contraction_document(multiple), "plan" + std::to_string(multiple))).plan;
    ASSERT_FALSE(plan["replacements"].empty());
    const json& replacement = plan["replacements"][0];
    EXPECT_EQ(replacement["status"], "planned") << replacement["reason"];
  }
}

// One kernel class must serve the whole range: at odd seq the GEMM's D rows are unaligned and
// only the direct-store class runs it, so a range planned at an aligned hint is declined
// naming the class; declared in multiples of 8, one class serves every size.
TEST_F(DynamicPlan, AKernelClassThatChangesInsideTheRangeIsDeclined) {
  const json plan = make_plan(request(scores_document(1), "plan")).plan;
  ASSERT_FALSE(plan["replacements"].empty());
  const json& replacement = plan["replacements"][0];
  EXPECT_EQ(replacement["status"], "declined");
  const std::string reason = replacement["reason"];
  EXPECT_NE(reason.find("needs kernels of class"), std::string::npos) << reason;
  const json aligned = make_plan(request(scores_document(8), "aligned")).plan;
  ASSERT_EQ(aligned["replacements"][0]["status"], "planned") << aligned["replacements"][0]["reason"];
  for (const auto& call : aligned["replacements"][0]["calls"]) EXPECT_FALSE(call.value("kernel_class", "").empty());
}

// x [seq, seq, 256] -> linear: the GEMM's M is seq*seq, of degree two in seq.
TEST_F(DynamicPlan, AFieldOfHigherDegreeIsDeclinedWithItsOffsetAndValues) {
  const std::string dt = "bfloat16";
  const json doc = document(json::parse(R"([{"name": "seq", "min": 1, "max": 64, "hint": 8}])"),
                            {value("x", "input", {"seq", "seq", 256}, {"256*seq", 256, 1}, dt),
                             value("w", "parameter", {512, 256}, {256, 1}, dt, "fc.weight"),
                             value("y", "intermediate", {"seq", "seq", 512}, {"512*seq", 512, 1}, dt)},
                            {node("linear", "aten.linear.default", {tensor("x"), tensor("w")}, "y")}, {"x"}, {"y"});
  const json plan = make_plan(request(doc, "plan")).plan;
  ASSERT_FALSE(plan["replacements"].empty());
  const json& replacement = plan["replacements"][0];
  EXPECT_EQ(replacement["status"], "declined");
  const std::string reason = replacement["reason"];
  EXPECT_NE(reason.find("int field at offset 16 (8 bytes) is not a polynomial of degree <= 1"), std::string::npos) << reason;
  EXPECT_NE(reason.find("81 at seq=9"), std::string::npos) << reason;  // M at a sample
}

TEST_F(DynamicPlan, StaticGraphsPlanAsBefore) {
  json doc = mlp_document();
  doc = graph::concretize(doc, {{"batch", 2}, {"seq", 8}});
  const json plan = make_plan(request(doc, "plan")).plan;
  EXPECT_FALSE(plan.contains("symbols"));
  for (const auto& replacement : plan["replacements"])
    for (const auto& call : replacement["calls"]) {
      EXPECT_FALSE(call.contains("buckets"));
      EXPECT_FALSE(call["args"].contains("patches"));
      EXPECT_TRUE(call["args"].contains("int_fields"));
    }
}

TEST_F(DynamicPlan, BadExpressionsAreRejectedNamingThem) {
  json doc = mlp_document();
  doc["values"][0]["shape"][1] = "seq +";
  try {
    make_plan(request(doc, "plan"));
    FAIL() << "a bad expression was planned";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("size expression 'seq +'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("values[0] (id 'x').shape[1]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fact::engine
