// The build driver: compiles many kernel sources in parallel into the kernel cache
// (pruned ones only). Jobs become one job graph (a build.ninja run by `ninja -k 0`); without
// ninja a thread pool runs the same commands. Every job is keyed by content:
//
//   cached          the cache holds a valid entry for the key: nothing runs
//   built           compiled now and committed to the cache
//   failed          the compiler failed (or ptxas reported C7510 / "Potential Performance
//                   Loss"); recorded as failed.json
//   skipped_failed  a failed.json exists for the key from an earlier run with the same command
//                   line and compiler: not retried unless BuildOptions::retry_failed
//
// Concurrent runs (threads or processes) building overlapping keys are safe: a key is built by
// whoever holds its lock; the others wait for that lock and then take the committed result.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/realize/kernel_cache.hpp"
#include "fact/util/console.hpp"

namespace fact::realize {

// Placeholders in BuildJob::command, replaced by absolute paths inside the staging folder.
inline constexpr std::string_view kSourcePlaceholder = "{source}";  // .../source.cu
inline constexpr std::string_view kOutputPlaceholder = "{output}";  // .../lib.so

struct BuildJob {
  std::string key;                   // content key (cache folder name)
  std::string source;                // the CUDA / C++ source text
  std::string entry_symbol;          // exported entry point (recorded in meta.json)
  nlohmann::json spec;               // KernelSpec JSON (recorded in meta.json / failed.json)
  std::vector<std::string> command;  // compiler argv with {source} / {output} placeholders
  std::string label;                 // readable name for progress and reports (spec name)
};

enum class BuildStatus { Cached, Built, Failed, SkippedFailed };
std::string_view build_status_name(BuildStatus s);  // "cached", "built", "failed", "skipped_failed"

struct BuildOutcome {
  std::string key;
  std::string label;
  BuildStatus status = BuildStatus::Failed;
  std::filesystem::path library;  // lib.so in the cache (cached / built)
  std::filesystem::path log;      // build.log in the cache (may not exist for cached entries)
  std::string reason;             // failed / skipped_failed: why
  double compile_seconds = 0.0;   // built: this run's compile time; cached: the recorded one
  bool usable() const { return status == BuildStatus::Cached || status == BuildStatus::Built; }
};

struct BuildOptions {
  int jobs = 0;               // parallel compiles; 0 = all cores
  bool retry_failed = false;  // rebuild keys recorded as failed
  bool use_ninja = true;      // false, or no `ninja` on PATH: the thread pool
  bool show_progress = true;  // the kernels to compile, then a progress bar (or lines)
  util::Console* console = nullptr;  // where they go; nullptr: stderr
  std::string title = "build";
  // Compiler identity recorded with every build (e.g. `nvcc --version` text); a failed entry
  // recorded under another identity is retried. Empty: computed from command[0] --version.
  std::optional<std::string> compiler_identity;
};

// Why a finished compile is unusable, or nullopt when it is fine: a nonzero exit or missing
// library, a ptxas C7510 warning (wgmma serialized), or any "Potential Performance Loss".
std::optional<std::string> build_failure_reason(int exit_code, bool library_exists, std::string_view log);

// `command` with its placeholders replaced.
std::vector<std::string> expand_command(const std::vector<std::string>& command,
                                        const std::filesystem::path& source,
                                        const std::filesystem::path& output);

// The text of `<tool> --version` (first 4 KiB), or "" when it cannot be run. Cached per tool.
std::string compiler_identity_of(const std::string& tool);

// Path escaping for build.ninja (spaces, colons and dollars).
std::string ninja_escape_path(std::string_view path);

class BuildDriver {
 public:
  explicit BuildDriver(const KernelCache& cache, BuildOptions options = {});

  // Builds every job (duplicated keys are built once) and returns one outcome per job, in the
  // order given. Throws only for invalid jobs (bad key, empty command) or cache I/O errors;
  // compiler failures are outcomes.
  std::vector<BuildOutcome> build(const std::vector<BuildJob>& jobs);

  // The job graph runner in use for the last build: "ninja" or "threads".
  const std::string& last_runner() const { return last_runner_; }

 private:
  const KernelCache& cache_;
  BuildOptions options_;
  std::string last_runner_;
};

}  // namespace fact::realize
