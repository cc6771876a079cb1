// The engine's two stages of `fact optimize` (python/fact/optimize_run.py drives them in one
// process, through the C API's fact_optimize_plan and fact_optimize_report):
//
//   plan    the captured graph (in memory) -> discover, tune (GPU), realize, plan.json; prints
//           the discovery table, one line per tuned call, the kernel table and the roofline
//   report  what the plan stage found plus what Python did with it (the package, the end-to-end
//           table, the stages it skipped) -> report.md and report.json
//
// Between the two the plan stage's results stay in this process, keyed by the output folder:
// nothing is written for the report stage to read back.
#pragma once
#include <ostream>
#include <nlohmann/json.hpp>

#include "fact/util/console.hpp"

namespace fact::engine {

// `request`: fact_engine_plan's request (c_api.h; "graph_json" holds the graph) plus
// "report_dir" (the run's folder; default out_dir's parent), "model", "dtype" and
// "no_tune_asked" (--no-tune was given). Writes to `console` as it goes: the discovery table
// once discovery is done (before anything is tuned or compiled), the kernels to build and the
// build and tuning progress, then the tuned calls, the kernel table and the roofline; the
// per-configuration tuning tables go to `detail`. Returns {"plan": path, "plan_document": the
// plan itself, "precision",
// "skipped": [...], "compiled": bool, "failed_kernels": N}.
nlohmann::json optimize_plan_stage(const nlohmann::json& request, util::Console& console, std::ostream& detail);

// `request`: {"out_dir" (as given to the plan stage), "package": {"written", "path", "note"},
// "end_to_end": e2e.md's text or "", "skipped": [...] (the Python stages' own),
// "left_to_pytorch": [...] (optional: the composition report's items, python/fact/report.py),
// "model_ms": the model's measured eager time (optional, GPU)}. Writes
// <out_dir>/report.md and report.json; returns {"report": path, "skipped": every skipped
// stage, "document": report.json's document}. Throws std::invalid_argument when no plan stage ran for out_dir.
nlohmann::json optimize_report_stage(const nlohmann::json& request);

}  // namespace fact::engine
