// The result of stage 1: one match per subgraph worth replacing (or recognized and declined).
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/graph/graph.hpp"
#include "fact/problem/operand_transform.hpp"
#include "fact/problem/problem.hpp"

namespace fact::discover {

enum class MatchStatus {
  Accepted,  // a template exists and the checks passed
  Declined,  // the pattern matched structurally, a check failed: `reason` says which
  Pending,   // recognized, but no template realizes it yet
};
std::string_view match_status_name(MatchStatus s);

// Against the pattern registry: REUSE = an existing tuned kernel/template covers it as is;
// ADAPT = a template covers it with new parameters (shape, dtype, epilogue); NEW = no template.
enum class Classification { Reuse, Adapt, New };
std::string_view classification_name(Classification c);

struct Match {
  std::string rule;     // fusion name, e.g. "gemm_bias_gelu_tanh"
  std::string pattern;  // pattern folder that owns it
  MatchStatus status = MatchStatus::Accepted;
  std::string reason;   // why declined / pending; empty when accepted
  Classification classification = Classification::Adapt;
  std::string classification_reason;  // why that class (the pattern registry's explanation)
  std::string registry_entry;         // the registry entry it was classified against ("" = none)
  std::vector<graph::NodeId> nodes;                 // captured nodes covered (graph order)
  std::map<std::string, graph::ValueId> roles;      // "input", "weight", "bias", "residual", ...
  std::vector<Problem> problems;                    // one per kernel call, in execution order
  // Operands the calls read that are computed once, when the plan is applied, from parameters,
  // buffers or constants (operand_transform.hpp): packed or folded weights.
  std::vector<DerivedOperand> derived;
  std::vector<graph::ValueId> outputs;              // values it hands to the rest of the graph
  graph::DType dtype = graph::DType::Unknown;       // the match's compute dtype
  // Pattern-specific facts for reports; "note" (a string): how an accepted match runs, printed
  // under the discovery table and copied into its plan replacement (e.g. "K padded 5921→5924").
  nlohmann::json extra = nlohmann::json::object();
  // Roofline estimates on the device profile (microseconds).
  double est_before_us = 0.0;  // as PyTorch runs it (separate kernels, intermediates in memory)
  double est_after_us = 0.0;   // as one fused kernel per problem
  double est_saved_us() const { return est_before_us - est_after_us; }
};

// {"rule","pattern","status","reason","classification","classification_reason",
//  "registry_entry","nodes","roles","outputs","dtype",
//  "problems":[problem_to_json..],"derived":[derived_to_json..] (when any),"extra",
//  "est_before_us","est_after_us","est_saved_us"}
nlohmann::json match_to_json(const Match& m);
// Inverse of match_to_json (est_saved_us is derived); throws std::invalid_argument naming the
// field when one is missing or malformed.
Match match_from_json(const nlohmann::json& j);

}  // namespace fact::discover
