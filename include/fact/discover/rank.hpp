// Ranking matches: roofline estimates of the time a match takes as PyTorch runs it and as
// FACT's fused kernels would, and the REUSE / ADAPT / NEW classification.
#pragma once
#include <vector>

#include "fact/discover/discover.hpp"
#include "fact/discover/match.hpp"
#include "fact/graph/graph.hpp"

namespace fact::discover {

// Seconds one captured node takes in eager PyTorch at the device's ceilings: matmuls at their
// roofline (fp32 at the CUDA-core rate unless precision is "tf32"), other ops as one memory
// pass over their inputs and outputs, plus a launch each; views, and dtype casts or
// contiguous() that change nothing, cost nothing.
double pytorch_node_seconds(const graph::Graph& captured, const graph::Node& node,
                            const DiscoverOptions& options);

// Sets est_before_us (the captured nodes of m.nodes) and est_after_us: each problem's fused
// kernel at its roofline (its kind's fused_seconds) for accepted and pending matches,
// est_before_us for declined matches (nothing changes).
void estimate(Match& m, const graph::Graph& captured, const DiscoverOptions& options);

// NEW for pending matches and patterns without a template; REUSE for an accepted match when
// every problem's key (options.key_of) is among options.tuned_keys; ADAPT otherwise.
Classification classify(const Match& m, bool pattern_has_template, const DiscoverOptions& options);

// Accepted by estimated time saved (largest first), then pending, then declined (each by
// est_before_us, largest first). Stable.
void rank_matches(std::vector<Match>& matches);

}  // namespace fact::discover
