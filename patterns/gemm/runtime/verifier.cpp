#include "patterns/gemm/runtime/verifier.hpp"

#include <algorithm>

#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/run_options.hpp"

namespace fact::gemm {

using runtime::check_seed;
using runtime::fact_status_name;
using core::tolerance_for;

namespace {

struct CheckStep {
  const char* name;
  int new_inputs_seed;  // -1: keep the current inputs
  bool secondary_stream;
  bool adversarial_scalars;
};

constexpr CheckStep kSequence[] = {
    {"primary", 0, false, false},
    {"fresh_inputs", 1, false, false},
    {"other_stream", -1, true, false},
    {"repoison", -1, false, false},
    {"scalars", 2, false, true},
};

}  // namespace

VerifyOutcome verify_gemm(GemmHarness& harness, const GemmLauncher& launcher, uint64_t base_seed,
                          const std::function<void()>& after_primary, bool vary_bias_multiplier) {
  VerifyOutcome outcome;
  const GemmCase& gemm_case = harness.gemm_case();
  const double tolerance = tolerance_for(gemm_case.precision, gemm_case.problem.d.dtype);
  const GemmCase adversarial = with_adversarial_constants(gemm_case, vary_bias_multiplier);
  bool first = true;
  for (const CheckStep& step : kSequence) {
    if (step.new_inputs_seed >= 0) harness.randomize_inputs(check_seed(base_seed, step.new_inputs_seed));
    const GemmProblem& problem =
        step.adversarial_scalars ? adversarial.problem : gemm_case.problem;
    const cudaStream_t stream =
        step.secondary_stream ? harness.secondary_stream() : harness.primary_stream();
    int status = FACT_OK;
    CheckResult result = harness.check(step.name, launcher, problem, stream, tolerance, &status);
    outcome.checks.push_back(result);
    if (status != FACT_OK) {
      if (first && status == FACT_ERR_CANNOT_IMPLEMENT) {
        outcome.status = RunStatus::CannotImplement;
        outcome.error = "kernel returned FACT_ERR_CANNOT_IMPLEMENT";
      } else {
        outcome.status = RunStatus::Error;
        outcome.error = "check " + std::string(step.name) + ": kernel returned " +
                        fact_status_name(status);
      }
      return outcome;
    }
    first = false;
    if (result.rel_err) {
      outcome.worst_rel_err = std::max(outcome.worst_rel_err.value_or(0.0), *result.rel_err);
    }
    if (!result.passed) {
      outcome.status = RunStatus::Wrong;
      outcome.error = "check " + std::string(step.name) + " failed: " + result.failure;
      return outcome;
    }
    if (step.name == std::string("primary") && after_primary) after_primary();
  }
  return outcome;
}

}  // namespace fact::gemm
