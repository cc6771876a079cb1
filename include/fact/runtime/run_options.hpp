// Options of `fact run-kernel`, independent of the CLI parser and of CUDA.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fact/core/precision.hpp"
#include "fact/runtime/timing.hpp"

namespace fact::runtime {

struct RunKernelOptions {
  std::string lib;        // kernel library (.so); empty with baseline_only
  std::string problem_json;  // a problem file (problem_to_json); else the words below
  std::string problem;    // the kind's command-line problem (the word "problem" of its reader)
  // The rest of a command-line problem: further words in the kind's own spellings, handed to
  // ProblemKind::from_command_line with "problem" (an empty word: the kind's default).
  std::map<std::string, std::string> problem_words;
  std::string kind;       // the problem's kind for baseline_only runs without problem_json
  core::PrecisionMode precision = core::PrecisionMode::Strict;
  bool verify_only = false;   // skip timing (of the kernel and of the baselines)
  bool baseline_only = false; // no kernel: run the baselines on the problem
  // Baselines by the names the problem's kind registered (KindRuntime::baselines()); a
  // baseline_only run without names runs all of them.
  std::vector<std::string> baselines;
  std::string json_path;          // where the report goes; empty: stdout summary only
  double timeout_s = 30.0;        // watchdog (ProcessGuard); <= 0: none
  uint64_t seed = 0;              // base seed of the random inputs; 0: a fresh one
  int device = 0;
  TimingOptions timing;
};

// "a,b" → {"a", "b"}; "" → {}; spaces around names dropped. Throws std::invalid_argument for a
// repeated name (names are checked against the kind's by check_baselines).
std::vector<std::string> parse_baseline_list(std::string_view text);

// Throws std::invalid_argument naming `kind` and its baselines when a name in `names` is not one
// of `registered`.
void check_baselines(const std::vector<std::string>& names, const std::vector<std::string>& registered,
                     const std::string& kind);

// Throws std::invalid_argument when the options contradict each other (baseline_only with a
// library, no problem, neither library nor baseline_only, min_runs above max_runs).
void validate(const RunKernelOptions& options);

// Seed of check number `index` (0, 1, ...) derived from the base seed: distinct per check.
uint64_t check_seed(uint64_t base_seed, int index);

}  // namespace fact::runtime
