// The one verification and timing sequence every kernel passes, whatever its kind
// (docs/runtime.md, "What is checked"). The kind supplies a VerifyCase (verify_case.hpp); the
// verifier allocates its buffers with guard bands on a VerifyBackend and runs, stopping at the
// first failure:
//   primary       new inputs (check_seed index 0), primary stream, workspace pre-filled 0xFF
//   repoison      same inputs, outputs poisoned again: every element written again (and, for a
//                 deterministic case, bit-identical to the run before)
//   fresh_inputs  new inputs (index 1): a kernel replaying a cached result fails
//   other_stream  same inputs, the secondary stream (a second CUDA stream, the poisoning queued
//                 behind a delay; a second thread on the host): a kernel ignoring its stream
//                 races the poison
//   <varied>      new inputs (index 2) and the case's changed constants ("scalars", "scale"),
//                 when the case has some
// Every check requires: the call returns FACT_OK; every output element written (none still
// holding the poison); none NaN/Inf; nothing written outside the output views (guard bands and
// gaps of every output, guard bands of every input); the inputs unchanged; the outputs final
// when the stream is synchronized (unchanged after the whole device and a settle time); and
// ‖out − ref‖₂ / ‖ref‖₂ ≤ the case's tolerance for every output against its float64 reference.
// Then, unless verify_only, the kernel and the baselines are timed interleaved on the same
// inputs. Baselines are verified once (a "primary" check on the current inputs); a baseline
// with a `timed` call (verify_case.hpp: the same work without the copy into the outputs) is
// timed by that one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fact/runtime/process_guard.hpp"
#include "fact/runtime/run_report.hpp"
#include "fact/runtime/timing.hpp"
#include "fact/runtime/verify_backend.hpp"
#include "fact/runtime/verify_case.hpp"

namespace fact::runtime {

struct VerifyOptions {
  uint64_t base_seed = 1;         // check i takes inputs check_seed(base_seed, i)
  bool verify_only = false;       // no timing
  TimingOptions timing;
  std::vector<std::string> baselines;  // names the case's kind registered
  size_t guard_bytes = 4096;      // poisoned bytes on each side of every buffer
  int64_t stream_delay_ns = 2'000'000;  // the other_stream check's delay before the poison
  int64_t settle_ns = 0;          // extra wait before "outputs final" is judged (host: 50 ms)
};

// Verifies `kernel` (may be empty: baselines only) on `verify_case` and times it with the
// baselines, filling report.checks, rel_err, status, error, workspace_bytes, ms, tflops,
// accuracy, baselines and timing (the kind fills problem, tolerance and device). Statuses:
// FACT_ERR_CANNOT_IMPLEMENT from the workspace query or the first call gives CannotImplement;
// another non-OK status gives Error; a failed check gives Wrong (no timing). A baseline's
// failure is recorded on that baseline only. Throws for a backend failure (a CUDA error), which
// the caller reports as Error. `guard` (may be null) is told the phase.
void verify_and_time(VerifyBackend& backend, VerifyCase& verify_case, const CallFunction& kernel,
                     const VerifyOptions& options, ProcessGuard* guard, RunReport& report);

// A base seed from the system's random device (never 0).
uint64_t fresh_seed();

}  // namespace fact::runtime
