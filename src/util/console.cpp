#include "fact/util/console.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

namespace fact::util {

void Console::lines(std::string_view text) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    line(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

namespace {

int descriptor_of(const std::ostream& out) {
  if (&out == &std::cerr || &out == &std::clog) return STDERR_FILENO;
  if (&out == &std::cout) return STDOUT_FILENO;
  return -1;
}

}  // namespace

StreamConsole::StreamConsole(std::ostream& out)
    : out_(out), terminal_(descriptor_of(out) >= 0 && ::isatty(descriptor_of(out)) == 1) {}

size_t StreamConsole::width() const {
  winsize size{};
  if (descriptor_of(out_) >= 0 && ::ioctl(descriptor_of(out_), TIOCGWINSZ, &size) == 0 && size.ws_col >= 40)
    return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const long parsed = std::strtol(columns, nullptr, 10);
    if (parsed >= 40) return static_cast<size_t>(parsed);
  }
  return 100;
}

void StreamConsole::emit(Kind kind, std::string_view text) {
  std::lock_guard lock(mutex_);
  switch (kind) {
    case Kind::Log:
      return;
    case Kind::Live:
      if (!terminal_) return;
      out_ << "\r\033[2K" << text;
      live_shown_ = !text.empty();
      break;
    case Kind::Line:
      if (live_shown_) out_ << "\r\033[2K";
      live_shown_ = false;
      out_ << text << "\n";
      break;
  }
  out_.flush();
}

CallbackConsole::CallbackConsole(Sink sink, bool terminal, size_t width)
    : sink_(std::move(sink)), terminal_(terminal), width_(width < 40 ? 100 : width) {}

void CallbackConsole::emit(Kind kind, std::string_view text) {
  if (kind == Kind::Live && !terminal_) return;
  std::lock_guard lock(mutex_);
  sink_(kind, text);
}

std::string TextConsole::text() const {
  std::lock_guard lock(mutex_);
  return text_;
}

void TextConsole::emit(Kind kind, std::string_view text) {
  if (kind != Kind::Line) return;
  std::lock_guard lock(mutex_);
  text_.append(text).push_back('\n');
}

Console& stderr_console() {
  static StreamConsole console(std::cerr);
  return console;
}

}  // namespace fact::util
