// A one-line progress bar for long batches (parallel builds, tuning sweeps), drawn on a
// terminal stream:  "build [######......] 12/40 ok, 1 failed, ETA 1m23s  gemm_bf16_tn_128x..."
// On a terminal the line is redrawn in place; on a pipe or file one line is written per
// ~10% of progress (and at the end), so logs stay short.
#pragma once
#include <chrono>
#include <cstddef>
#include <iosfwd>
#include <mutex>
#include <string>
#include <string_view>

namespace fact::util {

class ProgressBar {
 public:
  // `total` items; `enabled == false` draws nothing (counts are still kept).
  ProgressBar(std::string title, size_t total, std::ostream& out, bool enabled = true);
  ~ProgressBar();  // finishes the line if finish() was not called
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // One item finished (ok or failed); `label` names it on the line. Thread-safe.
  void advance(bool failed = false, std::string_view label = {});
  // Sets the counts directly (for pollers that count files). Thread-safe.
  void set_counts(size_t ok, size_t failed, std::string_view label = {});
  // Draws the final state and ends the line. Idempotent.
  void finish();

  size_t ok() const;
  size_t failed() const;
  size_t total() const { return total_; }

  // The line drawn for these counts, `width` columns at most (pure; for tests).
  static std::string format_line(std::string_view title, size_t ok, size_t failed, size_t total,
                                 double elapsed_seconds, std::string_view label, size_t width);
  // Remaining time from the rate so far; negative when unknown (nothing finished yet).
  static double estimate_remaining_seconds(size_t finished, size_t total, double elapsed_seconds);
  // "42s", "3m05s", "1h02m".
  static std::string format_duration(double seconds);

 private:
  void draw_locked(bool final_line);
  double elapsed_seconds() const;

  std::string title_;
  size_t total_;
  std::ostream& out_;
  bool enabled_;
  bool is_terminal_;
  bool finished_ = false;
  size_t ok_ = 0, failed_ = 0;
  size_t last_logged_decile_ = 0;
  size_t last_logged_finished_ = 0;
  std::string label_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
};

}  // namespace fact::util
