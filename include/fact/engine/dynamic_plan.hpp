// Planning a declared dynamic range (docs/dynamic_shapes.md, "How the engine plans a range"):
// one plan that serves every size of the graph's symbols inside their ranges. make_plan calls
// it for a graph document with `symbols`; the pieces are here for tests.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/engine/engine.hpp"
#include "fact/graph/concretize.hpp"

namespace fact::engine {

// Plans `document` (a graph with symbols) for the request:
//  1. the hint's plan with the request's settings into out_dir (discovery.json, the discovered
//     hook, tuning: what the report reads);
//  2. samples near the hint, each planned statically without compiling or tuning in a scratch
//     folder; a replacement that a sample plans differently is declined with the sample's
//     reason and sizes;
//  3. every int field of each call's argument image, operand and result shapes and strides and
//     pointer element offsets fitted as polynomials (degree <= 1 in each symbol) on the
//     factorial samples and checked exactly on the others; a misfit declines the replacement
//     with the field and the values seen;
//  4. the graph planned at every bucket edge tuple with the request's settings: each call's
//     kernel, config and (when it differs outside the patched fields) image per bucket.
// Writes <out_dir>/plan.json (fact.plan/2 with `symbols`, symbolic sizes, `args.patches`,
// `buckets`); the scratch folders are removed. Progress lines go to the request's console.
// Throws like make_plan, and std::runtime_error naming the sizes when a sample cannot be planned.
PlanResult make_dynamic_plan(const PlanRequest& request, const nlohmann::json& document,
                             const DiscoveredHook& on_discovered = {});

// A symbol's sample sizes: two to fit and one to check, near the hint (rounded up to the
// multiple), odd multiples where the range allows, inside [min, max]. Sizes repeat when the
// range holds fewer than three multiples.
std::vector<int64_t> sample_sizes(const graph::SymbolRange& symbol);

// A symbol's ascending bucket edges: the powers of two inside the range, the typical sizes and
// the maximum, each rounded up to the multiple (down, to the last multiple inside the range,
// where rounding up leaves it). A size v falls into the first bucket whose edge is >= v.
std::vector<int64_t> bucket_edges(const graph::SymbolRange& symbol);

// The row-major index (the last symbol fastest) of the bucket tuple that `sizes` fall into.
// Throws std::out_of_range for a size above its symbol's last edge.
size_t bucket_index(const std::vector<std::vector<int64_t>>& edges, const std::vector<int64_t>& sizes);

}  // namespace fact::engine
