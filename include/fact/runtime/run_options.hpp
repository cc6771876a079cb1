// Options of `fact run-kernel`, independent of the CLI parser and of CUDA.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fact/core/precision.hpp"
#include "fact/runtime/timing.hpp"

namespace fact::runtime {

struct RunKernelOptions {
  std::string lib;        // kernel library (.so); empty with baseline_only
  std::string problem_json;  // a problem file (problem_to_json); else the words below
  std::string problem;    // the kind's command-line problem: "m=..,n=..,k=..,batch=.." for GEMMs
  std::string kind;       // the problem's kind for baseline_only runs without problem_json
  core::PrecisionMode precision = core::PrecisionMode::Strict;
  bool verify_only = false;   // skip timing (of the kernel and of the baselines)
  bool baseline_only = false; // no kernel: run the baselines on the problem below
  std::vector<std::string> baselines;  // "cublas", "cublaslt"
  // The rest of a command-line problem (a kind's spellings; for GEMMs see
  // patterns/gemm/kind/problem_args.hpp).
  std::string dtype = "bf16";
  std::string out_dtype;          // empty: same as dtype
  std::string epilogue;           // "bias,gelu_tanh"; empty: plain GEMM
  std::string layout = "tn";      // A and B: t = row-major, n = column-major
  std::string json_path;          // where the report goes; empty: stdout summary only
  double timeout_s = 30.0;        // watchdog (ProcessGuard); <= 0: none
  uint64_t seed = 0;              // base seed of the random inputs; 0: a fresh one
  int device = 0;
  TimingOptions timing;
};

inline constexpr const char* kKnownBaselines[] = {"cublas", "cublaslt"};

// "cublas,cublaslt" → {"cublas", "cublaslt"}; "" → {}. Throws std::invalid_argument for an
// unknown or repeated name.
std::vector<std::string> parse_baseline_list(std::string_view text);

// Throws std::invalid_argument when the options contradict each other (baseline_only with a
// library or without baselines, no problem, neither library nor baseline_only).
void validate(const RunKernelOptions& options);

// Seed of check number `index` (0, 1, ...) derived from the base seed: distinct per check.
uint64_t check_seed(uint64_t base_seed, int index);

}  // namespace fact::runtime
