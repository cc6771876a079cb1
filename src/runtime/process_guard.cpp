#include "fact/runtime/process_guard.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <vector>

#include "fact/runtime/run_report.hpp"

namespace fact::runtime {

namespace {

// Everything the signal handler writes, rendered beforehand: a handler may only call
// async-signal-safe functions (open, write, rename, close, raise), never allocate.
struct CrashText {
  std::string tmp_path, final_path;
  std::string prefix, suffix;  // report = prefix + <signal number> + suffix
  std::string message;         // for stderr
};

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

std::atomic<ProcessGuard*> g_active{nullptr};
std::atomic<const CrashText*> g_crash{nullptr};
std::vector<std::unique_ptr<CrashText>> g_crash_texts;  // kept alive while the guard is
struct sigaction g_previous[sizeof(kFatalSignals) / sizeof(int)];
alignas(16) char g_alt_stack[1 << 16];

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void write_number(int fd, int value) {
  char digits[16];
  int len = 0;
  unsigned v = value < 0 ? 0u : static_cast<unsigned>(value);
  do {
    digits[len++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && len < 16);
  char out[16];
  for (int i = 0; i < len; ++i) out[i] = digits[len - 1 - i];
  write_all(fd, out, static_cast<size_t>(len));
}

void on_fatal_signal(int sig) {
  if (const CrashText* t = g_crash.load()) {
    if (!t->final_path.empty()) {
      const int fd = ::open(t->tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        write_all(fd, t->prefix.data(), t->prefix.size());
        write_number(fd, sig);
        write_all(fd, t->suffix.data(), t->suffix.size());
        ::close(fd);
        ::rename(t->tmp_path.c_str(), t->final_path.c_str());
      }
    }
    write_all(STDERR_FILENO, "fact: crashed with signal ", 26);
    write_number(STDERR_FILENO, sig);
    write_all(STDERR_FILENO, t->message.data(), t->message.size());
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

constexpr const char* kSignalMark = "@@FACT_SIGNAL@@";

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  const char* data = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write " + tmp + ": " + why);
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + why);
  }
}

nlohmann::json timeout_report(const nlohmann::json& context, double timeout_s,
                              const std::string& phase) {
  nlohmann::json j = context.is_object() ? context : nlohmann::json::object();
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
  j["schema"] = kRunReportSchema;
  j["status"] = run_status_name(RunStatus::Error);
  j["timed_out"] = true;
  j["error"] = std::string("timed out after ") + seconds + " s while " + phase;
  return j;
}

ProcessGuard::ProcessGuard(std::string json_path, double timeout_s, nlohmann::json context)
    : json_path_(std::move(json_path)),
      context_(context.is_object() ? std::move(context) : nlohmann::json::object()) {
  ProcessGuard* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, this)) {
    throw std::logic_error("only one ProcessGuard may be active at a time");
  }
  render_crash_report();
  stack_t stack{};
  stack.ss_sp = g_alt_stack;
  stack.ss_size = sizeof g_alt_stack;
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
  for (size_t i = 0; i < std::size(kFatalSignals); ++i) {
    ::sigaction(kFatalSignals[i], &action, &g_previous[i]);
  }
  if (timeout_s > 0 && std::isfinite(timeout_s)) {
    watchdog_ = std::thread([this, timeout_s] { watch(timeout_s); });
  }
}

ProcessGuard::~ProcessGuard() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  for (size_t i = 0; i < std::size(kFatalSignals); ++i) {
    ::sigaction(kFatalSignals[i], &g_previous[i], nullptr);
  }
  g_crash.store(nullptr);
  g_crash_texts.clear();
  g_active.store(nullptr);
}

void ProcessGuard::set_phase(const std::string& phase) {
  std::lock_guard lock(mutex_);
  phase_ = phase;
  render_crash_report();
}

void ProcessGuard::render_crash_report() {
  auto text = std::make_unique<CrashText>();
  text->final_path = json_path_;
  text->tmp_path = json_path_.empty() ? "" : json_path_ + ".tmp." + std::to_string(::getpid());
  nlohmann::json j = context_;
  j["schema"] = kRunReportSchema;
  j["status"] = run_status_name(RunStatus::Error);
  j["crashed"] = true;
  j["timed_out"] = false;
  j["error"] = std::string("crashed with signal ") + kSignalMark + " while " + phase_;
  const std::string rendered = j.dump();
  const size_t mark = rendered.find(kSignalMark);
  text->prefix = rendered.substr(0, mark);
  text->suffix = rendered.substr(mark + std::strlen(kSignalMark)) + "\n";
  text->message = " while " + phase_ + "\n";
  g_crash.store(text.get());
  g_crash_texts.push_back(std::move(text));
}

bool ProcessGuard::finish(const nlohmann::json& report) {
  std::unique_lock lock(mutex_);
  if (done_) return false;
  done_ = true;
  g_crash.store(nullptr);
  lock.unlock();
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (!json_path_.empty()) write_file_atomically(json_path_, report.dump(2) + "\n");
  return true;
}

void ProcessGuard::watch(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  std::unique_lock lock(mutex_);
  if (wake_.wait_until(lock, deadline, [this] { return done_; })) return;
  const nlohmann::json report = timeout_report(context_, timeout_s, phase_);
  if (!json_path_.empty()) {
    try {
      write_file_atomically(json_path_, report.dump(2) + "\n");
    } catch (const std::exception& e) {
      std::cerr << "fact: " << e.what() << "\n";
    }
  }
  std::cerr << "fact: error: " << report.at("error").get<std::string>() << "\n";
  std::cerr.flush();
  std::_Exit(kExitTimeout);
}

}  // namespace fact::runtime
