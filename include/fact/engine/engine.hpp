// The engine's in-process API: captured graph in -> discovery -> (tuning) -> realized kernels ->
// plan out. The `fact` CLI, the C API (c_api.h: Python through ctypes, agent servers) and
// tests call this one function; nobody chains CLI subprocesses and JSON files to get a plan,
// and every kernel is realized once per plan.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/discover/discover.hpp"
#include "fact/graph/graph.hpp"
#include "fact/realize/realize_matches.hpp"
#include "fact/realize/tuner.hpp"
#include "fact/util/console.hpp"

namespace fact::engine {

struct PlanRequest {
  std::filesystem::path graph;        // captured graph JSON (docs/graph_json.md)
  std::optional<nlohmann::json> graph_document;  // the graph itself, in memory (then `graph` is unused)
  std::filesystem::path out_dir;      // discovery.json, kernels/, tune/, plan.json
  std::optional<core::PrecisionMode> precision;  // nullopt: from the graph's dtypes
  bool compile = false;               // compile the kernels (nvcc + CUTLASS headers)
  size_t tune = 0;                    // > 0: tune each kernel over at most this many configurations (Hopper GPU)
  std::string space = "default";      // tuning space: default | exhaustive
  std::vector<std::string> baselines; // library baselines timed with each tuned winner ("cublas", ...)
  std::optional<std::vector<std::string>> patterns;  // rule or pattern names to plan; nullopt = all
  bool use_tuning_db = true;          // take stored tuned configurations
  std::optional<std::filesystem::path> tuning_db;     // nullopt: the default database
  bool reuse_bucket = false;          // a tuned choice of the nearest shape when the exact one is missing
  std::optional<std::filesystem::path> device_profile;  // nullopt: the saved profile or defaults
  int jobs = 0;                       // parallel compiles (0: all cores)
  bool progress = true;               // the kernels to build, progress bars (or lines)
  util::Console* console = nullptr;   // where they go; nullptr: stderr
  nlohmann::json inputs = nlohmann::json::array();  // copied into the plan
  std::string device = "cpu";         // of the example inputs: cuda | cpu
  // The pattern registry (include/fact/registry/registry.hpp): classifies the matches, and its
  // verified source entries realize the matches they cover on the plan's arch (sm_90a for
  // cuda, host for cpu). nullopt: the default registry.
  bool use_registry = true;
  std::optional<std::filesystem::path> registry_dir;
  // Results with padded rows allowed (DiscoverOptions::padded_results); false for the static
  // plans a dynamic range is fitted from.
  bool padded_results = true;
};

struct PlanResult;
// Called once discovery is done, before anything is tuned or compiled, with the result so far
// (captured, options, discovery): `fact optimize` shows what it will build, and why, first.
using DiscoveredHook = std::function<void(const PlanResult&)>;

// How discovery runs: the precision mode (nullopt = from the graph's dtypes: native for bf16/fp16
// models, strict for float32), the device profile (nullopt: the one `fact device` saved, else
// an H100's defaults), the tuning database whose entries make a built-in template's match
// REUSE, and the pattern registry every match is classified against on `arch`.
struct DiscoverSettings {
  std::optional<core::PrecisionMode> precision;
  std::optional<std::filesystem::path> device_profile;
  bool use_tuning_db = true;
  std::optional<std::filesystem::path> tuning_db;  // nullopt: the default database
  bool use_registry = true;
  std::optional<std::filesystem::path> registry_dir;  // nullopt: the default registry
  std::string arch = "sm_90a";                        // sm_90a | host
};
// Throws std::runtime_error for an unreadable device profile.
discover::DiscoverOptions discover_options(const DiscoverSettings& settings, const graph::Graph& captured);

struct TunedCall {
  size_t match = 0, call = 0;
  std::string label;                      // "3a gemm_bias_gelu_tanh 65536x3072x768"
  std::optional<realize::TuneResult> result;
  std::string error;                      // why it was not tuned
};

struct PlanResult {
  graph::Graph captured;
  discover::DiscoverOptions options;
  discover::Discovery discovery;
  std::vector<TunedCall> tuning;
  realize::RealizeResult realized;
  nlohmann::json plan;
  std::filesystem::path plan_path;
  std::vector<std::string> skipped;       // stages not run, each with its reason
};

// Runs every stage the request asks for and writes <out_dir>/plan.json (docs/plan.md) and
// discovery.json. Throws std::invalid_argument for a bad request (unknown precision or space,
// no graph file) and std::runtime_error for a graph that cannot be read; a kernel that does not
// build or verify, or a problem nothing realizes, is a reason in the plan, not an exception.
PlanResult make_plan(const PlanRequest& request, const DiscoveredHook& on_discovered = {});

// Why kernels cannot run on a GPU in this process (no CUDA runtime, no device, not Hopper), or
// nullopt when a Hopper GPU is usable.
std::optional<std::string> gpu_unavailable_reason();

// The reason gpu_unavailable_reason gives when the CUDA runtime reports an insufficient driver,
// which it also does when no driver is installed: `driver_loads` (libcuda.so.1 loads),
// the driver's and the runtime's CUDA versions (1000 * major + 10 * minor; 0 = none).
std::string insufficient_driver_reason(bool driver_loads, int driver_version, int runtime_version);
// Whether the NVIDIA driver library (libcuda.so.1) can be loaded in this process.
bool cuda_driver_loads();

// The `fact` executable the tuner starts for each candidate run: $FACT_ENGINE, else the `fact`
// beside the library or executable this code is in.
std::filesystem::path engine_executable();

}  // namespace fact::engine
