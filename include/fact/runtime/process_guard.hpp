// Keeps a run's JSON report reliable when the kernel under test misbehaves: a watchdog that
// writes an "error"/"timed_out" report and exits when the run takes too long, and a handler for
// fatal signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) that writes a "crashed" report
// before the process dies with the signal. Files are written atomically (temp + rename), so a
// reader never sees half a report.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace fact::runtime {

// Writes `text` to `path` through a temporary file in the same folder and rename(2). Throws
// std::runtime_error naming the path when a step fails.
void write_file_atomically(const std::string& path, const std::string& text);

class ProcessGuard {
 public:
  // Arms the watchdog (`timeout_s` <= 0: none) and the signal handlers. `json_path` may be
  // empty: the guard then only prints to stderr. `context` (kernel, problem, precision) is
  // copied into the reports the guard writes. Only one guard may be alive at a time
  // (std::logic_error otherwise).
  ProcessGuard(std::string json_path, double timeout_s, nlohmann::json context);
  // Disarms both (does not write anything).
  ~ProcessGuard();
  ProcessGuard(const ProcessGuard&) = delete;
  ProcessGuard& operator=(const ProcessGuard&) = delete;

  // Names what the run is doing ("loading", "verifying", "timing", ...), for the reports.
  void set_phase(const std::string& phase);

  // Disarms the watchdog and signal handlers and writes `report` (when there is a path).
  // Returns false when the watchdog already fired (then the process is exiting anyway).
  bool finish(const nlohmann::json& report);

 private:
  void watch(double timeout_s);
  void render_crash_report();

  std::string json_path_;
  nlohmann::json context_;
  std::string phase_ = "starting";
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread watchdog_;
};

// The report the watchdog writes: {"schema": "fact.run/1", "status": "error", "timed_out":
// true, "error": "timed out after <s> s while <phase>", ...context}.
nlohmann::json timeout_report(const nlohmann::json& context, double timeout_s,
                              const std::string& phase);

}  // namespace fact::runtime
