// The verification sequence every kernel passes (DESIGN.md rule 9), run on a GemmHarness:
//   primary       fresh random inputs (seed 0), primary stream, the case's scalars
//   fresh_inputs  NEW random inputs (seed 1): a kernel replaying a cached result fails
//   other_stream  same inputs, the secondary stream, poisoning queued behind a spin: a kernel
//                 that ignores its stream argument races the poison
//   repoison      same inputs, output poisoned again: every element must be written again
//   scalars       new inputs (seed 2) and scalars unlike any default (alpha = -1.25, beta = 0.5,
//                 leaky slope 0.2, clamp [-0.6, 0.4]): a kernel ignoring an ABI scalar fails
// Each check also requires inputs unchanged, no write outside D, no NaN/Inf, and the relative
// error within the tolerance.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "patterns/gemm/runtime/gemm_harness.hpp"
#include "fact/runtime/run_report.hpp"

namespace fact::runtime {

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
VerifyOutcome verify_gemm(GemmHarness& harness, const GemmLauncher& launcher, uint64_t base_seed,
                          const std::function<void()>& after_primary = {});

}  // namespace fact::runtime
