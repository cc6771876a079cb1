// Helpers shared by the build / tuning tests: a scratch folder per test and fake "compilers"
// (POSIX shell one-liners) whose behaviour the tests choose.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fact/util/atomic_file.hpp"

namespace fact::test {

class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "test";
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = std::filesystem::temp_directory_path() / ("fact-test-" + name + "-" + util::unique_suffix());
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A compile command that appends a line to `counter` (so tests can count compiles), prints
// `log_text` to stderr, then copies the source to the output ("the library") and exits with
// `exit_code`.
inline std::vector<std::string> fake_compiler(const std::filesystem::path& counter,
                                              const std::string& log_text = "", int exit_code = 0,
                                              double sleep_seconds = 0.0) {
  std::string script = "echo compiled >> '" + counter.string() + "'; ";
  if (sleep_seconds > 0) script += "sleep " + std::to_string(sleep_seconds) + "; ";
  if (!log_text.empty()) script += "printf '%s\\n' '" + log_text + "' >&2; ";
  if (exit_code == 0) {
    script += "cp {source} {output}";
  } else {
    script += "exit " + std::to_string(exit_code);
  }
  return {"sh", "-c", script};
}

inline int count_lines(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) return 0;
  std::string text = util::read_file(file);
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

}  // namespace fact::test
