// The one verifier (fact/runtime/verifier.hpp) for a call given as data: an argument image with
// pointer slots, its operands and results with dtype, shape and strides (a plan's or an agent
// task's call, docs/plan.md), and a kernel entry — what fact_verify_call (c_api.h) runs for the
// agent's gates (python/fact/agent/gates.py). The caller supplies the input values and the
// float64 reference through two functions over host memory; the verifier allocates, poisons,
// checks and times on the host or on the current CUDA device.
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
};

// Verifies and (unless request["verify_only"]) times `entry` on the call. `request`:
//   {"device": "host"|"cuda", "call": {"operands": [{"dtype", "shape", "stride"}], "results":
//    [...], "args": {"size", "hex", "pointers"}}, "tolerance", "seed", "verify_only",
//    "timing": {"warmup_runs", "min_runs", "min_time_s", "max_runs"}, "settle_s"}
// Returns the fact.run/1 report (runtime::to_json). The reference is computed after each call
// and the reference buffers are poisoned before it: no reference exists while the kernel runs.
// Throws std::invalid_argument for a malformed request, std::runtime_error when the engine was
// built without the runtime.
nlohmann::json verify_call(const nlohmann::json& request, FactEntry entry, const CallVerifyHooks& hooks);

}  // namespace fact::engine
