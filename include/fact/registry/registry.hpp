// The pattern registry: FACT's T(rule, dtype, arch) as data, with provenance (docs/agent.md).
//
// Each entry says how to realize one rule's matches at one dtype on one architecture: a
// built-in template (the registered rules and realizers; generated, never stored) or a kernel
// source (agent- or user-written, stored), with the parameter space, the reference semantics
// it was verified against (the captured fragment, registry/semantics.hpp), the shapes and
// devices it was verified and tuned on with the results, the record of the gates it passed,
// and where it came from (built in; or model, endpoint, prompt and attempt of the agent that
// wrote it). Architectures: "sm_90a" (Hopper CUDA kernels) and "host" (libraries compiled for
// the CPU path).
//
// Stored entries live in <dir>/registry.json (schema fact.registry/1):
//   {"schema", "version": N (+1 per change), "entries": [<entry>...],
//    "history": [{"version", "op": "add"|"revise"|"remove", "id", "date"}...]}
// written atomically (temporary file + rename) under an exclusive lock on registry.json.lock,
// so concurrent writers never lose each other's changes.
//
// No kernel enters without the gates: add() refuses a source entry whose "gates" record did
// not pass, or was made for another source text or another reference semantics. Running the
// gates is the caller's business (python/fact/agent/gates.py; `fact registry add|import` and
// the synthesis loop run them before they call add()).
//
// Nor does a kernel slower than PyTorch: a source entry's latest timing record ("tuned": ms,
// the same-run PyTorch baseline, speedup, on the device it was measured on) must show it at
// least as fast as PyTorch (speedup >= 1), else add() refuses it and an entry stored before
// this rule is never classified nor planned (speed_problem). The one exception is written in
// the entry itself: "speed_override": {"reason": "..."} (tests of something else than speed);
// the plan and every report that uses such an entry say so.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/discover/discover.hpp"
#include "fact/discover/match.hpp"
#include "fact/graph/graph.hpp"

namespace fact::registry {

inline constexpr const char* kRegistrySchema = "fact.registry/1";
inline constexpr const char* kExportSchema = "fact.registry.export/1";
inline constexpr const char* kHostArch = "host";
inline constexpr const char* kHopperArch = "sm_90a";

// An entry as its JSON document. Fields (docs/agent.md has the full schema): id, rule,
// scope ("rule": matches of exactly this rule; "pattern": any rule of the pattern folder),
// pattern, kind, dtype, arch, origin ("builtin" | "agent" | "user"), revision, created,
// updated, template | source, param_space, reference, verified[], tuned[], gates, provenance.
struct Entry {
  nlohmann::json doc;
  std::string id() const { return doc.value("id", std::string()); }
  std::string rule() const { return doc.value("rule", std::string()); }
  std::string dtype() const { return doc.value("dtype", std::string()); }
  std::string arch() const { return doc.value("arch", std::string()); }
  std::string origin() const { return doc.value("origin", std::string()); }
  bool builtin() const { return origin() == "builtin"; }
  bool has_source() const { return doc.contains("source") && doc.at("source").is_object(); }
  bool has_template() const { return doc.contains("template") && doc.at("template").is_object(); }
};

// $FACT_REGISTRY_DIR, else <fact cache root>/registry.
std::filesystem::path default_registry_dir();

// The built-in entries: one per (registered rule with a template, floating dtype, sm_90a),
// scope "pattern", realized by the registered realizers of the problems' kinds. On the host
// arch they realize through their kind's float64 host reference (fact_reference_call).
std::vector<Entry> builtin_entries();

// Why `doc` cannot be stored (a missing field, an unknown origin or arch, a source entry
// without a passing gate record for exactly its source text and reference semantics), or
// nullopt when it can.
std::optional<std::string> entry_problem(const nlohmann::json& doc);

// Why a source entry may not realize matches for speed: no timing record, or its latest one
// slower than the PyTorch baseline it was measured against ("slower than PyTorch on <device>:
// 0.12 ms vs 0.05 ms (0.42x)"); nullopt when it is fast enough, when it is a built-in entry, or
// when it carries a speed_override with a reason (speed_override_reason).
std::optional<std::string> speed_problem(const nlohmann::json& doc);

// The reason of an entry's "speed_override" ("" when it has none).
std::string speed_override_reason(const nlohmann::json& doc);

// The id a stored entry gets: "<rule>/<dtype>/<arch>/<first 12 hex digits of the source's
// SHA-256>".
std::string entry_id(const nlohmann::json& doc);

class Registry {
 public:
  explicit Registry(std::filesystem::path dir = default_registry_dir());
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path file() const { return dir_ / "registry.json"; }

  // The stored version (0 before the first change).
  int version() const;
  // Built-in entries first (when asked), then the stored ones in id order. An unreadable
  // registry.json reads as empty (and is moved aside by the next write).
  std::vector<Entry> entries(bool include_builtin = true) const;
  // The entry with exactly this id, else the only one whose id starts with it.
  std::optional<Entry> find(const std::string& id) const;
  // Stores `doc` (its id, revision, created/updated filled in; an entry with the same id is
  // revised: its verified/tuned records are kept and the new ones appended) and returns it.
  // Throws std::invalid_argument with entry_problem's reason.
  Entry add(nlohmann::json doc);
  // Removes a stored entry; false when there is none. Throws std::invalid_argument for a
  // built-in one.
  bool remove(const std::string& id);
  // {"schema": kExportSchema, "registry_version", "entries": [...]}: the stored entries with
  // these ids (all when empty), built-ins when asked.
  nlohmann::json export_entries(const std::vector<std::string>& ids = {}, bool include_builtin = false) const;

  // Entries that cover matches of `rule` (owned by pattern folder `pattern`) at `dtype` on
  // `arch`: scope "rule" with that rule, scope "pattern" with that pattern; on the host arch
  // built-in template entries of sm_90a too (their kinds' host reference runs them there).
  std::vector<Entry> lookup(const std::string& rule, const std::string& pattern, const std::string& dtype,
                            const std::string& arch) const;

 private:
  nlohmann::json load(bool* malformed = nullptr) const;
  std::filesystem::path dir_;
};

// Registry::lookup over a list of entries already read.
std::vector<Entry> covering(const std::vector<Entry>& entries, const std::string& rule, const std::string& pattern,
                            const std::string& dtype, const std::string& arch);

// The class of `match` against `candidates` (Registry::lookup for it):
//   REUSE  a stored source entry was verified on exactly this subgraph (same semantics hash:
//          same computation, shapes and strides), or a built-in template has a tuned
//          configuration for every call (options.tuned_keys);
//   ADAPT  a source entry verified on the same computation at other shapes (same structure
//          hash), or a built-in template realizes the match with new parameters;
//   NEW    nothing in the registry realizes it: no entry; or the rule's match is pending (no
//          template) or declined (its template cannot take it) and no source entry computes it.
// The reason says which entry and why, in words for the report.
discover::DiscoverOptions::Classified classify(const discover::Match& match, const graph::Graph& captured,
                                               const std::vector<Entry>& candidates,
                                               const discover::DiscoverOptions& options);

// The stored source entry a match may be planned with (REUSE or same-structure ADAPT for this
// arch, not refused by speed_problem), or nullopt.
std::optional<Entry> plannable_source(const discover::Match& match, const Registry& registry,
                                      const std::string& arch);

// A one-line summary for tables: "template gemm_epilogue (built in)", "source c++ host, agent
// (gpt-x, attempt 3)".
std::string describe_realization(const Entry& entry);

}  // namespace fact::registry
