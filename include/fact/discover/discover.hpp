// Stage 1 entry point: graph in, ranked matches out.
#pragma once
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "fact/discover/match.hpp"
#include "fact/graph/graph.hpp"

namespace fact::discover {

// Ceilings used by the roofline estimates. Defaults are an H100 SXM's; measured numbers
// (fact tune / bench) replace them.
struct DeviceProfile {
  std::string name = "H100 SXM (defaults)";
  double hbm_bytes_per_s = 3.0e12;          // measured device-to-device copy rate
  double bf16_flops = 750e12;               // dense bf16/fp16 tensor-core rate
  double tf32_flops = 370e12;               // dense tf32 tensor-core rate
  double fp32_flops = 50e12;                // CUDA-core fp32 (SGEMM) rate
  double launch_overhead_s = 4e-6;          // per kernel
};

struct DiscoverOptions {
  DeviceProfile device;
  std::string precision = "strict";  // "strict", "tf32", or "native" (bf16/fp16 models)
  // Tuning-database entries already present: a match all of whose GEMMs have their key here is
  // classified REUSE. `key_of` spells a GEMM's key (tuning_key below when empty; the tuning
  // database can pass its own spelling, e.g. realize::TuningKey::id()).
  std::set<std::string> tuned_keys;
  std::function<std::string(const GemmProblem&, const std::string& precision)> key_of;
};

// "gemm_bias_gelu_tanh|bf16|tn|65536x3072x768|b1|native": fusion, dtype, A/B layout tokens,
// MxNxK, batch, math mode ("native", "tf32x3", "tf32") under `precision`.
std::string tuning_key(const GemmProblem& problem, const std::string& precision);

struct Discovery {
  graph::Graph canonical;       // the graph after canonicalization
  std::vector<Match> matches;   // ranked: accepted by estimated time saved, then pending, declined
};

// Canonicalizes `g` and runs every registered rule. Never throws for unknown ops (they stay
// opaque); throws std::invalid_argument for an unknown precision mode.
Discovery discover(const graph::Graph& g, const DiscoverOptions& options = {});

}  // namespace fact::discover
