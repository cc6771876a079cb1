// Progress of a long batch (parallel kernel builds, a tuning sweep) on a Console:
//
//   terminal   a status line redrawn in place every second:
//                "realize [######..................] 3/8 kernels compiled 1m12s elapsed, about 2m left"
//              (an item's name is added only where it fits whole), plus, when the bar announces
//              items, one line per finished item with its full name
//   otherwise  lines: one per finished item when announcing, else one per tenth of the batch or
//              per 10 s; and, while nothing finishes, one every 30 s so that a long compile is
//              never silent:
//                "realize: 3/8 kernels compiled (the_kernels_whole_name) 1m12s elapsed, about 2m left"
//   the log    (Console::log) the same lines as "otherwise", on a terminal too
//
// The time left comes from the finished items only (EtaEstimator): it counts down while the
// batch waits and is recomputed when an item finishes; with nothing finished, with one item
// left, or once the estimate has run out, the line shows the elapsed time alone.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "fact/util/console.hpp"

namespace fact::util {

class EtaEstimator {
 public:
  explicit EtaEstimator(size_t total) : total_(total) {}
  // `finished` items are done, `seconds` after the start.
  void update(size_t finished, double seconds);
  // Seconds left at `now` (seconds after the start): the rate of the finished items applied to
  // the rest at the last update, counted down since. Never grows between two updates. nullopt
  // when there is no estimate: nothing finished, one item or none left, or the estimate ran out.
  std::optional<double> remaining(double now) const;

 private:
  size_t total_;
  size_t finished_ = 0;
  std::optional<double> finish_at_;
};

// What a bar counts: "3/8 kernels compiled".
struct ProgressWords {
  std::string items = "items";  // "kernels"
  std::string done = "done";    // "compiled"
};

class ProgressBar {
 public:
  using Words = ProgressWords;

  // `total` items; `console == nullptr` draws nothing (counts are still kept). `announce`: a
  // line for every finished item, with its full label (a few long jobs: kernel builds).
  ProgressBar(std::string title, size_t total, Console* console, Words words = {}, bool announce = false);
  ~ProgressBar();  // finishes if finish() was not called
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // One item finished (ok or failed); `label` names it. Thread-safe.
  void advance(bool failed = false, std::string_view label = {});
  // Draws the final state. Idempotent.
  void finish();

  size_t ok() const;
  size_t failed() const;
  size_t total() const { return total_; }

  // Every how many seconds a line is written while nothing finishes (not on a terminal).
  static constexpr double kHeartbeatSeconds = 30.0;
  void set_heartbeat_seconds(double seconds);
  // Without announce, lines are written per tenth of the batch or after this many seconds.
  static constexpr double kLineSeconds = 10.0;

  // The status line for a terminal, `width` columns at most; `label` is added only whole.
  static std::string status_line(std::string_view title, const Words& words, size_t ok, size_t failed,
                                 size_t total, double elapsed_seconds, std::optional<double> remaining,
                                 std::string_view label, size_t width);
  // A progress line for a pipe, a file or the log; `label` (never cut) is the item that just
  // finished ("" for a line written while waiting).
  static std::string report_line(std::string_view title, const Words& words, size_t ok, size_t failed,
                                 size_t total, double elapsed_seconds, std::optional<double> remaining,
                                 std::string_view label, bool label_failed);
  // "42s", "3m05s", "1h02m".
  static std::string format_duration(double seconds);

 private:
  void report_locked(std::string_view label, bool label_failed, bool announce_now);
  void draw_live_locked();
  void tick();
  double elapsed_seconds() const;

  std::string title_;
  size_t total_;
  Console* console_;
  Words words_;
  bool announce_;
  bool finished_ = false;
  size_t ok_ = 0, failed_ = 0;
  size_t last_reported_decile_ = 0;
  double last_line_at_ = 0.0;
  double heartbeat_seconds_ = kHeartbeatSeconds;
  std::string label_;
  EtaEstimator eta_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
};

}  // namespace fact::util
