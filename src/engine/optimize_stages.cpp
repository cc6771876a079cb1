// `fact optimize`'s engine stages (optimize_stages.hpp): the plan with its terminal tables, and
// the report from what the plan found and what the Python driver did with it.
#include "fact/engine/optimize_stages.hpp"

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fact/build_info.hpp"
#include "fact/compose/optimize_report.hpp"
#include "fact/discover/report.hpp"
#include "fact/engine/engine.hpp"
#include "fact/problem/device_profile.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/console.hpp"
#include "fact/util/table.hpp"

namespace fact::engine {

namespace {

namespace fs = std::filesystem;

// What the plan stage leaves for the report stage of the same output folder.
struct PlannedRun {
  compose::OptimizeReport report;   // everything but the package, end to end and Python's skips
  nlohmann::json tuning = nlohmann::json::array();  // report.json's "tuning"
  std::vector<std::string> skipped;
};

std::mutex g_runs_mutex;
std::map<std::string, PlannedRun> g_runs;  // by absolute output folder

std::string run_key(const fs::path& out_dir) { return fs::absolute(out_dir).lexically_normal().string(); }

// The kernel table for the terminal: the full problem and configuration (nothing is cut).
void print_kernel_table(const std::vector<compose::KernelRow>& rows, util::Console& console) {
  console.line("");
  console.line("== realize: " + std::to_string(rows.size()) + " kernel call(s)");
  util::Table table({{"#", util::Table::Align::Right}, {"kernel problem"}, {"key"}, {"build"},
                     {"configuration / reason"}});
  for (const compose::KernelRow& r : rows)
    table.add_row({r.label, r.problem, r.key.empty() ? "-" : r.key, r.build, r.detail});
  console.lines(table.render());
}

// The plan call label of a tuned call ("3a gemm_bias 65536x..." -> "3a").
std::string label_of(const TunedCall& t) { return t.label.substr(0, t.label.find(' ')); }

std::vector<compose::TuningRow> tuning_rows(const std::vector<TunedCall>& tuned) {
  std::vector<compose::TuningRow> rows;
  for (const TunedCall& t : tuned) {
    compose::TuningRow row;
    row.label = label_of(t);
    row.summary = t.label.find(' ') == std::string::npos ? "" : t.label.substr(t.label.find(' ') + 1);
    row.error = t.error;
    if (t.result && t.result->ok()) {
      const realize::CandidateOutcome& best = *t.result->best;
      row.config = best.config;
      row.origin = t.result->origin;
      if (best.ms) row.ms = best.ms->median;
      row.rel_err = best.rel_err;
      if (const realize::BaselineMeasurement* base = realize::reference_baseline(*t.result)) {
        row.baseline = base->name;
        row.baseline_ms = base->ms;
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::map<std::string, compose::Measurement> measured_times(const std::vector<TunedCall>& tuned) {
  std::map<std::string, compose::Measurement> times;
  for (const TunedCall& t : tuned) {
    if (!t.result || !t.result->ok() || !t.result->best->ms) continue;
    times[label_of(t)] = {t.result->best->ms->median * 1e-3,
                          t.result->origin == "sweep" ? "tuned in this run" : "tuning (" + t.result->origin + ")"};
  }
  return times;
}

// One line per tuned call to `out`; the full tables to `detail`.
void print_tuning(const std::vector<TunedCall>& tuned, util::Console& console, std::ostream& detail) {
  if (tuned.empty()) return;
  console.line("");
  console.line("== tune: the configurations chosen");
  for (const TunedCall& t : tuned) {
    detail << "\n-- tune " << t.label << "\n";
    if (t.result) detail << realize::format_tune_table(*t.result);
    std::ostringstream out;
    out << "  " << t.label << ": ";
    if (!t.result || !t.result->ok()) {
      out << "not tuned: " << (t.error.empty() ? "no configuration verified" : t.error);
      console.line(out.str());
      continue;
    }
    const realize::CandidateOutcome& best = *t.result->best;
    out << best.config;
    if (best.ms) out << " " << std::fixed << std::setprecision(4) << best.ms->median << " ms";
    if (const realize::BaselineMeasurement* base = realize::reference_baseline(*t.result); base && base->ms && best.ms)
      out << ", " << std::setprecision(2) << *base->ms / best.ms->median << "x vs " << base->name;
    out << std::defaultfloat << " (" << t.result->origin << ")";
    console.line(out.str());
  }
}

nlohmann::json kernel_rows_json(const std::vector<compose::KernelRow>& rows) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const compose::KernelRow& r : rows) {
    kernels.push_back({{"label", r.label}, {"rule", r.rule}, {"classification", r.classification},
                       {"problem", r.problem}, {"key", r.key}, {"build", r.build}, {"detail", r.detail}});
  }
  return kernels;
}

}  // namespace

nlohmann::json optimize_plan_stage(const nlohmann::json& request_doc, util::Console& console, std::ostream& detail) {
  PlanRequest request;
  request.graph_document = request_doc.at("graph_json").is_string()
                               ? nlohmann::json::parse(request_doc.at("graph_json").get<std::string>())
                               : request_doc.at("graph_json");
  request.out_dir = request_doc.at("out_dir").get<std::string>();
  if (const std::string name = request_doc.value("precision", std::string()); !name.empty())
    request.precision = core::parse_precision(name);  // absent or "": the engine picks from the graph
  request.compile = request_doc.value("compile", false);
  request.tune = request_doc.value("tune", size_t{0});
  request.space = request_doc.value("space", std::string("default"));
  request.baselines = {"cublas", "cublaslt"};
  request.jobs = request_doc.value("jobs", 0);
  request.progress = request_doc.value("progress", false);
  request.console = &console;
  request.device = request_doc.value("device", std::string("cpu"));
  if (request_doc.contains("inputs")) request.inputs = request_doc.at("inputs");
  if (request_doc.contains("patterns") && request_doc.at("patterns").is_array())
    request.patterns = request_doc.at("patterns").get<std::vector<std::string>>();
  const fs::path plan_dir = request.out_dir;
  const fs::path out_dir = request_doc.value("report_dir", plan_dir.parent_path().string());

  PlannedRun run;
  if (!request.compile) run.skipped.push_back("compilation: --no-compile was given");
  if (request_doc.value("no_tune_asked", false)) run.skipped.push_back("auto-tuning: --no-tune was given");
  const std::optional<std::string> no_gpu = gpu_unavailable_reason();

  // What will be built, and why, before anything is tuned or compiled.
  std::string table;
  const PlanResult plan = make_plan(request, [&](const PlanResult& found) {
    table = discover::discovery_table(found.discovery, found.captured, found.options);
    console.line("");
    console.line("== discover (precision mode: " + std::string(core::precision_name(found.options.precision)) + ")");
    console.lines(table);
    console.line("");
  });
  const std::string precision(core::precision_name(plan.options.precision));
  print_tuning(plan.tuning, console, detail);
  const std::vector<compose::KernelRow> rows = compose::kernel_rows(plan.plan);
  print_kernel_table(rows, console);
  for (const auto& s : plan.skipped) {
    if (s.rfind("compilation: not asked", 0) != 0) run.skipped.push_back(s);
  }
  if (no_gpu && !request_doc.value("no_tune_asked", false)) run.skipped.push_back("auto-tuning: " + *no_gpu);
  const bool compiled = std::any_of(plan.realized.kernels.begin(), plan.realized.kernels.end(),
                                    [](const realize::RealizedKernel& k) { return k.status == "built" || k.status == "cached"; });
  size_t failed = 0;
  for (const auto& k : plan.realized.kernels) failed += k.status == "failed" ? 1 : 0;
  const std::vector<compose::RooflinePoint> roofline =
      compose::roofline_points(plan.plan, plan.options.device, plan.options.precision,
                              measured_times(plan.tuning));
  console.line("");
  console.line("== roofline (" + plan.options.device.name + ")");
  console.lines(compose::roofline_table(roofline));

  compose::OptimizeReport& report = run.report;
  report.model = request_doc.value("model", std::string());
  report.dtype = request_doc.value("dtype", std::string());
  report.precision = precision;
  report.fact_version = build_info::kVersion;
  report.cutlass_version = build_info::kCutlassVersion;
  report.device = plan.options.device;
  report.device_measured = report.device.name.find("(defaults)") == std::string::npos;
  report.device_profile_path = report.device_measured ? default_device_profile_path().string() : "";
  report.discovery = discover::discovery_markdown(plan.discovery);
  report.classification_legend = discover::classification_legend(plan.options);
  report.left_to_pytorch = compose::left_to_pytorch_rows(plan.plan, plan.captured, plan.options);
  report.kernels = rows;
  report.roofline = roofline;
  report.tuning = tuning_rows(plan.tuning);
  report.logs_dir = "logs";
  for (const TunedCall& t : plan.tuning) {
    nlohmann::json entry = t.result ? t.result->to_json() : nlohmann::json::object();
    entry["call"] = label_of(t);
    entry["label"] = t.label;
    if (!t.error.empty()) entry["error"] = t.error;
    run.tuning.push_back(std::move(entry));
  }
  nlohmann::json response = {{"plan", plan.plan_path.string()}, {"plan_document", plan.plan},
                             {"precision", precision}, {"device", request.device},
                             {"skipped", run.skipped}, {"compiled", compiled}, {"failed_kernels", failed},
                             {"gpu_unavailable", no_gpu ? nlohmann::json(*no_gpu) : nlohmann::json(nullptr)}};
  std::lock_guard<std::mutex> lock(g_runs_mutex);
  g_runs[run_key(out_dir)] = std::move(run);
  return response;
}

nlohmann::json optimize_report_stage(const nlohmann::json& request) {
  const fs::path out_dir = request.at("out_dir").get<std::string>();
  PlannedRun run;
  {
    std::lock_guard<std::mutex> lock(g_runs_mutex);
    auto found = g_runs.find(run_key(out_dir));
    if (found == g_runs.end())
      throw std::invalid_argument("no plan stage ran in this process for '" + out_dir.string() + "'");
    run = std::move(found->second);
    g_runs.erase(found);
  }
  compose::OptimizeReport& report = run.report;
  const nlohmann::json package = request.value("package", nlohmann::json::object());
  const bool written = package.value("written", false);
  const std::string package_path = package.value("path", std::string());
  report.package_note = package.value("note", std::string());
  if (written) report.package_name = fs::path(package_path).filename().string();
  report.end_to_end = request.value("end_to_end", std::string());
  report.skipped = run.skipped;
  if (request.contains("skipped") && request.at("skipped").is_array())
    for (const auto& s : request.at("skipped")) report.skipped.push_back(s.get<std::string>());
  std::optional<double> model_seconds;
  if (request.contains("model_ms") && request.at("model_ms").is_number())
    model_seconds = request.at("model_ms").get<double>() * 1e-3;
  compose::add_stage_rows(report.left_to_pytorch, request.value("left_to_pytorch", nlohmann::json::array()),
                          model_seconds);
  util::write_file_atomically(out_dir / "report.md", compose::render_optimize_report(report));
  nlohmann::json left = nlohmann::json::array();
  for (const compose::LeftRow& r : report.left_to_pytorch) left.push_back(r.to_json());

  nlohmann::json points = nlohmann::json::array();
  for (const compose::RooflinePoint& p : report.roofline) points.push_back(p.to_json());
  nlohmann::json doc = {{"schema", "fact.optimize_report/1"},
                        {"model", report.model},
                        {"dtype", report.dtype},
                        {"precision", report.precision},
                        {"device_profile", device_profile_to_json(report.device)},
                        {"device_profile_measured", report.device_measured},
                        {"classification_legend", report.classification_legend},
                        {"left_to_pytorch", left},
                        {"kernels", kernel_rows_json(report.kernels)},
                        {"roofline", points},
                        {"tuning", run.tuning},
                        {"skipped", report.skipped},
                        {"e2e", report.end_to_end.empty() ? nlohmann::json(nullptr) : nlohmann::json("e2e.json")},
                        {"package", {{"written", written}, {"path", package_path}, {"note", report.package_note}}},
                        {"cutlass", build_info::kCutlassVersion}};
  util::write_file_atomically(out_dir / "report.json", doc.dump(2) + "\n");
  return {{"report", (out_dir / "report.md").string()}, {"skipped", report.skipped}, {"document", doc}};
}

}  // namespace fact::engine
