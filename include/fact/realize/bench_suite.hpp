// Benchmark suites (`fact bench <suite>`): named lists of problems, each tuned and timed against
// the kind's library baselines in the same run. Pattern folders register their suites
// (patterns/gemm: "gemm"); the command knows none of them.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "fact/problem/problem.hpp"

namespace fact::realize {

struct BenchSuiteCase {
  std::string name;                          // "square_4096_fp32"
  std::string precision;                     // "strict", "tf32", "native"
  Problem problem;
  std::vector<std::string> baselines;        // library baselines timed with the winner
  // The same problem in the kind's command-line words ({"problem", "dtype", "epilogue",
  // "layout", ...}), for the child commands (`fact run-kernel --baseline-only`, `fact tune`).
  std::map<std::string, std::string> words;
};

struct BenchSuite {
  std::string name;
  std::string description;                   // one line for --help
  std::vector<BenchSuiteCase> cases;
  BenchSuiteCase preflight;                  // a small baseline-only run that proves the device
  std::string tuning_cost_case;              // the case whose cold/warm tuning is timed
};

// Suites are built on demand (their problems come from the kinds' registries).
using BenchSuiteFactory = BenchSuite (*)();
// Throws std::logic_error when the name is taken.
void register_bench_suite(const std::string& name, BenchSuiteFactory factory);
// Throws std::invalid_argument naming the registered suites when `name` is not one.
BenchSuite bench_suite(const std::string& name);
std::vector<std::string> bench_suite_names();  // sorted

struct BenchSuiteRegistrar {
  BenchSuiteRegistrar(const std::string& name, BenchSuiteFactory factory) {
    register_bench_suite(name, factory);
  }
};

}  // namespace fact::realize
