#include "fact/compose/optimize_report.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <set>
#include <cctype>
#include <sstream>

#include "fact/discover/rank.hpp"
#include "fact/problem/problem.hpp"
#include "fact/util/table.hpp"

namespace fact::compose {

namespace {

using nlohmann::json;

std::string fixed(double value, int decimals) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(decimals) << value;
  return s.str();
}

std::string percent(double fraction) {
  return fixed(100.0 * fraction, fraction < 0.1 ? 1 : 0) + "%";
}

// "3.09e11" FLOP -> "309.2 G"; bytes likewise ("510.0 M").
std::string si(double value) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int unit = 0;
  while (std::abs(value) >= 1000.0 && unit < 5) {
    value /= 1000.0;
    ++unit;
  }
  return fixed(value, value < 10 ? 2 : 1) + (unit == 0 ? "" : std::string(" ") + units[unit]);
}

// Microseconds with the digits a small kernel needs: 0.042, 3.17, 812.6.
std::string micros(double seconds) {
  const double us = seconds * 1e6;
  return fixed(us, us < 1 ? 3 : (us < 10 ? 2 : 1));
}

std::string ms_cell(const std::optional<double>& ms) { return ms ? fixed(*ms, 4) : "-"; }

std::string md_escape(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

// A list of node names for a table cell: up to four, then how many in all.
std::string nodes_cell(const std::vector<std::string>& nodes) {
  if (nodes.empty()) return "-";
  std::string cell;
  for (size_t i = 0; i < nodes.size() && i < 4; ++i) cell += (i ? ", " : "") + nodes[i];
  if (nodes.size() > 4) cell += ", … (" + std::to_string(nodes.size()) + " in all)";
  return cell;
}

// "12" -> (12, ""), "3b" -> (3, "b"); a label without a number sorts last.
std::pair<long, std::string> label_key(const std::string& label) {
  size_t digits = 0;
  while (digits < label.size() && std::isdigit(static_cast<unsigned char>(label[digits]))) ++digits;
  if (digits == 0) return {std::numeric_limits<long>::max(), label};
  return {std::stol(label.substr(0, digits)), label.substr(digits)};
}

}  // namespace

bool label_before(const std::string& a, const std::string& b) { return label_key(a) < label_key(b); }

double RooflinePoint::intensity() const { return bytes > 0 ? flops / bytes : 0.0; }

double RooflinePoint::ridge() const { return memory_ceiling > 0 ? compute_ceiling / memory_ceiling : 0.0; }

std::optional<double> RooflinePoint::achieved_flops() const {
  if (!measured || measured->seconds <= 0) return std::nullopt;
  return flops / measured->seconds;
}

std::optional<double> RooflinePoint::achieved_bytes() const {
  if (!measured || measured->seconds <= 0) return std::nullopt;
  return bytes / measured->seconds;
}

std::optional<double> RooflinePoint::of_bound() const {
  if (!measured || measured->seconds <= 0) return std::nullopt;
  return bound_seconds / measured->seconds;
}

json RooflinePoint::to_json() const {
  auto optional = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json j = {{"label", label},
            {"summary", summary},
            {"flops", flops},
            {"min_bytes", bytes},
            {"intensity_flop_per_byte", intensity()},
            {"compute_ceiling_flops_per_s", compute_ceiling},
            {"memory_ceiling_bytes_per_s", memory_ceiling},
            {"ridge_flop_per_byte", ridge()},
            {"bound_seconds", bound_seconds},
            {"limit", limit},
            {"seconds", measured ? json(measured->seconds) : json(nullptr)},
            {"time_source", measured ? json(measured->source) : json(nullptr)},
            {"achieved_flops_per_s", optional(achieved_flops())},
            {"achieved_bytes_per_s", optional(achieved_bytes())},
            {"of_bound", optional(of_bound())}};
  if (auto f = achieved_flops(); f && compute_ceiling > 0) j["of_compute_ceiling"] = *f / compute_ceiling;
  if (auto b = achieved_bytes(); b && memory_ceiling > 0) j["of_memory_ceiling"] = *b / memory_ceiling;
  return j;
}

std::vector<RooflinePoint> roofline_points(const json& plan, const DeviceProfile& device,
                                           core::PrecisionMode precision,
                                           const std::map<std::string, Measurement>& measured) {
  std::vector<RooflinePoint> points;
  if (!plan.contains("replacements")) return points;
  // The kind's compute ceiling: its fused time with memory and launches free.
  DeviceProfile compute_only = device;
  compute_only.hbm_bytes_per_s = std::numeric_limits<double>::max();
  compute_only.launch_overhead_s = 0.0;
  for (const auto& r : plan.at("replacements")) {
    const std::string status = r.value("status", "");
    if (status != "planned" && status != "failed") continue;
    for (const auto& call : r.value("calls", json::array())) {
      if (!call.contains("problem") || !call.contains("flops")) continue;
      RooflinePoint p;
      p.label = call.value("label", "");
      p.summary = call.value("summary", "");
      p.flops = call.value("flops", 0.0);
      p.bytes = call.value("min_bytes", 0.0);
      p.memory_ceiling = device.hbm_bytes_per_s;
      try {
        const Problem problem = problem_from_json(call.at("problem"));
        const double compute_s = kind_of(problem).fused_seconds(problem.desc, compute_only, precision);
        p.compute_ceiling = compute_s > 0 ? p.flops / compute_s : 0.0;
        const double memory_s = p.memory_ceiling > 0 ? p.bytes / p.memory_ceiling : 0.0;
        p.bound_seconds = std::max(compute_s, memory_s);
        p.limit = compute_s >= memory_s ? "compute" : "memory";
      } catch (const std::exception&) {
        continue;  // a kind this engine does not know: no ceiling to place it against
      }
      if (auto found = measured.find(p.label); found != measured.end()) {
        p.measured = found->second;
      } else if (call.value("config_source", "") == "database" && call.contains("tuned") &&
                 call.at("tuned").value("ms", 0.0) > 0) {
        const json& tuned = call.at("tuned");
        p.measured = Measurement{tuned.value("ms", 0.0) * 1e-3,
                                 "tuning database (" + tuned.value("device", std::string("?")) + ", " +
                                     tuned.value("date", std::string("?")) + ")"};
      }
      points.push_back(std::move(p));
    }
  }
  std::stable_sort(points.begin(), points.end(),
                   [](const RooflinePoint& a, const RooflinePoint& b) { return label_before(a.label, b.label); });
  return points;
}

std::vector<KernelRow> kernel_rows(const json& plan) {
  std::vector<KernelRow> rows;
  if (!plan.contains("replacements")) return rows;
  const json kernels = plan.value("kernels", json::object());
  for (const auto& r : plan.at("replacements")) {
    if (r.value("status", "") != "planned" && r.value("status", "") != "failed") continue;
    for (const auto& call : r.value("calls", json::array())) {
      KernelRow row;
      row.label = call.value("label", "");
      row.rule = r.value("rule", "");
      row.classification = r.value("classification", "");
      row.problem = call.value("summary", "");
      const std::string key = call.contains("kernel") && call.at("kernel").is_string() ? call.value("kernel", "") : "";
      row.key = key.substr(0, 12);
      if (key.empty() || !kernels.contains(key)) {
        row.build = "not realized";
        row.detail = r.value("reason", "");
      } else {
        const auto& k = kernels.at(key);
        row.build = k.value("status", "");
        row.detail = k.contains("reason") && !k.value("reason", "").empty() ? k.value("reason", "") : k.value("name", "");
        const std::string source = call.value("config_source", "default");
        row.detail += source == "default" ? " (default configuration)" : " (tuned: " + source + ")";
      }
      rows.push_back(std::move(row));
    }
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const KernelRow& a, const KernelRow& b) { return label_before(a.label, b.label); });
  return rows;
}

json LeftRow::to_json() const {
  auto optional = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  return {{"label", label},
          {"what", what},
          {"kind", kind},
          {"nodes", nodes},
          {"reason", reason},
          {"est_seconds", optional(est_seconds)},
          {"est_share", optional(est_share)},
          {"measured_seconds", optional(measured_seconds)},
          {"measured_share", optional(measured_share)}};
}

std::vector<LeftRow> left_to_pytorch_rows(const json& plan, const graph::Graph& captured,
                                          const discover::DiscoverOptions& options) {
  std::map<graph::NodeId, double> seconds;
  double total = 0.0;
  for (const graph::Node& node : captured.nodes()) {
    const double s = discover::pytorch_node_seconds(captured, node, options);
    seconds[node.id] = s;
    total += s;
  }
  auto share = [&](double s) { return total > 0 ? std::optional<double>(s / total) : std::nullopt; };

  std::vector<LeftRow> rows;
  std::set<graph::NodeId> spanned, replaced;
  const json replacements = plan.value("replacements", json::array());
  for (const auto& r : replacements) {
    const std::vector<std::string> nodes = r.value("nodes", std::vector<std::string>{});
    spanned.insert(nodes.begin(), nodes.end());
    if (r.value("status", "") == "planned") replaced.insert(nodes.begin(), nodes.end());
  }
  for (const auto& r : replacements) {
    const std::string status = r.value("status", "");
    if (status == "planned") continue;
    LeftRow row;
    row.label = r.value("label", "");
    row.what = r.value("rule", "");
    row.kind = status;
    // Nodes a planned replacement takes are FACT's, whatever this match would have done.
    for (const std::string& id : r.value("nodes", std::vector<std::string>{}))
      if (!replaced.count(id)) row.nodes.push_back(id);
    row.reason = r.value("reason", "");
    if (row.reason.empty()) row.reason = status == "pending" ? "no template realizes it yet" : status;
    double s = 0.0;
    for (const std::string& id : row.nodes)
      if (auto found = seconds.find(id); found != seconds.end()) s += found->second;
    row.est_seconds = s;
    row.est_share = share(s);
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const LeftRow& a, const LeftRow& b) { return label_before(a.label, b.label); });

  std::map<std::string, LeftRow> by_op;
  std::vector<std::string> op_order;
  for (const graph::Node& node : captured.nodes()) {
    if (spanned.count(node.id) || seconds[node.id] <= 0.0) continue;
    auto [it, inserted] = by_op.try_emplace(node.target);
    LeftRow& row = it->second;
    if (inserted) {
      op_order.push_back(node.target);
      row.what = node.target;
      row.kind = "uncovered";
      row.reason = "no FACT pattern covers this op: PyTorch runs it";
      row.est_seconds = 0.0;
    }
    row.nodes.push_back(node.id);
    *row.est_seconds += seconds[node.id];
  }
  std::vector<LeftRow> ops;
  for (const std::string& op : op_order) {
    LeftRow row = std::move(by_op[op]);
    row.est_share = share(*row.est_seconds);
    ops.push_back(std::move(row));
  }
  std::stable_sort(ops.begin(), ops.end(), [](const LeftRow& a, const LeftRow& b) { return *a.est_seconds > *b.est_seconds; });
  rows.insert(rows.end(), ops.begin(), ops.end());
  return rows;
}

void add_stage_rows(std::vector<LeftRow>& rows, const json& left_to_pytorch, std::optional<double> model_seconds) {
  if (!left_to_pytorch.is_array()) return;
  for (const auto& item : left_to_pytorch) {
    const std::string stage = item.value("stage", "");
    if (stage == "plan") continue;  // the plan's own rows are there already
    LeftRow row;
    row.what = item.value("what", "");
    row.kind = stage.empty() ? "composition" : stage;
    row.reason = item.value("reason", "");
    if (item.contains("subgraph_ms") && item.at("subgraph_ms").is_number())
      row.measured_seconds = item.at("subgraph_ms").get<double>() * 1e-3;
    if (row.measured_seconds && model_seconds && *model_seconds > 0)
      row.measured_share = *row.measured_seconds / *model_seconds;
    rows.push_back(std::move(row));
  }
}

std::string optimize_report_legend(const OptimizeReport& report) {
  const DeviceProfile& d = report.device;
  std::ostringstream md;
  std::string classes = report.classification_legend;
  for (const char* word : {"REUSE", "ADAPT", "NEW"}) {
    const std::string plain = std::string(word) + " =";
    if (auto at = classes.find(plain); at != std::string::npos)
      classes.replace(at, plain.size(), "**" + std::string(word) + "** =");
  }
  md << "- **class** (discovery): " << classes << "\n"
     << "- **Estimated vs measured.** Discovery's *before / after / saved µs* are roofline estimates "
        "from the device profile, not measurements: *before* is PyTorch's time for the nodes the match "
        "covers (one kernel per node), *after* is FACT's fused kernel(s), *saved* = before − after. "
        "Times in the tuning, roofline and end-to-end sections are measured on the GPU (CUDA events, "
        "L2 flushed before each run, median), baselines in the same run.\n"
     << "- **A match that saves 0.0 µs** by the estimate is still accepted: there FACT's kernel and "
        "PyTorch's reach the same roofline (nothing is fused that PyTorch does not fuse already), so "
        "only a measurement can tell them apart — tuning times FACT's kernel against cuBLAS/cuBLASLt, "
        "and the composed module falls back to `torch.compile` of the original unless it is faster.\n"
     << "- **Roofline.** A kernel's bound is max(FLOP / compute ceiling, bytes / memory ceiling) with "
        "the ceilings of the device profile **" << d.name << "** (bf16/fp16 " << fixed(d.bf16_flops / 1e12, 0)
     << " TFLOP/s, tf32 " << fixed(d.tf32_flops / 1e12, 0) << " TFLOP/s, fp32 " << fixed(d.fp32_flops / 1e12, 0)
     << " TFLOP/s, HBM " << fixed(d.hbm_bytes_per_s / 1e12, 2) << " TB/s; "
     << (report.device_measured ? "measured by `fact device`"
                                : "datasheet defaults — run `fact device` on the GPU to measure them")
     << "); a call's compute ceiling is its kernel's rate in the run's precision mode (strict float32 "
        "runs three TF32 products per multiply), shown after *of* in the TFLOP/s column. *Limited by* names the ceiling the bound comes from: compute when the arithmetic intensity "
        "(FLOP per byte) is above the ridge point (compute ceiling / memory ceiling), memory below it. "
        "*TFLOP/s* and *TB/s* are achieved at the measured time, with their fraction of the ceiling; "
        "the bytes are the minimum traffic (every operand read once, every result written once), so "
        "TB/s is a lower bound. *Of bound* = bound / measured time (100% = on the roofline).\n"
     << "- **speedup** = baseline time / FACT's time (above 1: FACT is faster).\n";
  return md.str();
}

std::string roofline_table(const std::vector<RooflinePoint>& points) {
  util::Table table({{"#", util::Table::Align::Right}, {"problem"}, {"FLOP/B", util::Table::Align::Right},
                     {"limited by"}, {"bound µs", util::Table::Align::Right}, {"time µs", util::Table::Align::Right},
                     {"TFLOP/s", util::Table::Align::Right}, {"TB/s", util::Table::Align::Right},
                     {"of bound", util::Table::Align::Right}});
  for (const RooflinePoint& p : points) {
    const auto f = p.achieved_flops();
    const auto b = p.achieved_bytes();
    const auto of = p.of_bound();
    table.add_row({p.label, p.summary, fixed(p.intensity(), 0), p.limit, micros(p.bound_seconds),
                   p.measured ? micros(p.measured->seconds) : "-",
                   f ? fixed(*f / 1e12, 1) + " (" + percent(*f / p.compute_ceiling) + ")" : "-",
                   b ? fixed(*b / 1e12, 2) + " (" + percent(*b / p.memory_ceiling) + ")" : "-",
                   of ? percent(*of) : "-"});
  }
  return table.render();
}

std::string render_optimize_report(const OptimizeReport& report) {
  std::ostringstream md;
  md << "# FACT optimize report: `" << report.model << "`\n\n"
     << "- dtype: " << report.dtype << "; precision mode: **" << report.precision << "**\n"
     << "- fact " << report.fact_version << ", CUTLASS " << report.cutlass_version << "\n"
     << "- device profile: " << report.device.name
     << (report.device_measured ? " (measured by `fact device`" : " (datasheet defaults: no measured profile")
     << (report.device_profile_path.empty() ? "" : ", " + report.device_profile_path) << ")\n";
  if (!report.logs_dir.empty())
    md << "- full output of every stage (third-party included): `" << report.logs_dir << "/`\n";
  md << "\n## How to read this report\n\n" << optimize_report_legend(report);

  md << "\n## Discovery\n\nEstimates (roofline of the device profile), ranked by time saved.\n\n"
     << report.discovery;

  md << "\n## Left to PyTorch\n\nWhat PyTorch still runs, and why: matches the plan does not replace "
        "(declined by a check, pending a template, failed to plan), replacements a later stage handed "
        "back (*check*, *verify*, *speed*), and the captured ops no match covers. *est. µs* is PyTorch's "
        "time for those nodes by the roofline estimate and *est. share* its part of the whole model's "
        "estimate (every captured node); *measured* columns hold GPU times where the run measured them "
        "(a replacement timed against its subgraph, as a share of the model's eager time).\n\n";
  if (report.left_to_pytorch.empty()) {
    md << "Nothing: every captured op that costs time is replaced.\n";
  } else {
    md << "| # | left to PyTorch | why | nodes | reason | est. µs | est. share | measured µs | measured share |\n"
       << "|---|---|---|---|---|---|---|---|---|\n";
    for (const LeftRow& r : report.left_to_pytorch) {
      md << "| " << (r.label.empty() ? "-" : r.label) << " | `" << r.what << "` | " << r.kind << " | "
         << md_escape(nodes_cell(r.nodes)) << " | " << md_escape(r.reason) << " | "
         << (r.est_seconds ? micros(*r.est_seconds) : "-") << " | " << (r.est_share ? percent(*r.est_share) : "-")
         << " | " << (r.measured_seconds ? micros(*r.measured_seconds) : "-") << " | "
         << (r.measured_share ? percent(*r.measured_share) : "-") << " |\n";
    }
  }

  md << "\n## Kernels\n\nOne row per kernel call; `1a`/`1b` are the calls of match 1. *build*: built or "
        "cached (compiled), rendered (source only), failed (with the compiler's reason).\n\n"
     << "| # | match | class | problem | key | build | configuration / reason |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const KernelRow& r : report.kernels) {
    md << "| " << r.label << " | " << r.rule << " | " << r.classification << " | " << r.problem << " | `"
       << (r.key.empty() ? "-" : r.key) << "` | " << r.build << " | " << md_escape(r.detail) << " |\n";
  }

  md << "\n## Roofline\n\nEach kernel against the device profile's ceilings (see *How to read*). ";
  const bool any_measured = std::any_of(report.roofline.begin(), report.roofline.end(),
                                        [](const RooflinePoint& p) { return p.measured.has_value(); });
  md << (any_measured ? "Times are measured; *source* says where each comes from.\n\n"
                      : "No kernel was timed in this run (no GPU, or tuning off): the bound and what limits "
                        "it are shown; the achieved columns need a measured time.\n\n");
  md << "| # | problem | FLOP | bytes | FLOP/B | limited by | bound µs | time µs | source | TFLOP/s (of ceiling) "
        "| TB/s (of ceiling) | of bound |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RooflinePoint& p : report.roofline) {
    const auto f = p.achieved_flops();
    const auto b = p.achieved_bytes();
    const auto of = p.of_bound();
    md << "| " << p.label << " | " << p.summary << " | " << si(p.flops) << " | " << si(p.bytes) << " | "
       << fixed(p.intensity(), 0) << " (ridge " << fixed(p.ridge(), 0) << ") | " << p.limit << " | "
       << micros(p.bound_seconds) << " | " << (p.measured ? micros(p.measured->seconds) : "-") << " | "
       << (p.measured ? md_escape(p.measured->source) : "not measured") << " | "
       << (f ? fixed(*f / 1e12, 1) + " (" + percent(*f / p.compute_ceiling) + " of " +
                   fixed(p.compute_ceiling / 1e12, 0) + ")"
             : "-")
       << " | "
       << (b ? fixed(*b / 1e12, 2) + " (" + percent(*b / p.memory_ceiling) + " of " +
                   fixed(p.memory_ceiling / 1e12, 2) + ")"
             : "-")
       << " | " << (of ? percent(*of) : "-") << " |\n";
  }

  if (!report.tuning.empty()) {
    md << "\n## Tuning\n\nPer call, the fastest configuration that verified against float64 (*rel. err*: "
          "‖out − ref‖ / ‖ref‖), timed against the library baseline in the same run; *speedup* = "
          "baseline ms / FACT ms.\n\n"
       << "| # | problem | best configuration | origin | FACT ms | rel. err | baseline | baseline ms | speedup |\n"
       << "|---|---|---|---|---|---|---|---|---|\n";
    for (const TuningRow& t : report.tuning) {
      if (t.config.empty()) {
        md << "| " << t.label << " | " << t.summary << " | not tuned: "
           << md_escape(t.error.empty() ? "no configuration verified" : t.error) << " | | | | | | |\n";
        continue;
      }
      md << "| " << t.label << " | " << t.summary << " | " << t.config << " | " << t.origin << " | "
         << ms_cell(t.ms) << " | " << (t.rel_err ? [&] { std::ostringstream s; s << std::scientific
                                                          << std::setprecision(1) << *t.rel_err; return s.str(); }()
                                                 : "-")
         << " | " << (t.baseline.empty() ? "-" : t.baseline) << " | " << ms_cell(t.baseline_ms) << " | "
         << (t.ms && t.baseline_ms && *t.ms > 0 ? fixed(*t.baseline_ms / *t.ms, 2) + "x" : "-") << " |\n";
    }
  }

  md << "\n## Composed module (Python package)\n\n" << report.package_note << "\n";
  if (!report.package_name.empty())
    md << "\nPer replacement (calls, configuration, tuned or default, verification error against the "
          "subgraph it replaces): `" << report.package_name << "/report.json`.\n";
  if (!report.end_to_end.empty()) md << "\n" << report.end_to_end << "\nData: `e2e.json`.\n";
  if (!report.skipped.empty()) {
    md << "\n## Skipped\n\n";
    for (const std::string& s : report.skipped) md << "- " << s << "\n";
  }
  return md.str();
}

}  // namespace fact::compose
