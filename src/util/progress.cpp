#include "fact/util/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace fact::util {

void EtaEstimator::update(size_t finished, double seconds) {
  finished_ = finished;
  if (finished == 0 || finished + 1 >= total_) {
    finish_at_.reset();  // no rate yet, or one long job left: the elapsed time says more
    return;
  }
  finish_at_ = seconds + seconds / double(finished) * double(total_ - finished);
}

std::optional<double> EtaEstimator::remaining(double now) const {
  if (!finish_at_ || *finish_at_ <= now) return std::nullopt;
  return *finish_at_ - now;
}

namespace {

// "3/8 kernels compiled" or "3/8 kernels done (2 compiled, 1 failed)".
std::string counts(const ProgressBar::Words& words, size_t ok, size_t failed, size_t total) {
  std::string text = std::to_string(ok + failed) + "/" + std::to_string(total) + " " + words.items + " ";
  if (failed == 0) return text + words.done;
  return text + "done (" + std::to_string(ok) + " " + words.done + ", " + std::to_string(failed) + " failed)";
}

// "1m12s elapsed, about 2m05s left" / "... waiting on the last one".
std::string timing(double elapsed, std::optional<double> remaining, size_t finished, size_t total) {
  std::string text = ProgressBar::format_duration(elapsed) + " elapsed";
  if (remaining) return text + ", about " + ProgressBar::format_duration(*remaining) + " left";
  if (finished + 1 == total) return text + ", waiting on the last one";
  return text;
}

}  // namespace

ProgressBar::ProgressBar(std::string title, size_t total, Console* console, Words words, bool announce)
    : title_(std::move(title)),
      total_(total),
      console_(console),
      words_(std::move(words)),
      announce_(announce),
      eta_(total),
      start_(std::chrono::steady_clock::now()) {
  if (console_ == nullptr || total_ == 0) return;
  {
    std::lock_guard lock(mutex_);
    draw_live_locked();
  }
  ticker_ = std::thread([this] { tick(); });
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::tick() {
  std::unique_lock lock(mutex_);
  while (!finished_) {
    wake_.wait_for(lock, std::chrono::seconds(1));
    if (finished_) break;
    draw_live_locked();
    if (elapsed_seconds() - last_line_at_ >= heartbeat_seconds_) report_locked({}, false, false);
  }
}

void ProgressBar::advance(bool failed, std::string_view label) {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  (failed ? failed_ : ok_) += 1;
  eta_.update(ok_ + failed_, elapsed_seconds());
  if (!label.empty()) label_ = std::string(label);
  const size_t done = ok_ + failed_;
  const size_t decile = total_ == 0 ? 10 : done * 10 / total_;
  const bool due = announce_ || decile > last_reported_decile_ ||
                   elapsed_seconds() - last_line_at_ >= kLineSeconds;
  if (due && (announce_ || done < total_)) report_locked(label, failed, announce_);
  draw_live_locked();
}

void ProgressBar::finish() {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  std::lock_guard lock(mutex_);
  if (console_ == nullptr || total_ == 0) return;
  console_->live("");
  std::string line = title_ + ": " + counts(words_, ok_, failed_, total_) + " in " + format_duration(elapsed_seconds());
  console_->line(line);
}

void ProgressBar::set_heartbeat_seconds(double seconds) {
  std::lock_guard lock(mutex_);
  heartbeat_seconds_ = seconds;
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

void ProgressBar::draw_live_locked() {
  if (console_ == nullptr || !console_->is_terminal()) return;
  const double elapsed = elapsed_seconds();
  console_->live(status_line(title_, words_, ok_, failed_, total_, elapsed, eta_.remaining(elapsed),
                             announce_ ? std::string_view() : std::string_view(label_), console_->width() - 1));
}

// A progress line: shown where the terminal has no status line, logged always; an announced
// item's line is shown on a terminal too.
void ProgressBar::report_locked(std::string_view label, bool label_failed, bool announce_now) {
  const double elapsed = elapsed_seconds();
  last_line_at_ = elapsed;
  last_reported_decile_ = total_ == 0 ? 10 : (ok_ + failed_) * 10 / total_;
  if (console_ == nullptr) return;
  const std::string line = report_line(title_, words_, ok_, failed_, total_, elapsed, eta_.remaining(elapsed),
                                       label, label_failed);
  if (console_->is_terminal() && !announce_now) {
    console_->log(line);
  } else {
    console_->line(line);
  }
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

std::string ProgressBar::status_line(std::string_view title, const Words& words, size_t ok, size_t failed,
                                     size_t total, double elapsed_seconds, std::optional<double> remaining,
                                     std::string_view label, size_t width) {
  constexpr size_t kBarCells = 24;
  const size_t finished = ok + failed;
  const size_t filled = total == 0 ? kBarCells : std::min(kBarCells, finished * kBarCells / total);
  std::ostringstream line;
  if (!title.empty()) line << title << " ";
  line << "[" << std::string(filled, '#') << std::string(kBarCells - filled, '.') << "] "
       << counts(words, ok, failed, total) << " " << timing(elapsed_seconds, remaining, finished, total);
  std::string text = line.str();
  if (!label.empty() && text.size() + 2 + label.size() <= width) text += "  " + std::string(label);
  if (text.size() > width) text.resize(width);
  return text;
}

std::string ProgressBar::report_line(std::string_view title, const Words& words, size_t ok, size_t failed,
                                     size_t total, double elapsed_seconds, std::optional<double> remaining,
                                     std::string_view label, bool label_failed) {
  std::string text = std::string(title) + ": " + counts(words, ok, failed, total);
  if (!label.empty()) text += " (" + std::string(label) + (label_failed ? ": failed" : "") + ")";
  return text + " " + timing(elapsed_seconds, remaining, ok + failed, total);
}

}  // namespace fact::util
