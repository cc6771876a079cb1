// Stage 2's first half for a whole discovery: every accepted match's problems (calls) ->
// KernelSpecs through the registered realizers (the tuning database's stored choice when one is
// consulted and has the call's key, else the default configuration) -> rendered sources in a
// folder, with a manifest; optionally compiled (build driver with the kernel cache, or serial
// nvcc into the folder).
//
//   <out_dir>/<kernel name>.cu   one per distinct kernel (GEMMs with equal specs share one)
//   <out_dir>/manifest.json      {"schema":"fact.realize/2", "precision", "tuning_db",
//                                "kernels":[{"name","key","entry","kind","pattern","source",
//                                "spec","status","reason","library","compile_seconds",
//                                "registers"}],
//                                "calls":[{"match","rule","pattern","call","problem",
//                                "kernel","kernel_name","config","config_source"
//                                ("database"|"bucket"|"default"),"tolerance","tuning_key",
//                                "tuned" {"ms","rel_err","device","date","shape"},
//                                "tuning_note" | "error"}]}
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/discover/match.hpp"
#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "fact/util/console.hpp"

namespace fact::realize {

struct RealizeOptions {
  core::PrecisionMode precision = core::PrecisionMode::Strict;
  std::filesystem::path out_dir;      // required: where sources and the manifest go
  bool compile = false;
  bool serial = false;                // compile with compile_kernel into out_dir, no cache
  int jobs = 0;                       // build driver parallelism (0 = all cores)
  std::filesystem::path cache_dir;    // empty: default_kernel_cache_dir()
  bool show_progress = true;
  util::Console* console = nullptr;   // where the build's progress goes; nullptr: stderr
  CompileOptions compile_options = default_compile_options();
  // Tuning database (TuningDb file) consulted per GEMM: the entry with the GEMM's exact key
  // replaces the default configuration; with tuning_db_bucket, a miss then takes the choice of
  // the nearest tuned shape of the key's bucket. nullopt: default configurations only.
  std::optional<std::filesystem::path> tuning_db;
  bool tuning_db_bucket = false;
  std::string cutlass_version;        // of the tuning keys; empty: build_info::kCutlassVersion
};

struct RealizedKernel {
  RenderedKernel kernel;
  std::filesystem::path source_file;
  // "rendered" (not compiled), or the build status: "built", "cached", "failed", "skipped_failed"
  std::string status = "rendered";
  std::string reason;                 // failed: why
  std::filesystem::path library;      // built / cached
  double compile_seconds = 0.0;
  int registers = 0;                  // ptxas report (serial compiles)
  bool ok() const { return status == "rendered" || status == "built" || status == "cached"; }
};

struct RealizedCall {
  size_t match = 0;        // index into the matches given
  size_t call = 0;         // index into that match's problems
  std::string kernel_key;  // empty when the problem could not be realized
  std::string error;       // why not (spec_from_problem / render refusal)
  std::string config_source = "default";  // "database" (exact key), "bucket" or "default"
  std::string tuning_key;  // TuningKey::id() looked up (empty: no database consulted)
  std::string kernel_class;  // the realizer's class token (TuningKey::problem_class): kernels of
                             // one class run every problem of that class
  nlohmann::json tuned;    // the database record's ms, rel_err, device, date, shape (when used)
  std::string tuning_note; // a stored choice that could not be used, and why
};

struct RealizeResult {
  std::vector<RealizedKernel> kernels;
  std::vector<RealizedCall> calls;
  nlohmann::json manifest;
  size_t failed_compiles() const;
  const RealizedKernel* kernel(const std::string& key) const;  // nullptr when absent
};

// Realizes the accepted matches among `matches` (declined and pending ones are skipped), writes
// the sources and manifest.json into options.out_dir (created), compiles when asked. Compiler
// failures are results, not exceptions; throws std::invalid_argument for an unknown precision
// and std::system_error when out_dir cannot be written.
RealizeResult realize_matches(const std::vector<discover::Match>& matches,
                              const RealizeOptions& options);

}  // namespace fact::realize
