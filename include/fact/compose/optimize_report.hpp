// The report of a `fact optimize` run (report.md / report.json), written from the plan: what was
// found, built and measured, each kernel's position on the roofline of the device profile, what
// was skipped and why, and a legend for every column. Kind-agnostic: a call's FLOP and bytes
// come from the plan ("flops", "min_bytes"), its compute ceiling from its kind.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/core/precision.hpp"
#include "fact/discover/discover.hpp"
#include "fact/graph/graph.hpp"
#include "fact/problem/device_profile.hpp"

namespace fact::compose {

// A kernel time measured on the GPU, and where it comes from ("tuned in this run", ...).
struct Measurement {
  double seconds = 0.0;
  std::string source;
};

// One kernel call on the roofline of a device profile.
struct RooflinePoint {
  std::string label;              // the plan's call label ("1a")
  std::string summary;            // the plan's call summary
  double flops = 0.0;             // the call's FLOP (plan: "flops")
  double bytes = 0.0;             // bytes that must cross memory once (plan: "min_bytes")
  double compute_ceiling = 0.0;   // FLOP/s the kind's kernel can reach under the precision
  double memory_ceiling = 0.0;    // bytes/s (the profile's HBM rate)
  double bound_seconds = 0.0;     // max(flops / compute_ceiling, bytes / memory_ceiling)
  std::string limit;              // "compute" or "memory": which ceiling the bound comes from
  std::optional<Measurement> measured;

  double intensity() const;        // FLOP per byte
  double ridge() const;            // FLOP per byte where the two ceilings meet
  std::optional<double> achieved_flops() const;  // FLOP/s at the measured time
  std::optional<double> achieved_bytes() const;  // bytes/s at the measured time
  std::optional<double> of_bound() const;        // bound / measured time (1 = on the roofline)
  nlohmann::json to_json() const;
};

// Orders call labels as the discovery table numbers them: "1a" < "1b" < "2" < "10".
bool label_before(const std::string& a, const std::string& b);

// One point per kernel call of the plan's planned and failed replacements, in label order.
// `measured`: call label -> time measured in this run; a call without one takes its tuning
// database record's time when the plan used that record for exactly its shape
// (config_source "database"). Throws nothing for a call whose kind is unknown: it is skipped.
std::vector<RooflinePoint> roofline_points(const nlohmann::json& plan, const DeviceProfile& device,
                                           core::PrecisionMode precision,
                                           const std::map<std::string, Measurement>& measured);

// One row per kernel call: label, match, problem, kernel key, build status, configuration or
// reason; in label order (the plan lists replacements in graph order, labels are discovery's rank).
struct KernelRow {
  std::string label, rule, classification, problem, key, build, detail;
};
std::vector<KernelRow> kernel_rows(const nlohmann::json& plan);

// One row of "Left to PyTorch": a match the plan does not replace (declined, pending, failed,
// not selected), one kind of captured op no match covers, or a replacement a later stage handed
// back (verification, speed).
struct LeftRow {
  std::string label;       // the match's number ("3"), "" for an uncovered op
  std::string what;        // the match's rule, or the op ("aten.layer_norm.default")
  std::string kind;        // "declined", "pending", "failed", "uncovered", or a Python stage's name
  std::vector<std::string> nodes;  // captured nodes it spans
  std::string reason;      // in full
  std::optional<double> est_seconds;       // PyTorch's time for those nodes by the roofline estimate
  std::optional<double> est_share;         // of the whole model's estimate
  std::optional<double> measured_seconds;  // PyTorch's time measured on the GPU, where it was
  std::optional<double> measured_share;    // of the whole model's measured time, where both were measured
  nlohmann::json to_json() const;
};

// What the plan leaves to PyTorch: every replacement that is not "planned", with its reason and
// its nodes that no planned replacement takes (their time is what stays PyTorch's), then
// the captured ops no replacement spans, one row per op (target) with its node count, estimated
// time (discover::pytorch_node_seconds) and share of the model's estimated time (all captured
// nodes). Views and other ops that cost nothing are left out. Matches by label, then ops by
// estimated time, largest first.
std::vector<LeftRow> left_to_pytorch_rows(const nlohmann::json& plan, const graph::Graph& captured,
                                          const discover::DiscoverOptions& options);

// What a later stage left to PyTorch (python/fact/report.py's LeftToPyTorch as JSON: what, reason,
// stage, and subgraph_ms when the subgraph was timed), appended to `rows`; items of stage "plan"
// are skipped (left_to_pytorch_rows has them). `model_seconds`: the model's measured eager time,
// for the measured share.
void add_stage_rows(std::vector<LeftRow>& rows, const nlohmann::json& left_to_pytorch,
                    std::optional<double> model_seconds = std::nullopt);

// One row per tuned call: the best verified configuration against the reference baseline.
struct TuningRow {
  std::string label;              // "1a"
  std::string summary;            // problem summary
  std::string config;             // best configuration, empty when none verified
  std::string error;              // why it was not tuned
  std::optional<double> ms, rel_err, baseline_ms;
  std::string baseline;           // "cublaslt", ...
  std::string origin;             // "sweep", "database", ...
};

struct OptimizeReport {
  std::string model, dtype, precision, fact_version, cutlass_version;
  DeviceProfile device;
  bool device_measured = false;   // the profile was measured by `fact device` (else datasheet defaults)
  std::string device_profile_path;
  std::string discovery;          // the discovery table as Markdown (discover::discovery_markdown)
  std::string classification_legend;  // REUSE / ADAPT / NEW (discover::classification_legend)
  std::vector<LeftRow> left_to_pytorch;
  std::vector<KernelRow> kernels;
  std::vector<RooflinePoint> roofline;
  std::vector<TuningRow> tuning;
  std::string package_note;
  std::string package_name;       // empty when not written
  std::string end_to_end;         // e2e.md, when measured
  std::vector<std::string> skipped;
  std::string logs_dir;           // relative to the report's folder
};

// report.md. Every table is preceded by what its columns mean.
std::string render_optimize_report(const OptimizeReport& report);

// The legend of report.md (REUSE / ADAPT / NEW as report.classification_legend gives it,
// estimated vs measured, before/after/saved, the roofline columns).
std::string optimize_report_legend(const OptimizeReport& report);

// A short plain-text roofline table for the terminal.
std::string roofline_table(const std::vector<RooflinePoint>& points);

}  // namespace fact::compose
