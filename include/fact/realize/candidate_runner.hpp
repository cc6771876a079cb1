// Running one built candidate on the GPU, isolated from the tuner: the real runner starts
// `fact run-kernel` (this same executable) as a child process under a time limit and reads
// its JSON report (schema "fact.run/1", docs/runtime.md). A kernel that crashes, hangs or
// corrupts memory takes only the child down; the tuner records why and moves on. Tests
// inject their own CandidateRunner to simulate every outcome without a GPU.
#pragma once
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/problem/problem.hpp"

namespace fact::realize {

// Why a candidate is in or out, in the tuner's fixed order: build → can_implement → verify →
// time.
enum class CandidateStatus {
  Ok,               // built, implemented, verified, timed
  BuildFailed,      // did not compile (or ptxas serialized wgmma)
  CannotImplement,  // the kernel refused the problem (alignment, shape)
  Wrong,            // ran, but a verification check failed
  Crashed,          // the runner died on a signal
  Hung,             // the runner outlived its time limit and was killed
  Error,            // could not load, launch or report (CUDA error, bad report)
};
std::string_view candidate_status_name(CandidateStatus s);  // "ok", "build_failed", ...

struct RunRequest {
  std::filesystem::path library;    // lib.so of the candidate
  Problem problem;                  // what to run it on (written to <scratch>/problem.json)
  core::PrecisionMode precision = core::PrecisionMode::Strict;
  std::vector<std::string> baselines;  // e.g. {"cublas", "cublaslt"}; empty: none
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};  // kill after this
  std::filesystem::path scratch_dir;  // where the report and output log go
};

struct Timing {
  double median = 0, min = 0, p10 = 0, p90 = 0, max = 0;
  int64_t runs = 0;
};

struct BaselineMeasurement {
  std::string name;    // "cublas", "cublaslt"
  std::string status;  // "ok", "wrong", "error"
  std::optional<double> ms;       // median
  std::optional<double> rel_err;
  std::optional<double> tflops;
  bool fused = false;             // computes the whole epilogue
  std::string computes;           // fusion it computes
  std::string error;
};

struct RunResult {
  CandidateStatus status = CandidateStatus::Error;
  std::string reason;               // empty when ok
  std::optional<double> rel_err;
  std::optional<Timing> ms;
  std::optional<double> tflops;
  std::vector<BaselineMeasurement> baselines;
  nlohmann::json device = nlohmann::json::object();  // as the runner reported it
  nlohmann::json report;            // the whole JSON report (null when none)
};

class CandidateRunner {
 public:
  virtual ~CandidateRunner() = default;
  // Never throws for a misbehaving kernel: every failure is a RunResult.
  virtual RunResult run(const RunRequest& request) = 0;
};

// Spawns `<executable> run-kernel --lib L --problem-json <scratch>/problem.json --precision P
// [--baselines a,b] --timeout-s T --json <scratch>/report.json` and kills it (with its process
// group) at the time limit; T (the runner's own watchdog) is a little shorter, so that a hang
// normally still yields a report.
class SubprocessRunner : public CandidateRunner {
 public:
  // `executable`: the fact CLI (default: this process's own executable).
  explicit SubprocessRunner(std::filesystem::path executable = {});
  RunResult run(const RunRequest& request) override;
  // The argv this runner would start for `request` (for logs and tests).
  std::vector<std::string> command_for(const RunRequest& request) const;

 private:
  std::filesystem::path executable_;
};

// Turns a finished child (exit code / signal / timeout) and its report into a RunResult.
// `report` is the parsed JSON file or nullopt when absent or unparseable; `output_tail` is the
// end of the child's output, quoted in reasons. Pure: unit-tested without a GPU.
RunResult interpret_run(int exit_code, int term_signal, bool timed_out, double timeout_seconds,
                        const std::optional<nlohmann::json>& report, std::string_view output_tail);

}  // namespace fact::realize
