// The one verifier (fact/runtime/verifier.hpp) for a call given as data: an argument image with
// pointer slots, its operands and results with dtype, shape and strides (a plan's or an agent
// task's call, docs/plan.md), and a kernel entry — what fact_verify_call (c_api.h) runs for the
// agent's gates (python/fact/agent/gates.py). The caller supplies the input values and the
// float64 reference through two functions over host memory, and optionally a named baseline (the
// agent's: the replaced subgraph run by PyTorch) that reads the verifier's own input buffers; the
// verifier allocates, poisons, checks and times — the kernel and the baseline interleaved — on
// the host or on the current CUDA device.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/core/fact_abi.h"

namespace fact::engine {

struct CallVerifyHooks {
  // Writes input set `index` (0, 1) into `operands`: host buffers, one per operand, laid out as
  // its strided storage (element [i...] at Σ i_d · stride[d]). Throws on failure.
  std::function<void(int index, const std::vector<void*>& operands)> fill;
  // Computes the float64 results (dense, row-major over each result's shape) from the operands
  // as they are in memory after the call (host copies). Throws on failure.
  std::function<void(const std::vector<const void*>& operands, const std::vector<double*>& results)> reference;
  // Optional: another implementation of the call, registered as the case's baseline `baseline_name`
  // (default "pytorch"). Runs the call on the verifier's own input buffers (backend memory: host or
  // the CUDA device; each buffer's storage start, laid out as in `fill`) on `stream` (a
  // cudaStream_t, null on the host). Called two ways:
  //   results given (the verifier's result buffers): the verifying call, once; it writes the
  //     results there (a copy from memory of its own is fine) to be checked against the reference;
  //   results empty: a timed run, interleaved with the kernel by the same timer; it computes the
  //     call into memory of its own and writes nothing of the verifier's, so that only the
  //     baseline's work is timed, not a copy into the verifier's buffers.
  // Reported as report["baselines"][baseline_name]. Throws on failure (recorded on the baseline;
  // while being timed it fails the run).
  std::string baseline_name;
  std::function<void(const std::vector<void*>& operands, const std::vector<void*>& results, void* stream)> baseline;
};

// Verifies and (unless request["verify_only"]) times `entry` on the call. `request`:
//   {"device": "host"|"cuda", "call": {"operands": [{"dtype", "shape", "stride"}], "results":
//    [...], "args": {"size", "hex", "pointers"}}, "tolerance", "seed", "verify_only",
//    "timing": {"warmup_runs", "min_runs", "min_time_s", "max_runs"}, "settle_s"}
// Returns the fact.run/1 report (runtime::to_json), with the baseline's verdict and time under
// "baselines" when hooks.baseline is set. The reference is computed after each call
// and the reference buffers are poisoned before it: no reference exists while the kernel runs.
// Throws std::invalid_argument for a malformed request, std::runtime_error when the engine was
// built without the runtime.
nlohmann::json verify_call(const nlohmann::json& request, FactEntry entry, const CallVerifyHooks& hooks);

}  // namespace fact::engine
