#include "fact/registry/registry.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "fact/build_info.hpp"
#include "fact/discover/rule.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/registry/semantics.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/cache_root.hpp"
#include "fact/util/file_lock.hpp"
#include "fact/util/sha256.hpp"

namespace fact::registry {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kHistoryKept = 1000;
const char* const kBuiltinDtypes[] = {"float32", "bfloat16", "float16"};

json realizers_json() {
  json out = json::array();
  const auto& registry = realize::RealizerRegistry::global();
  for (const auto& pattern : registry.patterns()) {
    const realize::Realizer* r = registry.find(pattern);
    out.push_back({{"pattern", r->pattern()}, {"kind", r->kind()}, {"priority", r->priority()}});
  }
  return out;
}

bool string_field(const json& doc, const char* key) {
  return doc.contains(key) && doc.at(key).is_string() && !doc.at(key).get<std::string>().empty();
}

// Appends the records of `more` that `into` does not hold yet.
void merge_records(json& into, const json& more) {
  if (!into.is_array()) into = json::array();
  if (!more.is_array()) return;
  for (const auto& record : more) {
    if (std::find(into.begin(), into.end(), record) == into.end()) into.push_back(record);
  }
}

std::string semantics_hash_of(const Entry& entry) {
  const json& reference = entry.doc.value("reference", json::object());
  return reference.value("semantics_hash", std::string());
}

bool verified_on(const Entry& entry, const std::string& hash) {
  for (const auto& record : entry.doc.value("verified", json::array())) {
    if (record.value("semantics_hash", std::string()) == hash) return true;
  }
  return false;
}

// ", used under a speed override: <reason>" for an entry that carries one, else "".
std::string overridden(const Entry& entry);

std::string provenance_words(const Entry& entry) {
  const json& p = entry.doc.value("provenance", json::object());
  std::string words = entry.origin();
  std::vector<std::string> parts;
  if (p.contains("model") && p.at("model").is_string()) parts.push_back(p.at("model").get<std::string>());
  if (p.contains("attempt") && p.at("attempt").is_number()) parts.push_back("attempt " + std::to_string(p.at("attempt").get<int>()));
  if (!parts.empty()) {
    words += " (";
    for (size_t i = 0; i < parts.size(); ++i) words += (i ? ", " : "") + parts[i];
    words += ")";
  }
  return words;
}

}  // namespace

fs::path default_registry_dir() {
  if (const char* dir = std::getenv("FACT_REGISTRY_DIR"); dir && *dir) return dir;
  return util::cache_root() / "registry";
}

std::vector<Entry> builtin_entries() {
  std::vector<Entry> out;
  const json realizers = realizers_json();
  for (const discover::Rule* rule : discover::RuleRegistry::global().by_priority()) {
    if (!rule->has_template) continue;
    for (const char* dtype : kBuiltinDtypes) {
      json doc = {
          {"id", "builtin/" + rule->name + "/" + dtype + "/" + kHopperArch},
          {"rule", rule->name},
          {"scope", "pattern"},
          {"pattern", rule->pattern},
          {"kind", nullptr},
          {"dtype", dtype},
          {"arch", kHopperArch},
          {"origin", "builtin"},
          {"revision", 1},
          {"template",
           {{"rule", rule->name},
            {"pattern", rule->pattern},
            {"realizers", realizers},
            {"selection", "each call's problem goes to the highest-priority realizer of its kind that "
                          "does not decline it; on the host arch the kind's float64 host reference "
                          "runs it (fact_reference_call)"}}},
          {"param_space",
           {{"spaces", {"default", "exhaustive"}},
            {"how", "the realizer's pruned space per problem class (fact tune --space default|exhaustive); "
                    "tuned choices live in the tuning database"}}},
          {"reference",
           {{"semantics", "the captured subgraph of each match; every composed replacement is checked "
                          "against it in float64 (fact.verify)"}}},
          {"verified", json::array()},
          {"tuned", json::array()},
          {"provenance", {{"by", "builtin"}, {"fact_version", build_info::kVersion}}}};
      out.push_back(Entry{std::move(doc)});
    }
  }
  return out;
}

std::string entry_id(const json& doc) {
  const std::string text = doc.value("source", json::object()).value("text", std::string());
  return doc.value("rule", std::string()) + "/" + doc.value("dtype", std::string()) + "/" +
         doc.value("arch", std::string()) + "/" + util::sha256_hex(text).substr(0, 12);
}

std::string speed_override_reason(const json& doc) {
  if (!doc.contains("speed_override") || !doc.at("speed_override").is_object()) return "";
  return doc.at("speed_override").value("reason", std::string());
}

namespace {
std::string overridden(const Entry& entry) {
  const std::string reason = speed_override_reason(entry.doc);
  return reason.empty() ? "" : "; used under a speed override (not timed faster than PyTorch): " + reason;
}
}  // namespace

std::optional<std::string> speed_problem(const json& doc) {
  if (!doc.contains("source") || !doc.at("source").is_object()) return std::nullopt;
  if (!speed_override_reason(doc).empty()) return std::nullopt;
  const json tuned = doc.value("tuned", json::array());
  if (!tuned.is_array() || tuned.empty() || !tuned.back().is_object())
    return std::string("no timing record against PyTorch: its speed is unknown (the gates' timing check records it)");
  const json& last = tuned.back();
  const json speedup = last.value("speedup", json());
  if (!speedup.is_number())
    return std::string("its timing record has no speedup over the PyTorch baseline");
  if (speedup.get<double>() >= 1.0) return std::nullopt;
  const json baseline = last.value("baseline", json::object());
  std::ostringstream words;
  words.precision(4);
  words << "slower than PyTorch on " << last.value("device", std::string("?")) << ": ";
  if (last.contains("ms") && last.at("ms").is_number() && baseline.is_object() && baseline.contains("ms") &&
      baseline.at("ms").is_number())
    words << last.at("ms").get<double>() << " ms vs " << baseline.at("ms").get<double>() << " ms ";
  words << "(" << speedup.get<double>() << "x)";
  return words.str();
}

std::optional<std::string> entry_problem(const json& doc) {
  if (!doc.is_object()) return "an entry is a JSON object";
  for (const char* key : {"rule", "dtype", "arch", "origin"}) {
    if (!string_field(doc, key)) return std::string("no \"") + key + "\"";
  }
  const std::string origin = doc.at("origin").get<std::string>();
  if (origin == "builtin") return "built-in entries come from the engine's rules and realizers, not from a file";
  if (origin != "agent" && origin != "user") return "origin '" + origin + "' is not agent or user";
  const std::string arch = doc.at("arch").get<std::string>();
  if (arch != kHostArch && arch != kHopperArch) return "arch '" + arch + "' is not host or sm_90a";
  const std::string scope = doc.value("scope", std::string("rule"));
  if (scope != "rule" && scope != "pattern") return "scope '" + scope + "' is not rule or pattern";
  if (!doc.contains("source") || !doc.at("source").is_object())
    return "a stored entry carries its kernel source (templates are built in)";
  const json& source = doc.at("source");
  for (const char* key : {"text", "language", "device", "entry", "abi"}) {
    if (!string_field(source, key)) return std::string("source: no \"") + key + "\"";
  }
  const std::string device = source.at("device").get<std::string>();
  if ((arch == kHostArch) != (device == "host"))
    return "source.device '" + device + "' does not fit arch '" + arch + "' (host sources for host, cuda for sm_90a)";
  if (!doc.contains("reference") || !doc.at("reference").is_object() ||
      !doc.at("reference").contains("fragment") || !doc.at("reference").at("fragment").is_object())
    return "reference: no captured fragment (the semantics it was verified against)";
  Semantics semantics;
  try {
    semantics = semantics_of_fragment(doc.at("reference").at("fragment"));
  } catch (const std::exception& e) {
    return std::string("reference.fragment is malformed: ") + e.what();
  }
  const json& reference = doc.at("reference");
  if (reference.contains("semantics_hash") && reference.at("semantics_hash") != semantics.hash)
    return "reference.semantics_hash does not match its fragment";
  if (!doc.contains("gates") || !doc.at("gates").is_object()) return "no gate record: the kernel was not verified";
  const json& gates = doc.at("gates");
  if (gates.value("passed", false) != true) return "the gate record says the kernel did not pass";
  if (gates.value("source_sha256", std::string()) != util::sha256_hex(source.at("text").get<std::string>()))
    return "the gate record was made for another source text";
  if (gates.value("semantics_hash", std::string()) != semantics.hash)
    return "the gate record was made for another reference semantics";
  if (!doc.contains("verified") || !doc.at("verified").is_array() || doc.at("verified").empty())
    return "no verification record (shape, device, error)";
  if (!doc.contains("provenance") || !doc.at("provenance").is_object()) return "no provenance";
  if (doc.contains("speed_override") &&
      (!doc.at("speed_override").is_object() || speed_override_reason(doc).empty()))
    return "speed_override: an object with a \"reason\" (why a kernel slower than PyTorch may be used)";
  if (auto slow = speed_problem(doc))
    return "it is not faster than PyTorch: " + *slow +
           " (a registered kernel must be at least as fast as the PyTorch it replaces)";
  return std::nullopt;
}

Registry::Registry(fs::path dir) : dir_(std::move(dir)) {}

json Registry::load(bool* malformed) const {
  if (malformed) *malformed = false;
  const json empty = {{"schema", kRegistrySchema}, {"version", 0}, {"entries", json::array()}, {"history", json::array()}};
  std::error_code ec;
  if (!fs::exists(file(), ec)) return empty;
  try {
    json doc = json::parse(util::read_file(file()));
    if (doc.value("schema", std::string()) != kRegistrySchema || !doc.contains("entries") ||
        !doc.at("entries").is_array())
      throw std::runtime_error("not a " + std::string(kRegistrySchema) + " document");
    return doc;
  } catch (const std::exception&) {
    if (malformed) *malformed = true;
    return empty;
  }
}

int Registry::version() const { return load().value("version", 0); }

std::vector<Entry> Registry::entries(bool include_builtin) const {
  std::vector<Entry> out;
  if (include_builtin) out = builtin_entries();
  std::vector<Entry> stored;
  const json registry = load();  // (a range-for over load().at(...) would outlive the temporary)
  for (const auto& doc : registry.at("entries")) stored.push_back(Entry{doc});
  std::sort(stored.begin(), stored.end(), [](const Entry& a, const Entry& b) { return a.id() < b.id(); });
  out.insert(out.end(), stored.begin(), stored.end());
  return out;
}

std::optional<Entry> Registry::find(const std::string& id) const {
  std::optional<Entry> prefix;
  size_t prefixed = 0;
  for (const auto& entry : entries(true)) {
    if (entry.id() == id) return entry;
    if (!id.empty() && entry.id().rfind(id, 0) == 0) {
      prefix = entry;
      ++prefixed;
    }
  }
  return prefixed == 1 ? prefix : std::nullopt;
}

Entry Registry::add(json doc) {
  if (auto problem = entry_problem(doc)) throw std::invalid_argument("registry: cannot add the entry: " + *problem);
  const Semantics semantics = semantics_of_fragment(doc.at("reference").at("fragment"));
  doc["reference"]["semantics_hash"] = semantics.hash;
  doc["reference"]["structure_hash"] = semantics.structure_hash;
  if (!doc.contains("scope")) doc["scope"] = "rule";
  doc["source"]["sha256"] = util::sha256_hex(doc.at("source").at("text").get<std::string>());
  doc["id"] = entry_id(doc);
  fs::create_directories(dir_);
  util::FileLock lock = util::FileLock::acquire(dir_ / "registry.json.lock");
  bool malformed = false;
  json registry = load(&malformed);
  if (malformed) {
    const fs::path aside = file().string() + ".malformed-" + util::unique_suffix();
    std::error_code ec;
    fs::rename(file(), aside, ec);
    std::cerr << "fact: the registry " << file() << " was unreadable; moved aside to " << aside << "\n";
  }
  const std::string now = util::utc_timestamp();
  const std::string id = doc.at("id").get<std::string>();
  json& entries = registry["entries"];
  std::string op = "add";
  auto existing = std::find_if(entries.begin(), entries.end(), [&](const json& e) { return e.value("id", std::string()) == id; });
  if (existing != entries.end()) {
    op = "revise";
    doc["revision"] = existing->value("revision", 1) + 1;
    doc["created"] = existing->value("created", now);
    json verified = existing->value("verified", json::array());
    merge_records(verified, doc.value("verified", json::array()));
    doc["verified"] = verified;
    json tuned = existing->value("tuned", json::array());
    merge_records(tuned, doc.value("tuned", json::array()));
    doc["tuned"] = tuned;
  } else {
    doc["revision"] = 1;
    doc["created"] = now;
    if (!doc.contains("tuned")) doc["tuned"] = json::array();
  }
  doc["updated"] = now;
  if (existing != entries.end()) {
    *existing = doc;
  } else {
    entries.push_back(doc);
  }
  registry["version"] = registry.value("version", 0) + 1;
  doc["registry_version"] = registry["version"];
  json& history = registry["history"];
  if (!history.is_array()) history = json::array();
  history.push_back({{"version", registry["version"]}, {"op", op}, {"id", id}, {"date", now}});
  while (history.size() > kHistoryKept) history.erase(history.begin());
  util::write_file_atomically(file(), registry.dump(2) + "\n");
  return Entry{doc};
}

bool Registry::remove(const std::string& id) {
  for (const auto& entry : builtin_entries()) {
    if (entry.id() == id) throw std::invalid_argument("registry: " + id + " is built in (it comes from the engine's rules and realizers)");
  }
  if (!fs::exists(file())) return false;
  util::FileLock lock = util::FileLock::acquire(dir_ / "registry.json.lock");
  json registry = load();
  json& entries = registry["entries"];
  const auto before = entries.size();
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [&](const json& e) { return e.value("id", std::string()) == id; }),
                entries.end());
  if (entries.size() == before) return false;
  registry["version"] = registry.value("version", 0) + 1;
  if (!registry["history"].is_array()) registry["history"] = json::array();
  registry["history"].push_back({{"version", registry["version"]}, {"op", "remove"}, {"id", id}, {"date", util::utc_timestamp()}});
  util::write_file_atomically(file(), registry.dump(2) + "\n");
  return true;
}

json Registry::export_entries(const std::vector<std::string>& ids, bool include_builtin) const {
  json out = json::array();
  for (const auto& entry : entries(include_builtin)) {
    if (!ids.empty() && std::find(ids.begin(), ids.end(), entry.id()) == ids.end()) continue;
    out.push_back(entry.doc);
  }
  return {{"schema", kExportSchema}, {"registry_version", version()}, {"fact_version", build_info::kVersion},
          {"date", util::utc_timestamp()}, {"entries", out}};
}

std::vector<Entry> covering(const std::vector<Entry>& entries, const std::string& rule, const std::string& pattern,
                            const std::string& dtype, const std::string& arch) {
  std::vector<Entry> out;
  for (const auto& entry : entries) {
    const std::string scope = entry.doc.value("scope", std::string("rule"));
    const bool covers = scope == "pattern" ? entry.doc.value("pattern", std::string()) == pattern : entry.rule() == rule;
    if (!covers || entry.dtype() != dtype) continue;
    const bool on_arch = entry.arch() == arch || (arch == kHostArch && entry.builtin() && entry.has_template());
    if (on_arch) out.push_back(entry);
  }
  return out;
}

std::vector<Entry> Registry::lookup(const std::string& rule, const std::string& pattern, const std::string& dtype,
                                    const std::string& arch) const {
  return covering(entries(true), rule, pattern, dtype, arch);
}

discover::DiscoverOptions::Classified classify(const discover::Match& m, const graph::Graph& captured,
                                               const std::vector<Entry>& candidates,
                                               const discover::DiscoverOptions& options) {
  using discover::Classification;
  const std::string where = "(" + m.rule + ", " + std::string(graph::dtype_name(m.dtype)) + ", " + options.arch + ")";
  std::vector<const Entry*> sources, templates;
  std::string slow;  // the first source entry left out for its speed, and why
  for (const auto& e : candidates) {
    // A kernel was verified under one precision contract (its tolerance); it serves runs in that mode.
    const std::string mode = e.doc.value("reference", json::object()).value("precision", std::string());
    if (e.has_source() && !mode.empty() && mode != core::precision_name(options.precision)) continue;
    if (e.has_source()) {
      if (auto problem = speed_problem(e.doc)) {
        if (slow.empty()) slow = "entry " + e.id() + " is not used: " + *problem;
        continue;
      }
    }
    (e.has_source() ? sources : templates).push_back(&e);
  }
  const std::string also = slow.empty() ? "" : "; " + slow;
  if (!sources.empty()) {
    try {
      const Semantics semantics = semantics_of(captured, m.nodes, m.outputs);
      for (const Entry* e : sources) {
        if (verified_on(*e, semantics.hash))
          return {Classification::Reuse, "entry " + e->id() + " (" + provenance_words(*e) +
                                             ") was verified on exactly this subgraph and shape" + overridden(*e),
                  e->id()};
      }
      for (const Entry* e : sources) {
        if (e->doc.value("reference", json::object()).value("structure_hash", std::string()) == semantics.structure_hash)
          return {Classification::Adapt, "entry " + e->id() + " (" + provenance_words(*e) +
                                             ") computes this subgraph and was verified on other shapes; "
                                             "it must pass the gates on these" + overridden(*e),
                  e->id()};
      }
    } catch (const std::exception&) {
      // no semantics for this match: only templates can cover it
    }
  }
  if (!templates.empty() && m.status == discover::MatchStatus::Accepted) {
    // The match's own rule's entry when it has one (a pattern's other rules, e.g. one that only
    // reports a decline, would name the wrong template).
    // A match whose rule is a display name (attention's "attention_causal") takes the entry named
    // after its pattern (the rule that accepts, "attention"), not the first one listed.
    auto own = std::find_if(templates.begin(), templates.end(), [&](const Entry* t) { return t->rule() == m.rule; });
    if (own == templates.end()) {
      own = std::find_if(templates.begin(), templates.end(), [&](const Entry* t) { return t->rule() == m.pattern; });
    }
    const Entry* e = own != templates.end() ? *own : templates.front();
    const bool tuned = m.status == discover::MatchStatus::Accepted && !m.problems.empty() && options.key_of &&
                       std::all_of(m.problems.begin(), m.problems.end(), [&](const Problem& p) {
                         return options.tuned_keys.count(options.key_of(p, options.precision)) != 0;
                       });
    if (tuned)
      return {Classification::Reuse, "built-in template " + e->rule() + ": the tuning database holds a configuration for every call",
              e->id()};
    return {Classification::Adapt, "built-in template " + e->rule() + " realizes it with new parameters (the tuning database has no "
                                       "configuration for " + std::string(m.problems.size() == 1 ? "its call" : "some of its calls") + ")",
            e->id()};
  }
  if (!sources.empty())
    return {Classification::New, "entries exist for " + where + " but none computes this subgraph (e.g. " +
                                     sources.front()->id() + "); a new kernel is needed" + also,
            ""};
  if (m.status == discover::MatchStatus::Pending)
    return {Classification::New,
            "no template realizes " + m.rule + " and the registry has no kernel for " + where + also, ""};
  if (m.status == discover::MatchStatus::Declined && !templates.empty())
    return {Classification::New,
            "the template declines it (" + m.reason + ") and the registry has no kernel for " + where + also, ""};
  return {Classification::New, "no registry entry for " + where + also, ""};
}

std::optional<Entry> plannable_source(const discover::Match& m, const Registry& registry, const std::string& arch) {
  std::vector<Entry> sources;
  for (auto& e : registry.lookup(m.rule, m.pattern, std::string(graph::dtype_name(m.dtype)), arch)) {
    if (e.has_source() && !speed_problem(e.doc)) sources.push_back(std::move(e));
  }
  if (sources.empty()) return std::nullopt;
  for (const auto& e : sources) {
    if (e.id() == m.registry_entry) return e;
  }
  return std::nullopt;
}

std::string describe_realization(const Entry& entry) {
  if (entry.has_template()) return "template " + entry.doc.at("template").value("rule", entry.rule()) + " (built in)";
  if (entry.has_source()) {
    const json& s = entry.doc.at("source");
    return "source " + s.value("language", std::string("?")) + " " + s.value("device", std::string("?")) + ", " +
           provenance_words(entry);
  }
  return "-";
}

}  // namespace fact::registry
