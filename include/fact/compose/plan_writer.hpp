// Stage 3's contract: the plan (docs/plan.md, schema fact.plan/2). For every match the engine
// writes the complete replacement — the captured nodes it replaces, the values it reads and
// produces, and per call its kind, kernel, tolerance and argument image (the kind's ABI struct
// as bytes with its address slots, from ProblemKind::pack). Python executes it and re-derives
// nothing.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/discover/discover.hpp"
#include "fact/graph/graph.hpp"
#include "fact/realize/realize_matches.hpp"

namespace fact::compose {

inline constexpr const char* kPlanSchema = "fact.plan/2";

struct PlanContext {
  core::PrecisionMode precision = core::PrecisionMode::Strict;
  std::string device = "cpu";                       // of the example inputs
  nlohmann::json inputs = nlohmann::json::array();  // the planned signature (from the caller)
  std::string capture;                              // "torch.export", ...
  std::optional<std::vector<std::string>> patterns; // the selection asked for (rule or pattern names)
  std::filesystem::path plan_dir;                   // library paths inside it are written relative
  std::vector<std::string> notes;
};

// The plan of `discovery` over `captured` with `realized` (realize_matches over the same matches).
// Replacements follow graph order (first replaced node); each is "planned" when it was accepted,
// selected, and every call was realized and packs, else "declined" / "pending" / "failed" with
// the reason. Never throws for a match it cannot plan.
nlohmann::json make_plan(const graph::Graph& captured, const discover::Discovery& discovery,
                         const realize::RealizeResult& realized, const PlanContext& context);

// True when `match` is selected by `patterns` (its rule or its pattern named; nullopt = all).
bool selected(const discover::Match& match, const std::optional<std::vector<std::string>>& patterns);

}  // namespace fact::compose
