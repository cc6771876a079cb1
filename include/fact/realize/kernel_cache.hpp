// The content-addressed kernel cache: one folder per kernel key (the key
// hashes the rendered source, compiler command line, CUTLASS and generator versions, arch).
//
//   <root>/<key>/lib.so       the built shared library
//   <root>/<key>/source.cu    the source it was built from
//   <root>/<key>/build.log    compiler output
//   <root>/<key>/meta.json    spec, entry symbol, command line, compiler, timings, lib checksum
//   <root>/<key>/failed.json  instead of lib.so + meta.json when the build failed: reason,
//                             compiler output, command line, compiler identity
//   <root>/.locks/<key>.lock  flock taken while a process builds or replaces the entry
//   <root>/.staging/          builds in progress (same filesystem, so commits are renames)
//
// Entries appear by renaming a complete staging folder into place, so a reader never sees a
// half-written entry. An entry whose lib.so is missing or does not match the checksum in
// meta.json is reported Corrupt, and the build driver rebuilds it.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/util/file_lock.hpp"

namespace fact::realize {

// FACT's cache root: $FACT_CACHE_DIR, else $XDG_CACHE_HOME/fact, else ~/.cache/fact.
std::filesystem::path fact_cache_root();
// The kernel cache inside it: <root>/kernels.
std::filesystem::path default_kernel_cache_dir();

// A build that did not produce a usable library. Stored as failed.json.
struct FailedBuild {
  std::string key;
  std::string reason;             // one line: "nvcc exit 1", "ptxas C7510: wgmma serialized", ...
  std::vector<std::string> command;  // the compiler command line
  std::string compiler;           // identity of the compiler (its --version text), may be empty
  std::string log;                // compiler output (truncated to its last 64 KiB)
  int exit_code = -1;
  std::string date;               // UTC ISO 8601
  nlohmann::json spec;            // KernelSpec JSON (or null)

  nlohmann::json to_json() const;
  static FailedBuild from_json(const nlohmann::json& j);
};

struct CachedKernel {
  std::string key;
  std::filesystem::path library;  // <entry>/lib.so
  std::filesystem::path source;   // <entry>/source.cu
  std::filesystem::path log;      // <entry>/build.log
  nlohmann::json meta;            // meta.json
};

enum class EntryState {
  Missing,  // no entry
  Built,    // lib.so present and matching its checksum
  Failed,   // failed.json present
  Corrupt,  // something present but unusable: `problem` says what
};
std::string_view entry_state_name(EntryState s);

struct EntryLookup {
  EntryState state = EntryState::Missing;
  std::string problem;                 // for Corrupt
  std::optional<CachedKernel> kernel;  // for Built
  std::optional<FailedBuild> failure;  // for Failed
};

class KernelCache {
 public:
  explicit KernelCache(std::filesystem::path root = default_kernel_cache_dir());

  const std::filesystem::path& root() const { return root_; }
  // Throws std::invalid_argument unless the key is a plain file name ([A-Za-z0-9._-], no
  // leading dot, at most 200 characters).
  std::filesystem::path entry_dir(const std::string& key) const;
  std::filesystem::path lock_path(const std::string& key) const;

  // Reads and checks the entry (the lib.so checksum included). Never throws for a broken entry.
  EntryLookup lookup(const std::string& key) const;

  // The per-key lock that serializes building / replacing / removing an entry.
  util::FileLock lock(const std::string& key) const;
  std::optional<util::FileLock> try_lock(const std::string& key) const;

  // A fresh, empty staging folder for building `key` (under <root>/.staging).
  std::filesystem::path make_staging_dir(const std::string& key) const;

  // Installs a staging folder holding lib.so, source.cu and build.log as the entry for `key`:
  // writes meta.json (`meta` plus key, lib_sha256, lib_bytes, built_at), replaces whatever
  // entry was there, and returns the committed entry. The caller must hold lock(key).
  // Throws std::runtime_error when lib.so is missing from the staging folder.
  CachedKernel commit_built(const std::string& key, const std::filesystem::path& staging,
                            nlohmann::json meta) const;
  // Installs a staging folder (source.cu, build.log, whatever else it holds) as a failed entry
  // with failed.json. The caller must hold lock(key).
  void commit_failed(const std::string& key, const std::filesystem::path& staging,
                     const FailedBuild& failure) const;
  // Removes the entry (caller holds lock(key)); no-op when absent.
  void remove(const std::string& key) const;

  // Keys of all entries present (any state), sorted.
  std::vector<std::string> keys() const;

 private:
  void replace_entry(const std::string& key, const std::filesystem::path& staging) const;
  std::filesystem::path root_;
};

}  // namespace fact::realize
