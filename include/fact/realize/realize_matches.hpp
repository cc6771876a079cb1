// Stage 2's first half for a whole discovery: every accepted match's GEMMs -> KernelSpecs
// (default configurations) -> rendered sources in a folder, with a manifest; optionally
// compiled (build driver with the kernel cache, or serial nvcc into the folder).
//
//   <out_dir>/<kernel name>.cu   one per distinct kernel (GEMMs with equal specs share one)
//   <out_dir>/manifest.json      {"schema":"fact.realize/1", "precision", "kernels":[{"name",
//                                "key","entry","pattern","source","spec","status","reason",
//                                "library","compile_seconds","registers"}], "gemms":[{"match",
//                                "rule","pattern","gemm","problem","kernel"|"error"}]}
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/discover/match.hpp"
#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"

namespace fact::realize {

struct RealizeOptions {
  std::string precision = "strict";   // "strict", "tf32", "native"
  std::filesystem::path out_dir = "fact_kernels";
  bool compile = false;
  bool serial = false;                // compile with compile_kernel into out_dir, no cache
  int jobs = 0;                       // build driver parallelism (0 = all cores)
  std::filesystem::path cache_dir;    // empty: default_kernel_cache_dir()
  bool show_progress = true;
  CompileOptions compile_options = default_compile_options();
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

struct RealizedGemm {
  size_t match = 0;        // index into the matches given
  size_t gemm = 0;         // index into that match's gemms
  std::string kernel_key;  // empty when the GEMM could not be realized
  std::string error;       // why not (spec_from_problem / render refusal)
};

struct RealizeResult {
  std::vector<RealizedKernel> kernels;
  std::vector<RealizedGemm> gemms;
  nlohmann::json manifest;
  size_t failed_compiles() const;
};

// Realizes the accepted matches among `matches` (declined and pending ones are skipped), writes
// the sources and manifest.json into options.out_dir (created), compiles when asked. Compiler
// failures are results, not exceptions; throws std::invalid_argument for an unknown precision
// and std::system_error when out_dir cannot be written.
RealizeResult realize_matches(const std::vector<discover::Match>& matches,
                              const RealizeOptions& options);

}  // namespace fact::realize
