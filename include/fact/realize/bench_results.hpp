// The results file every benchmark writes (docs/architecture.md, "Measuring"):
// bench/results/<suite>-<device slug>-<YYYY-MM-DD>.json with
//   {"suite", "date", "device", "versions": {driver, cuda, torch, cutlass, fact},
//    "cases": [{"name", "precision", "status", "fact_ms", "rel_err",
//               "baselines": {name: {"ms", "rel_err"}}, "speedup": {name: baseline_ms / fact_ms},
//               "config", "reason" (only when status is not "ok")}],
//    "summary": {precision: {baseline: geometric-mean speedup}},
//    "tuning_cost": {"case", "command", "candidates", "compile_jobs", "cold_s", "warm_s", ...}}
// `status` and `reason` say why a case has no FACT time (its kernel could not be built or
// verified); such a case keeps its baseline times and has fact_ms = null.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fact::realize {

struct BenchBaseline {
  std::optional<double> ms;
  std::optional<double> rel_err;
};

struct BenchCase {
  std::string name;       // "square_4096_fp32"
  std::string precision;  // "strict", "tf32", "native"
  std::string status = "ok";  // "ok", or why there is no FACT time: "no_kernel", "error"
  std::optional<double> fact_ms;
  std::optional<double> rel_err;
  std::map<std::string, BenchBaseline> baselines;
  std::string config;     // the chosen kernel configuration
  std::string reason;     // when status != "ok"

  nlohmann::json to_json() const;  // speedups computed here
};

// What tuning one GEMM shape costs, measured with `fact tune` in child processes: cold (empty
// kernel cache and tuning database: every candidate compiled, verified and timed) and warm
// (the same command again: stored choice and cached binary reused).
struct BenchTuningCost {
  std::string case_name;
  std::string command;        // the `fact tune` command line (without the cache variable)
  size_t candidates = 0;      // configurations the cold sweep covered (0: the whole pruned space)
  int compile_jobs = 0;       // parallel compiles (the host's cores)
  std::optional<double> cold_s, warm_s;
  std::string cold_status = "not run", warm_status = "not run";  // "ok" or what went wrong

  nlohmann::json to_json() const;
};

struct BenchVersions {
  std::string driver, cuda, torch = "n/a", cutlass, fact;
};

struct BenchResults {
  std::string suite;
  std::string date;    // YYYY-MM-DD
  std::string device;  // "NVIDIA H100 80GB HBM3"
  BenchVersions versions;
  std::vector<BenchCase> cases;
  std::string variant;  // "" for the full suite; "quick" for a cut run (file name only)
  std::optional<BenchTuningCost> tuning_cost;

  // Geometric mean of the speedups over the cases of each precision mode, per baseline
  // ({"native": {"cublas": {"geomean_speedup", "cases"}, ...}}), and "like_for_like": against
  // the library call computing the same thing per case (cuBLASLt's fused epilogue where the case
  // has an epilogue, else cuBLAS), with the worst case; written as "summary" beside "cases".
  nlohmann::json summary() const;

  nlohmann::json to_json() const;
  // "<suite>-<device slug>-<date>.json", or "...-<date>-<variant>.json"
  std::string file_name() const;
};

// "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"
std::string device_slug(const std::string& device_name);

}  // namespace fact::realize
