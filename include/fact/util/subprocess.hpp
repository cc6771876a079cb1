// Running child processes without a shell: spawn an argv, optionally in another directory, with
// stdout+stderr sent to a file, under a wall-clock limit. A child that outlives its limit is
// killed together with its process group (so a hung kernel runner or a stuck compiler and
// its children go away), and the result says so.
#pragma once
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fact::util {

struct ProcessOptions {
  std::filesystem::path working_directory;  // empty: the caller's
  std::filesystem::path output_file;        // stdout+stderr go here (truncated); empty: inherited
  std::optional<std::chrono::milliseconds> timeout;  // none: wait as long as it takes
  std::vector<std::pair<std::string, std::string>> extra_environment;  // added / overridden
};

struct ProcessResult {
  int exit_code = -1;    // when the child exited normally
  int term_signal = 0;   // when a signal ended it (SIGKILL after a timeout included)
  bool timed_out = false;
  bool spawn_failed = false;  // the program could not be started (not found, not executable)
  std::string spawn_error;
  double seconds = 0.0;  // wall time

  bool succeeded() const { return !spawn_failed && !timed_out && term_signal == 0 && exit_code == 0; }
  // "exit 1", "killed by signal 11 (Segmentation fault)", "timed out after 30.0s", ...
  std::string describe() const;
};

// Runs `argv` (argv[0] is looked up on PATH when it has no '/') and waits for it.
// Never throws for a failing child; throws std::invalid_argument for an empty argv.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

// Runs `argv` and returns its stdout+stderr as text (up to `max_bytes`); nullopt when it could
// not be started or did not exit 0 within `timeout`.
std::optional<std::string> capture_output(const std::vector<std::string>& argv,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                          size_t max_bytes = 1 << 20);

// POSIX-shell quoting: the word is read back as exactly `word` by /bin/sh.
std::string shell_quote(std::string_view word);
std::string shell_join(const std::vector<std::string>& argv);

// Full path of `name` on $PATH (or `name` itself when it contains '/' and is executable);
// nullopt when absent.
std::optional<std::filesystem::path> find_executable(std::string_view name);

// The running program (/proc/self/exe, resolved).
std::filesystem::path current_executable();

// The Python interpreter FACT's Python stages (capture, package, plots) run in: $FACT_PYTHON;
// else python3 beside the running executable (a `pip install`'s environment bin/, or Python
// itself when libfact is loaded in process); else the interpreter this build was configured
// with (the environment holding torch and `fact`) while it exists; else python3 on PATH.
std::string python_interpreter();

// The last `max_lines` lines of a text file (empty when unreadable).
std::string tail_of_file(const std::filesystem::path& path, size_t max_lines = 40);

}  // namespace fact::util
