// The verification sequence every kernel passes (docs/runtime.md), run on a GemmHarness:
//   primary       fresh random inputs (seed 0), primary stream, the case's scalars
//   fresh_inputs  NEW random inputs (seed 1): a kernel replaying a cached result fails
//   other_stream  same inputs, the secondary stream, poisoning queued behind a spin: a kernel
//                 that ignores its stream argument races the poison
//   repoison      same inputs, output poisoned again: every element must be written again
//   scalars       new inputs (seed 2) and every constant unlike any default and distinct per
//                 step (alpha -1.25, each scale, add, residual beta, leaky slope and clamp
//                 bound: with_adversarial_constants): a kernel ignoring a step's constant, or
//                 reading another step's, fails
// Each check also requires inputs unchanged, no write outside D, no NaN/Inf, and the relative
// error within the tolerance.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fact/runtime/run_report.hpp"
#include "patterns/gemm/runtime/gemm_harness.hpp"

namespace fact::gemm {

using runtime::RunStatus;

struct VerifyOutcome {
  RunStatus status = RunStatus::Ok;  // Ok, Wrong, CannotImplement or Error
  std::string error;                 // why not Ok
  std::vector<CheckResult> checks;   // the checks run, in order (stops at the first failure)
  std::optional<double> worst_rel_err;
};

// Runs the sequence with seeds check_seed(base_seed, i). `after_primary`, when set, is called
// once the primary check passed, with the primary inputs still in the harness (strict mode
// compares cuBLAS SGEMM there). FACT_ERR_CANNOT_IMPLEMENT on the first call gives
// CannotImplement; any other non-OK status, or a refusal after the first call, gives Error.
// Throws CudaError when a CUDA call fails (the caller reports it as Error).
// `vary_bias_multiplier` false: the scalars check keeps each bias multiplier (a launcher that
// fuses a bias only at multiplier 1, Baseline::bias_multiplier_fixed).
VerifyOutcome verify_gemm(GemmHarness& harness, const GemmLauncher& launcher, uint64_t base_seed,
                          const std::function<void()>& after_primary = {},
                          bool vary_bias_multiplier = true);

}  // namespace fact::gemm
