// The pattern registry (include/fact/registry): reference semantics and their hashes, built-in
// entries, what add() refuses (no kernel without a passing gate record for exactly its source
// and semantics, nor one slower than PyTorch), revisions and versions under concurrent writers,
// and the REUSE / ADAPT / NEW
// classification of discovery's matches; the engine's compiler-diagnostic parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "fact/discover/discover.hpp"
#include "fact/discover/rule.hpp"
#include "fact/engine/agent.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/registry/registry.hpp"
#include "fact/registry/semantics.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/sha256.hpp"

namespace fact::registry {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

graph::Graph fixture(const std::string& name) {
  return graph::load_graph(std::string(FACT_SOURCE_DIR) + "/tests/data/graphs/" + name);
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("fact_registry_test_" + name + "_" + util::unique_suffix());
  fs::create_directories(dir);
  return dir;
}

// The pending (NEW) match of the minGPT block: its causal attention.
struct AttentionCase {
  graph::Graph captured = fixture("mingpt_block_fp32.json");
  discover::DiscoverOptions options;
  discover::Discovery discovery;
  const discover::Match* attention = nullptr;

  AttentionCase() {
    options.arch = kHostArch;
    // In precision native no template computes float32 attention (the float32 kernels run
    // strict and tf32), so its match stays NEW: the registry's case.
    options.precision = core::PrecisionMode::Native;
    discovery = discover::discover(captured, options);
    for (const auto& m : discovery.matches) {
      if (m.pattern == "attention") attention = &m;  // (a test may name a pattern)
    }
  }
};

const char* kSource = "extern \"C\" int fact_entry(const void*, void*, unsigned long*, void*) { return 0; }\n";

// A timing record of the gates: the kernel `speedup` times as fast as PyTorch's 0.05 ms.
json timing(double speedup) {
  return {{"device", "host CPU (test)"}, {"ms", 0.05 / speedup}, {"baseline", {{"name", "PyTorch eager (same run)"}, {"ms", 0.05}}},
          {"speedup", speedup}, {"timer", "test"}};
}

json source_entry(const Semantics& semantics, const std::string& rule, const std::string& source = kSource) {
  return {{"rule", rule},
          {"dtype", "float32"},
          {"arch", kHostArch},
          {"origin", "agent"},
          {"kind", "subgraph"},
          {"source", {{"text", source}, {"language", "c++"}, {"device", "host"}, {"abi", "subgraph"}, {"entry", "fact_entry"}}},
          {"reference", {{"fragment", semantics.fragment}, {"precision", "native"}}},
          {"verified", json::array({{{"semantics_hash", semantics.hash}, {"device", "test"}, {"rel_err", 1e-8}, {"tolerance", 1e-5}}})},
          {"gates", {{"passed", true}, {"source_sha256", util::sha256_hex(source)}, {"semantics_hash", semantics.hash}}},
          {"tuned", json::array({timing(2.0)})},
          {"provenance", {{"by", "agent"}, {"model", "scripted"}, {"attempt", 3}}}};
}

TEST(Semantics, FragmentHoldsTheReplacedNodesAndTheirOutsideReads) {
  AttentionCase c;
  ASSERT_NE(c.attention, nullptr);
  const Semantics s = semantics_of(c.captured, c.attention->nodes, c.attention->outputs);
  EXPECT_EQ(s.fragment.at("nodes").size(), c.attention->nodes.size());
  EXPECT_EQ(s.fragment.at("outputs"), json(c.attention->outputs));
  const auto inputs = s.fragment.at("inputs").get<std::vector<std::string>>();
  EXPECT_FALSE(inputs.empty());
  for (const auto& v : s.fragment.at("values")) {
    if (std::find(inputs.begin(), inputs.end(), v.at("id").get<std::string>()) != inputs.end())
      EXPECT_NE(v.at("kind"), "intermediate") << "read from outside: " << v.dump();
  }
  EXPECT_EQ(s.hash.size(), 64u);
  EXPECT_EQ(semantics_of_fragment(s.fragment).hash, s.hash);
}

TEST(Semantics, HashIgnoresNamesButNotShapes) {
  AttentionCase c;
  const Semantics s = semantics_of(c.captured, c.attention->nodes, c.attention->outputs);
  // Rename every value and node: the same computation in another model.
  std::string text = s.fragment.dump();
  for (const auto& v : s.fragment.at("values")) {
    const std::string id = "\"" + v.at("id").get<std::string>() + "\"";
    for (size_t at = text.find(id); at != std::string::npos; at = text.find(id, at + id.size() + 4))
      text.replace(at, id.size(), "\"zz_" + id.substr(1));
  }
  const Semantics renamed = semantics_of_fragment(json::parse(text));
  EXPECT_EQ(renamed.hash, s.hash);
  // Other shapes: another exact hash, the same structure.
  json reshaped = s.fragment;
  for (auto& v : reshaped["values"]) {
    if (!v["shape"].empty()) v["shape"][0] = v["shape"][0].get<int64_t>() * 2;
  }
  const Semantics other = semantics_of_fragment(reshaped);
  EXPECT_NE(other.hash, s.hash);
  EXPECT_EQ(other.structure_hash, s.structure_hash);
}

TEST(Builtin, OneEntryPerTemplateRuleAndFloatingDtype) {
  size_t rules = 0;
  for (const auto* rule : discover::RuleRegistry::global().by_priority()) rules += rule->has_template;
  const auto entries = builtin_entries();
  EXPECT_EQ(entries.size(), rules * 3);
  for (const auto& e : entries) {
    EXPECT_TRUE(e.builtin());
    EXPECT_TRUE(e.has_template());
    EXPECT_EQ(e.arch(), kHopperArch);
    EXPECT_EQ(e.doc.at("scope"), "pattern");
    EXPECT_FALSE(e.doc.at("template").at("realizers").empty());
  }
}

TEST(Add, RefusesWhatDidNotPassTheGates) {
  AttentionCase c;
  const Semantics s = semantics_of(c.captured, c.attention->nodes, c.attention->outputs);
  Registry reg(fresh_dir("refuse"));
  json doc = source_entry(s, c.attention->rule);
  json no_gates = doc;
  no_gates.erase("gates");
  EXPECT_THROW(reg.add(no_gates), std::invalid_argument);
  json failed = doc;
  failed["gates"]["passed"] = false;
  EXPECT_THROW(reg.add(failed), std::invalid_argument);
  json other_source = doc;
  other_source["source"]["text"] = std::string(kSource) + "// changed after the gates ran\n";
  EXPECT_THROW(reg.add(other_source), std::invalid_argument);
  json other_semantics = doc;
  other_semantics["gates"]["semantics_hash"] = std::string(64, '0');
  EXPECT_THROW(reg.add(other_semantics), std::invalid_argument);
  json wrong_device = doc;
  wrong_device["source"]["device"] = "cuda";
  EXPECT_THROW(reg.add(wrong_device), std::invalid_argument);
  json builtin = doc;
  builtin["origin"] = "builtin";
  EXPECT_THROW(reg.add(builtin), std::invalid_argument);
  EXPECT_EQ(reg.version(), 0);
  EXPECT_EQ(reg.entries(false).size(), 0u);
  EXPECT_NO_THROW(reg.add(doc));
}

TEST(Add, StoresRevisesExportsAndRemoves) {
  AttentionCase c;
  const Semantics s = semantics_of(c.captured, c.attention->nodes, c.attention->outputs);
  Registry reg(fresh_dir("revise"));
  const Entry first = reg.add(source_entry(s, c.attention->rule));
  EXPECT_EQ(first.doc.at("revision"), 1);
  EXPECT_EQ(first.id(), c.attention->rule + "/float32/host/" + util::sha256_hex(kSource).substr(0, 12));
  EXPECT_EQ(reg.version(), 1);
  json again = source_entry(s, c.attention->rule);
  again["verified"].push_back({{"semantics_hash", "other"}, {"device", "second machine"}});
  const Entry second = reg.add(again);
  EXPECT_EQ(second.doc.at("revision"), 2);
  EXPECT_EQ(second.doc.at("verified").size(), 2u);
  EXPECT_EQ(reg.version(), 2);
  ASSERT_TRUE(reg.find(first.id().substr(0, 20)).has_value());
  EXPECT_EQ(reg.export_entries().at("entries").size(), 1u);
  EXPECT_THROW(reg.remove(builtin_entries().front().id()), std::invalid_argument);
  EXPECT_TRUE(reg.remove(first.id()));
  EXPECT_FALSE(reg.remove(first.id()));
  EXPECT_EQ(reg.version(), 3);
  const json stored = json::parse(util::read_file(reg.file()));
  ASSERT_EQ(stored.at("history").size(), 3u);
  EXPECT_EQ(stored.at("history")[1].at("op"), "revise");
  EXPECT_EQ(stored.at("history")[2].at("op"), "remove");
}

TEST(Add, ConcurrentWritersLoseNothing) {
  AttentionCase c;
  const Semantics s = semantics_of(c.captured, c.attention->nodes, c.attention->outputs);
  const fs::path dir = fresh_dir("concurrent");
  std::vector<std::thread> writers;
  for (int i = 0; i < 6; ++i) {
    writers.emplace_back([&, i] {
      Registry(dir).add(source_entry(s, c.attention->rule, std::string(kSource) + "// writer " + std::to_string(i) + "\n"));
    });
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(Registry(dir).entries(false).size(), 6u);
  EXPECT_EQ(Registry(dir).version(), 6);
}

TEST(Classify, NewThenReuseOnceAVerifiedKernelIsStoredAdaptOnOtherShapes) {
  AttentionCase c;
  const discover::Match& m = *c.attention;
  Registry reg(fresh_dir("classify"));
  auto classify_now = [&](const discover::Match& match) {
    return classify(match, c.captured, reg.lookup(match.rule, match.pattern, "float32", kHostArch), c.options);
  };
  EXPECT_EQ(classify_now(m).classification, discover::Classification::New);
  const Semantics s = semantics_of(c.captured, m.nodes, m.outputs);
  const Entry stored = reg.add(source_entry(s, m.rule));
  const auto reuse = classify_now(m);
  EXPECT_EQ(reuse.classification, discover::Classification::Reuse) << reuse.reason;
  EXPECT_EQ(reuse.entry, stored.id());
  EXPECT_NE(reuse.reason.find("exactly this subgraph"), std::string::npos);
  EXPECT_EQ(plannable_source(m, reg, kHostArch).has_value(), false) << "only after discovery set registry_entry";
  discover::Match planned = m;
  planned.registry_entry = reuse.entry;
  EXPECT_TRUE(plannable_source(planned, reg, kHostArch).has_value());
  EXPECT_FALSE(plannable_source(planned, reg, kHopperArch).has_value()) << "a host kernel is not a Hopper kernel";

  // The same computation verified only on other shapes: ADAPT (the gates run again).
  Registry other(fresh_dir("classify_adapt"));
  json reshaped = s.fragment;
  for (auto& v : reshaped["values"]) {
    if (!v["shape"].empty()) v["shape"][0] = v["shape"][0].get<int64_t>() * 2;
  }
  other.add(source_entry(semantics_of_fragment(reshaped), m.rule));
  const auto adapt = classify(m, c.captured, other.lookup(m.rule, m.pattern, "float32", kHostArch), c.options);
  EXPECT_EQ(adapt.classification, discover::Classification::Adapt) << adapt.reason;

  // A kernel verified in another precision mode does not serve this one.
  discover::DiscoverOptions tf32 = c.options;
  tf32.precision = core::PrecisionMode::Tf32;
  EXPECT_EQ(classify(m, c.captured, reg.lookup(m.rule, m.pattern, "float32", kHostArch), tf32).classification,
            discover::Classification::New);
}

TEST(Speed, NothingSlowerThanPyTorchIsAddedClassifiedOrPlanned) {
  AttentionCase c;
  const discover::Match& m = *c.attention;
  const Semantics s = semantics_of(c.captured, m.nodes, m.outputs);
  Registry reg(fresh_dir("speed"));
  json slow = source_entry(s, m.rule);
  slow["tuned"] = json::array({timing(2.0), timing(0.005)});  // the latest record decides
  try {
    reg.add(slow);
    ADD_FAILURE() << "a kernel slower than PyTorch was added";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not faster than PyTorch: slower than PyTorch on host CPU (test)"),
              std::string::npos) << e.what();
  }
  json untimed = source_entry(s, m.rule);
  untimed.erase("tuned");
  EXPECT_THROW(reg.add(untimed), std::invalid_argument);
  json empty_override = slow;
  empty_override["speed_override"] = json::object();
  EXPECT_THROW(reg.add(empty_override), std::invalid_argument);
  EXPECT_EQ(reg.entries(false).size(), 0u);

  // With a written override it enters, and classification names the override.
  json overridden = slow;
  overridden["speed_override"] = {{"reason", "a test of classification"}};
  const Entry stored = reg.add(overridden);
  const auto reuse = classify(m, c.captured, reg.lookup(m.rule, m.pattern, "float32", kHostArch), c.options);
  EXPECT_EQ(reuse.classification, discover::Classification::Reuse) << reuse.reason;
  EXPECT_NE(reuse.reason.find("speed override (not timed faster than PyTorch): a test of classification"),
            std::string::npos) << reuse.reason;

  // Stored before the rule (written directly, no override): neither classified nor planned.
  json file = json::parse(util::read_file(reg.file()));
  file["entries"][0].erase("speed_override");
  util::write_file_atomically(reg.file(), file.dump());
  const auto now = classify(m, c.captured, reg.lookup(m.rule, m.pattern, "float32", kHostArch), c.options);
  EXPECT_EQ(now.classification, discover::Classification::New) << now.reason;
  EXPECT_NE(now.reason.find("entry " + stored.id() + " is not used: slower than PyTorch"), std::string::npos)
      << now.reason;
  discover::Match planned = m;
  planned.registry_entry = stored.id();
  EXPECT_FALSE(plannable_source(planned, reg, kHostArch).has_value());
  EXPECT_TRUE(speed_problem(file["entries"][0]).has_value());
  EXPECT_FALSE(speed_problem(source_entry(s, m.rule)).has_value());
}

TEST(Classify, TemplatesAreAdaptUntilTunedAndCoverTheHostThroughTheReference) {
  AttentionCase c;
  c.options.precision = core::PrecisionMode::Strict;  // the block's templates accept in strict
  const discover::Discovery strict = discover::discover(c.captured, c.options);
  const discover::Match* gemm = nullptr;
  for (const auto& m : strict.matches) {
    if (m.status == discover::MatchStatus::Accepted && m.pattern != "attention") gemm = &m;
  }
  ASSERT_NE(gemm, nullptr);
  Registry reg(fresh_dir("templates"));
  const auto candidates = reg.lookup(gemm->rule, gemm->pattern, "float32", kHostArch);
  ASSERT_FALSE(candidates.empty());
  auto result = classify(*gemm, c.captured, candidates, c.options);
  EXPECT_EQ(result.classification, discover::Classification::Adapt);
  EXPECT_EQ(result.entry.rfind("builtin/", 0), 0u);
  discover::DiscoverOptions tuned = c.options;
  tuned.key_of = [](const Problem&, core::PrecisionMode) { return std::string("k"); };
  tuned.tuned_keys = {"k"};
  EXPECT_EQ(classify(*gemm, c.captured, candidates, tuned).classification, discover::Classification::Reuse);
}

// A pattern's other rule listed first (attention's decline-reporting rule before `attention`)
// does not become the template the report names: the match's own rule's entry does.
TEST(Classify, TheMatchsOwnRuleNamesTheTemplate) {
  AttentionCase c;
  c.options.precision = core::PrecisionMode::Strict;  // the block's templates accept in strict
  const discover::Discovery strict = discover::discover(c.captured, c.options);
  const discover::Match* gemm = nullptr;
  for (const auto& m : strict.matches) {
    if (m.status == discover::MatchStatus::Accepted && m.pattern != "attention") gemm = &m;
  }
  ASSERT_NE(gemm, nullptr);
  Registry reg(fresh_dir("own_rule"));
  auto candidates = reg.lookup(gemm->rule, gemm->pattern, "float32", kHostArch);
  ASSERT_FALSE(candidates.empty());
  // The match as the rule of its pattern's template found it (a bgemm is covered by the
  // pattern's template entry, whose rule is another).
  discover::Match match = *gemm;
  match.rule = candidates.front().rule();
  const std::string own_id = candidates.front().id();
  const auto all = reg.entries(true);
  const auto other = std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.rule() != match.rule; });
  ASSERT_NE(other, all.end());
  candidates.insert(candidates.begin(), *other);
  const auto result = classify(match, c.captured, candidates, c.options);
  EXPECT_EQ(result.entry, own_id);
  EXPECT_NE(result.reason.find("built-in template " + match.rule + " "), std::string::npos) << result.reason;
}

// A match whose rule is a display name ("attention_causal") is named after its pattern's
// accepting template ("attention"), not the decline-reporting rule listed first.
TEST(Classify, AMatchNamedForItsMaskTakesItsPatternsTemplate) {
  AttentionCase c;
  c.options.precision = core::PrecisionMode::Strict;  // the float32 attention kernel accepts
  const discover::Discovery strict = discover::discover(c.captured, c.options);
  const discover::Match* attention = nullptr;
  for (const auto& m : strict.matches) {
    if (m.pattern == "attention") attention = &m;
  }
  ASSERT_NE(attention, nullptr);
  ASSERT_EQ(attention->status, discover::MatchStatus::Accepted) << attention->reason;
  EXPECT_EQ(attention->rule, "attention_causal");
  Registry reg(fresh_dir("display_rule"));
  const auto candidates = reg.lookup(attention->rule, attention->pattern, "float32", kHostArch);
  ASSERT_GE(candidates.size(), 2u);
  const auto result = classify(*attention, c.captured, candidates, c.options);
  EXPECT_EQ(result.classification, discover::Classification::Adapt);
  EXPECT_NE(result.reason.find("built-in template attention "), std::string::npos) << result.reason;
}

TEST(Diagnostics, CompilerLinesBecomeFileLineAndMessage) {
  const std::string log =
      "/x/.staging/abc/source.cu:12:5: error: 'foo' was not declared in this scope\n"
      "/x/.staging/abc/source.cu:3:1: note: declared here\n"
      "/x/.staging/abc/source.cu(41): error: identifier \"bar\" is undefined\n"
      "ptxas /tmp/t.ptx, line 9; warning : Potential Performance Loss: wgmma.mma_async instructions are serialized (C7510)\n"
      "/usr/bin/ld: lib.o: in function `f': undefined reference to `g'\n"
      "compilation terminated.\n";
  const auto d = engine::parse_diagnostics(log, "kernel.cu");
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[0].at("file"), "kernel.cu");
  EXPECT_EQ(d[0].at("line"), 12);
  EXPECT_EQ(d[0].at("column"), 5);
  EXPECT_EQ(d[0].at("severity"), "error");
  EXPECT_EQ(d[1].at("severity"), "note");
  EXPECT_EQ(d[2].at("line"), 41);
  EXPECT_EQ(d[2].at("message"), "identifier \"bar\" is undefined");
  EXPECT_EQ(d[3].at("severity"), "error") << "C7510 fails FACT builds";
  EXPECT_NE(d[4].at("message").get<std::string>().find("undefined reference"), std::string::npos);
}

}  // namespace
}  // namespace fact::registry
