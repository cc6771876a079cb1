#include "fact/realize/candidate_runner.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <sstream>

#include "fact/util/atomic_file.hpp"
#include "fact/util/subprocess.hpp"

namespace fact::realize {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// `fact run-kernel` exit code for "the runner's own time limit expired" (docs/runtime.md).
constexpr int kRunnerTimeoutExit = 5;

std::optional<double> number_at(const json& j, const char* name) {
  if (j.is_object() && j.contains(name) && j[name].is_number()) return j[name].get<double>();
  return std::nullopt;
}

// A timing object {"median": .., ...} or a bare number of milliseconds.
std::optional<Timing> timing_at(const json& j, const char* name) {
  if (!j.is_object() || !j.contains(name)) return std::nullopt;
  const json& t = j[name];
  Timing timing;
  if (t.is_number()) {
    timing.median = timing.min = timing.p10 = timing.p90 = timing.max = t.get<double>();
    timing.runs = 1;
    return timing;
  }
  if (!t.is_object() || !t.contains("median") || !t["median"].is_number()) return std::nullopt;
  timing.median = t["median"].get<double>();
  timing.min = t.value("min", timing.median);
  timing.p10 = t.value("p10", timing.median);
  timing.p90 = t.value("p90", timing.median);
  timing.max = t.value("max", timing.median);
  timing.runs = t.value("runs", int64_t{0});
  return timing;
}

std::string last_nonempty_line(std::string_view text) {
  std::istringstream lines{std::string(text)};
  std::string line, last;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  if (last.size() > 300) last = last.substr(0, 300) + "...";
  return last;
}

// The first failed check's reason, for "wrong" reports that carry no top-level error.
std::string first_failed_check(const json& report) {
  if (!report.contains("checks") || !report["checks"].is_object()) return {};
  for (const auto& [name, check] : report["checks"].items()) {
    if (check.is_object() && !check.value("passed", true)) {
      std::string failure = check.value("failure", std::string("failed"));
      return "check " + name + ": " + failure;
    }
  }
  return {};
}

}  // namespace

std::string_view candidate_status_name(CandidateStatus s) {
  switch (s) {
    case CandidateStatus::Ok: return "ok";
    case CandidateStatus::BuildFailed: return "build_failed";
    case CandidateStatus::CannotImplement: return "cannot_implement";
    case CandidateStatus::Wrong: return "wrong";
    case CandidateStatus::Crashed: return "crashed";
    case CandidateStatus::Hung: return "hung";
    case CandidateStatus::Error: return "error";
  }
  return "error";
}

RunResult interpret_run(int exit_code, int term_signal, bool timed_out, double timeout_seconds,
                        const std::optional<json>& report, std::string_view output_tail) {
  RunResult result;
  std::string tail = last_nonempty_line(output_tail);
  auto with_tail = [&](std::string reason) { return tail.empty() ? reason : reason + ": " + tail; };

  if (report && report->is_object()) {
    const json& r = *report;
    result.report = r;
    result.rel_err = number_at(r, "rel_err");
    result.ms = timing_at(r, "ms");
    result.tflops = number_at(r, "tflops");
    if (r.contains("device") && r["device"].is_object()) result.device = r["device"];
    if (r.contains("baselines") && r["baselines"].is_object()) {
      for (const auto& [name, b] : r["baselines"].items()) {
        if (!b.is_object()) continue;
        BaselineMeasurement baseline;
        baseline.name = name;
        baseline.status = b.value("status", std::string("ok"));
        if (auto t = timing_at(b, "ms")) baseline.ms = t->median;
        baseline.rel_err = number_at(b, "rel_err");
        if (!baseline.rel_err && b.contains("check")) baseline.rel_err = number_at(b["check"], "rel_err");
        baseline.tflops = number_at(b, "tflops");
        baseline.fused = b.value("fused", false);
        baseline.computes = b.value("computes", std::string());
        baseline.error = b.value("error", std::string());
        result.baselines.push_back(std::move(baseline));
      }
    }
  }

  std::ostringstream limit;
  limit.precision(1);
  limit << std::fixed << timeout_seconds;
  if (timed_out) {
    result.status = CandidateStatus::Hung;
    result.reason = "no result within " + limit.str() + " s: killed";
    return result;
  }
  if (term_signal != 0) {
    result.status = CandidateStatus::Crashed;
    result.reason = with_tail("runner killed by signal " + std::to_string(term_signal) + " (" +
                              ::strsignal(term_signal) + ")");
    return result;
  }
  if (!result.report.is_object()) {
    if (exit_code == kRunnerTimeoutExit) {
      result.status = CandidateStatus::Hung;
      result.reason = with_tail("runner timed the kernel out (exit " + std::to_string(exit_code) + ")");
    } else {
      result.status = CandidateStatus::Error;
      result.reason = with_tail("runner exit " + std::to_string(exit_code) + " without a report");
    }
    return result;
  }

  const json& r = result.report;
  std::string status = r.value("status", std::string());
  std::string error = r.value("error", std::string());
  if (status == "ok") {
    if (!result.ms) {
      result.status = CandidateStatus::Error;
      result.reason = "report says ok but has no timing";
    } else {
      result.status = CandidateStatus::Ok;
    }
  } else if (status == "wrong") {
    result.status = CandidateStatus::Wrong;
    result.reason = !error.empty() ? error : first_failed_check(r);
    if (result.reason.empty()) result.reason = "verification failed";
  } else if (status == "cannot_implement") {
    result.status = CandidateStatus::CannotImplement;
    result.reason = error.empty() ? "can_implement refused the problem" : error;
  } else if (status == "crashed") {
    result.status = CandidateStatus::Crashed;
    result.reason = error.empty() ? with_tail("runner crashed") : error;
  } else if (status == "error" && (r.value("timed_out", false) || exit_code == kRunnerTimeoutExit)) {
    result.status = CandidateStatus::Hung;
    result.reason = error.empty() ? "kernel did not finish (runner timeout)" : error;
  } else {
    result.status = CandidateStatus::Error;
    result.reason = !error.empty() ? error : with_tail("runner reported status '" + status + "'");
  }
  return result;
}

SubprocessRunner::SubprocessRunner(fs::path executable)
    : executable_(executable.empty() ? util::current_executable() : std::move(executable)) {}

std::vector<std::string> SubprocessRunner::command_for(const RunRequest& request) const {
  std::vector<std::string> argv = {executable_.string(), "run-kernel", "--lib", request.library.string(),
                                   "--problem-json", (request.scratch_dir / "problem.json").string(),
                                   "--precision", std::string(core::precision_name(request.precision))};
  if (!request.baselines.empty()) {
    std::string joined;
    for (const auto& name : request.baselines) joined += (joined.empty() ? "" : ",") + name;
    argv.push_back("--baselines");
    argv.push_back(joined);
  }
  // The runner's own watchdog fires first and still writes a report naming the phase it was
  // in; the kill at request.timeout is the backstop for a runner too stuck even for that.
  double timeout_seconds = std::chrono::duration<double>(request.timeout).count();
  double inner_seconds = std::max(1.0, timeout_seconds - std::min(10.0, timeout_seconds * 0.1));
  std::ostringstream inner;
  inner << inner_seconds;
  argv.push_back("--timeout-s");
  argv.push_back(inner.str());
  argv.push_back("--json");
  argv.push_back((request.scratch_dir / "report.json").string());
  return argv;
}

RunResult SubprocessRunner::run(const RunRequest& request) {
  fs::create_directories(request.scratch_dir);
  fs::path report_path = request.scratch_dir / "report.json";
  fs::path output_path = request.scratch_dir / "output.log";
  std::error_code ignored;
  fs::remove(report_path, ignored);
  util::write_file_atomically(request.scratch_dir / "problem.json", problem_to_json(request.problem).dump(2) + "\n");

  util::ProcessOptions options;
  options.output_file = output_path;
  options.timeout = request.timeout;
  util::ProcessResult finished = util::run_process(command_for(request), options);
  if (finished.spawn_failed) {
    RunResult result;
    result.status = CandidateStatus::Error;
    result.reason = "cannot start the runner: " + finished.spawn_error;
    return result;
  }
  std::optional<json> report;
  if (fs::exists(report_path, ignored)) {
    try {
      report = json::parse(util::read_file(report_path));
    } catch (const std::exception&) {
      report.reset();
    }
  }
  double timeout_seconds = std::chrono::duration<double>(request.timeout).count();
  return interpret_run(finished.exit_code, finished.term_signal, finished.timed_out, timeout_seconds, report,
                       util::tail_of_file(output_path, 20));
}

}  // namespace fact::realize
