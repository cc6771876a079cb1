// Stage 1 entry point: graph in, ranked matches out.
#pragma once
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "fact/discover/match.hpp"
#include "fact/graph/graph.hpp"
#include "fact/problem/device_profile.hpp"
#include "fact/problem/problem.hpp"

namespace fact::discover {

using fact::DeviceProfile;

struct DiscoverOptions {
  DeviceProfile device;
  core::PrecisionMode precision = core::PrecisionMode::Strict;  // Native for bf16/fp16 models
  // Tuning-database entries already present: a match all of whose problems have their key here
  // is classified REUSE. `key_of` spells a problem's key (the tuning database passes its own,
  // realize::tuning_key_id); without it nothing is REUSE.
  std::set<std::string> tuned_keys;
  std::function<std::string(const Problem&, core::PrecisionMode precision)> key_of;
  // The architecture the run targets: "sm_90a" (Hopper kernels) or "host" (the CPU path).
  std::string arch = "sm_90a";
  // The pattern registry's classification (include/fact/registry/registry.hpp): when set, it
  // decides every match's class, reason and entry (the engine sets it); otherwise classify()
  // in rank.hpp decides from tuned_keys alone. `registry` describes it for reports.
  struct Classified {
    Classification classification = Classification::New;
    std::string reason;
    std::string entry;
  };
  std::function<Classified(const Match&, const graph::Graph& captured, const DiscoverOptions&)> classify_match;
  std::string registry;
  // The names the user's pattern selection gave (the plan request's `patterns`: rule names,
  // match rule names or pattern folders; the engine copies them here). An opt-in rule
  // (Rule::opt_in in rule.hpp) accepts only when one of its names is here;
  // otherwise its matches are declined reports and other rules take their nodes. Empty (no
  // selection): no opt-in rule accepts.
  std::set<std::string> opt_in;
  // A GEMM whose unaligned D only leaves the graph (through views) may be planned with padded
  // rows, its result a view of a [.., M, ld] allocation (patterns/gemm/README.md, "Alignment:
  // padding"). Off while a dynamic range is planned: the allocation's row length is no
  // polynomial of the sizes (docs/dynamic_shapes.md).
  bool padded_results = true;
};

// The precision mode a graph runs in unless the user says otherwise: Native when its
// floating inputs and parameters are bf16/fp16, Strict otherwise (float32).
core::PrecisionMode default_precision(const graph::Graph& g);

struct Discovery {
  graph::Graph canonical;       // the graph after canonicalization
  std::vector<Match> matches;   // ranked: accepted by estimated time saved, then pending, declined
};

// Canonicalizes `g` and runs every registered rule. Never throws for unknown ops (they stay
// opaque).
Discovery discover(const graph::Graph& g, const DiscoverOptions& options = {});

}  // namespace fact::discover
