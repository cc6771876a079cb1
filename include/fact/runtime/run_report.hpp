// The result of `fact run-kernel`: what a tuner reads from the child process's JSON file and
// exit code. Schema "fact.run/1" (docs/runtime.md lists every field).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/runtime/timing_stats.hpp"

namespace fact::runtime {

inline constexpr const char* kRunReportSchema = "fact.run/1";

enum class RunStatus {
  Ok,               // every check passed (and timing, when asked, finished)
  Wrong,            // the kernel ran but a check failed
  CannotImplement,  // the kernel (or the runner) refused this problem: not an error
  Error,            // could not load, launch, or finish (CUDA error, timeout, bad arguments)
};
std::string_view run_status_name(RunStatus s);  // "ok", "wrong", "cannot_implement", "error"
RunStatus parse_run_status(std::string_view text);  // throws std::invalid_argument

// Process exit codes of `fact run-kernel`. A crash by signal has no code of ours: the JSON
// then says "crashed" (written by the crash handler) or is missing.
inline constexpr int kExitOk = 0;
inline constexpr int kExitWrong = 2;
inline constexpr int kExitCannotImplement = 3;
inline constexpr int kExitError = 4;
inline constexpr int kExitTimeout = 5;
int exit_code_for(RunStatus s);

// One verification run of a kernel (or baseline) on one set of inputs.
struct CheckResult {
  std::string name;               // "primary", "fresh_inputs", "other_stream", ...
  bool passed = false;
  std::optional<double> rel_err;  // ‖out − ref‖₂ / ‖ref‖₂; empty when not measurable
  double max_abs_err = 0;         // over finite elements
  double ref_norm = 0;            // ‖ref‖₂
  double tolerance = 0;
  int64_t elements = 0;
  int64_t unwritten = 0;          // elements still holding the poison pattern
  int64_t nonfinite = 0;          // NaN/Inf elements written by the kernel
  int64_t out_of_bounds = 0;      // elements written outside the outputs (guards, gaps)
  bool inputs_unchanged = true;   // every input bitwise identical after the call
  bool final_at_return = true;    // outputs unchanged between the stream's synchronize and the device's
  uint64_t seed = 0;              // seed of the random inputs
  std::string stream;             // "primary" or "secondary"
  std::string failure;            // empty when passed: the first reason it did not
};

// A vendor implementation the kind registered, verified and timed on the same inputs.
struct BaselineResult {
  std::string name;      // as the kind registered it: "cublas", "cublaslt", ...
  std::string status;    // "ok", "wrong" (check failed), "error" (could not run)
  std::string error;
  std::string computes;  // what it computes, in the kind's words (e.g. a fusion name)
  bool fused = false;    // computes the whole epilogue of the problem
  std::string config;    // compute type, algorithm
  std::optional<CheckResult> check;
  std::optional<TimingStats> ms;
  std::optional<double> tflops;  // the problem's useful FLOPs / median time
};

// A vendor implementation's own error on the kernel's primary inputs, beside the kernel's
// (VerifyCase::accuracy_peer; strict GEMMs compare with cuBLAS SGEMM). Reported, not a gate.
struct AccuracyComparison {
  std::string against;      // the peer's name
  double rel_err = 0;       // the peer's rel_err
  double ratio = 0;         // kernel rel_err / the peer's
  double limit = 0;         // the kind's bound on the ratio
  bool within_limit = false;
};

struct RunReport {
  RunStatus status = RunStatus::Error;
  std::string error;            // why not ok (empty when ok)
  bool timed_out = false;
  std::string lib, entry, kernel_name;
  nlohmann::json problem = nlohmann::json::object();  // the kind's description ("fusion", "shape", "flops", ...)
  std::string precision;
  double tolerance = 0;
  std::optional<double> rel_err;  // worst over the checks
  std::vector<CheckResult> checks;
  std::optional<AccuracyComparison> accuracy;
  int64_t workspace_bytes = 0;
  std::optional<TimingStats> ms;
  std::optional<double> tflops;
  std::vector<BaselineResult> baselines;
  nlohmann::json device = nlohmann::json::object();  // name, sms, versions
  nlohmann::json timing = nlohmann::json::object();  // how timing was done (flush bytes, ...)
};

nlohmann::json to_json(const CheckResult& c);
nlohmann::json to_json(const BaselineResult& b);
nlohmann::json to_json(const RunReport& r);
// Inverse of to_json(RunReport); throws nlohmann::json::exception or std::invalid_argument
// on a malformed report.
RunReport run_report_from_json(const nlohmann::json& j);

// One line for humans: "ok  <kernel or fusion> <shape>  rel_err 3.1e-06 (tol 1e-05)
// 1.234 ms  111.4 TFLOP/s  | <baseline> 1.30 ms ...".
std::string summary_line(const RunReport& r);

}  // namespace fact::runtime
