// Helpers of the runtime tests: a scratch folder, a C++ compiler call that builds fixture
// shared libraries at test time, and the GPU gate (tests that need a device skip with a
// visible reason when there is none).
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "fact/runtime/device_buffer.hpp"

namespace fact::runtime::test {

class ScratchDir {
 public:
  ScratchDir() {
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            ("fact-runtime-test-" + std::to_string(::getpid()) + "-" + std::to_string(random()));
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

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The FACT source tree: $FACT_SOURCE_DIR (a checkout copied elsewhere), else where this test
// was built from.
inline std::string source_dir() {
  const char* env = std::getenv("FACT_SOURCE_DIR");
  return env && *env ? env : FACT_SOURCE_DIR;
}

// The headers this build generates (the GEMM epilogue step table assembled from the pattern
// folders): $FACT_GENERATED_DIR, else this build's.
inline std::string generated_dir() {
  const char* env = std::getenv("FACT_GENERATED_DIR");
  return env && *env ? env : FACT_GENERATED_DIR;
}

// The CUDA toolkit root for fixtures that include CUDA headers: $CUDA_HOME, else /usr/local/cuda.
inline std::string cuda_home() {
  const char* env = std::getenv("CUDA_HOME");
  return env && *env ? env : "/usr/local/cuda";
}

// Compiles `source` (C++) into the shared library `output` with $CXX (default c++) and the
// extra `flags`. Returns the compiler's output on failure, empty on success.
inline std::string compile_shared_library(const std::filesystem::path& source,
                                          const std::filesystem::path& output,
                                          const std::string& flags = "") {
  const char* env = std::getenv("CXX");
  const std::string compiler = env && *env ? env : "c++";
  const std::filesystem::path log = output.string() + ".log";
  const std::string command = compiler + " -std=c++17 -shared -fPIC -o '" + output.string() +
                              "' '" + source.string() + "' " + flags + " > '" + log.string() +
                              "' 2>&1";
  const int rc = std::system(command.c_str());
  if (rc == 0 && std::filesystem::exists(output)) return "";
  return "compile failed (" + command + "): " + read_text(log);
}

}  // namespace fact::runtime::test

// Skips the current test, naming the reason, when no CUDA device is visible.
#define FACT_REQUIRE_GPU()                                                                 \
  do {                                                                                     \
    if (::fact::runtime::cuda_device_count() == 0) {                                       \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or returned 0): GPU test " \
                      "not run";                                                           \
    }                                                                                      \
  } while (0)
