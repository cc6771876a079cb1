// Parameter spaces: the kernel configurations worth compiling for one problem class, pruned
// statically before nvcc sees them. Every configuration left out records
// why, for reports.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/realize/kernel_spec.hpp"

namespace fact::realize {

struct SpaceOptions {
  bool exhaustive = false;  // the full cross product of every parameter, pruned; default: curated
  int max_candidates = 60;  // cap on candidates kept (the rest pruned as "over the cap")
  int min_stages = 3;       // fewer mainloop stages fitting in shared memory: pruned
  // Problem sizes when known (0 = unknown): tiles far larger than the problem are pruned.
  int64_t m = 0, n = 0, k = 0, batch = 1;
  // SMs of the target GPU (H100 SXM / H200: 132): problem-derived split-K counts fill them once.
  int sm_count = 132;
};

struct PrunedConfig {
  KernelSpec spec;
  std::string reason;  // one line: "cooperative needs tile M >= 128 (tile M is 64)"
};

struct ParamSpace {
  std::vector<KernelSpec> candidates;  // unique, in preference order (first = default)
  std::vector<PrunedConfig> pruned;

  // {"candidates":[{"name","spec"}...],"pruned":[{"name","reason","spec"}...]}
  nlohmann::json to_json() const;
};

}  // namespace fact::realize
