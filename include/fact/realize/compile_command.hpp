// The nvcc command line for rendered kernels, and a one-off compile of one kernel.
//
// The parallel, cached path is the build driver (build_driver.hpp): build_job() turns a
// RenderedKernel into a BuildJob whose command has the driver's {source} / {output}
// placeholders. compile_kernel() compiles one kernel into a folder of the caller's choosing,
// serially, without the cache (tests, `fact realize --compile` without the driver, debugging).
//
// The command always carries -O3 -DNDEBUG (without NDEBUG, CUTLASS's device asserts make
// ptxas serialize the wgmma pipeline: warning C7510), targets sm_90a (plain sm_90 has no
// wgmma), links cudart statically and passes -Xptxas -v so that the serialization warnings and
// register counts land in the log.
#pragma once
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fact/realize/build_driver.hpp"

namespace fact::realize {

struct RenderedKernel;

struct CompileOptions {
  std::filesystem::path nvcc;                  // the compiler
  std::filesystem::path cutlass_include;       // holds cutlass/cutlass.h
  std::filesystem::path cutlass_util_include;  // holds cutlass/util/ (may be empty)
  std::filesystem::path fact_root;             // holds include/fact/ and patterns/
  std::filesystem::path generated_include;     // headers the build writes (fact/gemm_epilogue_steps.def)
  std::string arch = "90a";                    // -gencode=arch=compute_<arch>,code=sm_<arch>
  std::string cxx_standard = "c++17";
  bool standalone_main = false;  // -DFACT_STANDALONE_MAIN: an executable with main(), not a .so
  std::vector<std::string> extra_flags;        // appended before the source
  std::chrono::seconds timeout{900};           // compile_kernel's wall-clock limit
};

// Defaults from the environment and this build: nvcc = $FACT_NVCC, else the toolkit CMake
// found, else `nvcc` on PATH; CUTLASS = $FACT_CUTLASS_DIR/{include,tools/util/include}, else
// the headers CMake found; fact_root = $FACT_SOURCE_DIR, else the source tree of this build;
// generated_include = $FACT_GENERATED_DIR, else this build's generated headers.
CompileOptions default_compile_options();

// Why these options cannot compile anything (no nvcc, no CUTLASS headers, no FACT headers),
// or nullopt when they can. For tests that must skip and commands that must explain.
std::optional<std::string> compile_unavailable_reason(const CompileOptions& options);

// The compiler argv with {source} and {output} placeholders (build_driver.hpp).
std::vector<std::string> nvcc_command(const CompileOptions& options);

// What of the command enters a kernel's cache key: the flags with every path replaced by its
// role (<nvcc>, <cutlass>, <fact>), the compiler's identity (`nvcc --version`) and the CUTLASS
// version found at cutlass_include. Paths are left out so that two checkouts of the same
// sources share keys; the contents they point to enter the key through versions and digests.
std::string compile_fingerprint(const CompileOptions& options);

// CUTLASS version ("4.2.0") read from <cutlass_include>/cutlass/version.h, or "" if unreadable.
std::string cutlass_version_at(const std::filesystem::path& cutlass_include);

// A job for the build driver: key, source, entry symbol, spec, command, label.
BuildJob build_job(const RenderedKernel& kernel, const CompileOptions& options);

// Facts ptxas reported with -v (the largest over the kernel's entry functions).
struct PtxasUsage {
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_frame_bytes = 0;
};
PtxasUsage parse_ptxas_usage(const std::string& log);

struct CompileResult {
  bool ok = false;
  std::string reason;                 // when !ok: compiler exit, C7510, Potential Performance Loss, ...
  std::filesystem::path source;       // <out_dir>/<entry>.cu
  std::filesystem::path output;       // <out_dir>/<entry>.so (or the executable)
  std::filesystem::path log_file;     // <out_dir>/<entry>.log
  std::string log;                    // compiler output
  std::vector<std::string> command;   // the argv that ran
  double seconds = 0.0;
  PtxasUsage usage;
};

// Writes the source into `out_dir` (created if needed), runs nvcc once, captures its output,
// and fails the result on a nonzero exit, a missing output, ptxas C7510 ("wgmma.mma_async
// instructions are serialized") or "Potential Performance Loss". Never throws for compiler
// failures; throws std::system_error when `out_dir` cannot be written.
CompileResult compile_kernel(const RenderedKernel& kernel, const std::filesystem::path& out_dir,
                             const CompileOptions& options = default_compile_options());

}  // namespace fact::realize
