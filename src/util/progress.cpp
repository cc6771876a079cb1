#include "fact/util/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

namespace fact::util {
namespace {

bool stream_is_terminal(const std::ostream& out) {
  if (&out == &std::cerr || &out == &std::clog) return ::isatty(STDERR_FILENO) == 1;
  if (&out == &std::cout) return ::isatty(STDOUT_FILENO) == 1;
  return false;
}

size_t terminal_width(const std::ostream& out) {
  int fd = (&out == &std::cout) ? STDOUT_FILENO : STDERR_FILENO;
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col >= 40) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    long parsed = std::strtol(columns, nullptr, 10);
    if (parsed >= 40) return static_cast<size_t>(parsed);
  }
  return 100;
}

}  // namespace

ProgressBar::ProgressBar(std::string title, size_t total, std::ostream& out, bool enabled)
    : title_(std::move(title)),
      total_(total),
      out_(out),
      enabled_(enabled),
      is_terminal_(stream_is_terminal(out)),
      start_(std::chrono::steady_clock::now()) {
  std::lock_guard lock(mutex_);
  if (is_terminal_) draw_locked(false);
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(bool failed, std::string_view label) {
  std::lock_guard lock(mutex_);
  (failed ? failed_ : ok_) += 1;
  if (!label.empty()) label_ = std::string(label);
  draw_locked(false);
}

void ProgressBar::set_counts(size_t ok, size_t failed, std::string_view label) {
  std::lock_guard lock(mutex_);
  bool changed = ok != ok_ || failed != failed_;
  ok_ = ok;
  failed_ = failed;
  if (!label.empty()) label_ = std::string(label);
  if (changed || is_terminal_) draw_locked(false);
}

void ProgressBar::finish() {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  finished_ = true;
  draw_locked(true);
}

size_t ProgressBar::ok() const {
  std::lock_guard lock(mutex_);
  return ok_;
}

size_t ProgressBar::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

double ProgressBar::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::draw_locked(bool final_line) {
  if (!enabled_) return;
  size_t finished = ok_ + failed_;
  if (is_terminal_) {
    std::string line = format_line(title_, ok_, failed_, total_, elapsed_seconds(), label_,
                                   terminal_width(out_) - 1);
    out_ << "\r\033[2K" << line;
    if (final_line) out_ << "\n";
    out_.flush();
    return;
  }
  size_t decile = total_ == 0 ? 10 : (finished * 10) / total_;
  bool progressed = decile > last_logged_decile_;
  bool unreported_end = final_line && finished != last_logged_finished_;
  if (!progressed && !unreported_end) return;
  last_logged_decile_ = decile;
  last_logged_finished_ = finished;
  out_ << format_line(title_, ok_, failed_, total_, elapsed_seconds(), {}, 120) << "\n";
  out_.flush();
}

double ProgressBar::estimate_remaining_seconds(size_t finished, size_t total,
                                               double elapsed_seconds) {
  if (finished == 0 || total == 0) return -1.0;
  if (finished >= total) return 0.0;
  return elapsed_seconds / double(finished) * double(total - finished);
}

std::string ProgressBar::format_duration(double seconds) {
  long s = std::lround(std::max(0.0, seconds));
  char buffer[32];
  if (s < 60) {
    std::snprintf(buffer, sizeof buffer, "%lds", s);
  } else if (s < 3600) {
    std::snprintf(buffer, sizeof buffer, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  }
  return buffer;
}

std::string ProgressBar::format_line(std::string_view title, size_t ok, size_t failed,
                                     size_t total, double elapsed_seconds,
                                     std::string_view label, size_t width) {
  constexpr size_t kBarCells = 24;
  size_t finished = ok + failed;
  size_t filled = total == 0 ? kBarCells : std::min(kBarCells, finished * kBarCells / total);
  std::ostringstream line;
  if (!title.empty()) line << title << " ";
  line << "[" << std::string(filled, '#') << std::string(kBarCells - filled, '.') << "] "
       << finished << "/" << total << " (" << ok << " ok, " << failed << " failed)";
  if (finished >= total) {
    line << " in " << format_duration(elapsed_seconds);
  } else {
    double remaining = estimate_remaining_seconds(finished, total, elapsed_seconds);
    line << " ETA " << (remaining < 0 ? std::string("--") : format_duration(remaining));
  }
  std::string text = line.str();
  if (!label.empty() && text.size() + 2 < width) {
    std::string shown(label.substr(0, width - text.size() - 2));
    text += "  " + shown;
  }
  if (text.size() > width) text.resize(width);
  return text;
}

}  // namespace fact::util
