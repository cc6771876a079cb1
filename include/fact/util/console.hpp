// Where the engine's lines and progress go while it works: a terminal (a status line redrawn in
// place), a pipe or file (lines only), and a run's log. The build driver, the tuner and the
// plan stage write through a Console; the `fact` commands give them one on stderr, and the C
// API's fact_optimize_plan one that hands every line to its caller (python/fact/optimize_run.py
// shows them and writes them into <out>/logs/optimize.log).
#pragma once
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <mutex>
#include <string>
#include <string_view>

namespace fact::util {

class Console {
 public:
  enum class Kind { Line = 0, Live = 1, Log = 2 };
  virtual ~Console() = default;
  // Kind::Line: a finished line (no newline), for the terminal and the log.
  void line(std::string_view text) { emit(Kind::Line, text); }
  // Kind::Live: the status line, redrawn in place on a terminal and never logged; "" clears it.
  // Draws nothing where is_terminal() is false.
  void live(std::string_view text) { emit(Kind::Live, text); }
  // Kind::Log: a line for the log only (what a terminal shows as the status line instead).
  void log(std::string_view text) { emit(Kind::Log, text); }
  // Several lines at once (a table): each one as line().
  void lines(std::string_view text);

  // True when live() draws (a terminal); otherwise progress comes as line()s.
  virtual bool is_terminal() const = 0;
  // Columns a live line may use.
  virtual size_t width() const { return 100; }

 protected:
  // Thread-safe in every implementation.
  virtual void emit(Kind kind, std::string_view text) = 0;
};

// A stream (std::cerr for the `fact` commands): a terminal when the stream is std::cerr or
// std::cout and its file descriptor is one. No log: Kind::Log is dropped.
class StreamConsole : public Console {
 public:
  explicit StreamConsole(std::ostream& out);
  bool is_terminal() const override { return terminal_; }
  size_t width() const override;

 protected:
  void emit(Kind kind, std::string_view text) override;

 private:
  std::ostream& out_;
  bool terminal_;
  bool live_shown_ = false;
  std::mutex mutex_;
};

// Every line to a function (the C API's caller). `terminal` and `width` are the caller's.
class CallbackConsole : public Console {
 public:
  using Sink = std::function<void(Kind, std::string_view)>;
  CallbackConsole(Sink sink, bool terminal, size_t width);
  bool is_terminal() const override { return terminal_; }
  size_t width() const override { return width_; }

 protected:
  void emit(Kind kind, std::string_view text) override;

 private:
  Sink sink_;
  bool terminal_;
  size_t width_;
  std::mutex mutex_;
};

// Collects the lines (Kind::Line) as text, one '\n' after each; for callers that show them later.
class TextConsole : public Console {
 public:
  bool is_terminal() const override { return false; }
  std::string text() const;

 protected:
  void emit(Kind kind, std::string_view text) override;

 private:
  std::string text_;
  mutable std::mutex mutex_;
};

// The console the `fact` commands use: std::cerr.
Console& stderr_console();

}  // namespace fact::util
