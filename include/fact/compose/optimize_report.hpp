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

// One point per kernel call of the plan's planned and failed replacements, in plan order.
// `measured`: call label -> time measured in this run; a call without one takes its tuning
// database record's time when the plan used that record for exactly its shape
// (config_source "database"). Throws nothing for a call whose kind is unknown: it is skipped.
std::vector<RooflinePoint> roofline_points(const nlohmann::json& plan, const DeviceProfile& device,
                                           core::PrecisionMode precision,
                                           const std::map<std::string, Measurement>& measured);

// One row per kernel call: label, match, problem, kernel key, build status, configuration or reason.
struct KernelRow {
  std::string label, rule, classification, problem, key, build, detail;
};
std::vector<KernelRow> kernel_rows(const nlohmann::json& plan);

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
  std::string discovery_table;    // as printed (discover::discovery_table)
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

// The legend of report.md (REUSE / ADAPT / NEW, estimated vs measured, before/after/saved, the
// roofline columns); also printed by `fact optimize`.
std::string optimize_report_legend(const OptimizeReport& report);

// A short plain-text roofline table for the terminal.
std::string roofline_table(const std::vector<RooflinePoint>& points);

}  // namespace fact::compose
