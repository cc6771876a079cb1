// `fact optimize model.py:ClassName`: the whole pipeline on a model file.
//
//   capture   python -m fact.capture (the only Python step before the package) → <out>/graph.json
//   plan      the engine in process (engine.hpp): discover (ranked table, discovery.json),
//             tune each kernel on a Hopper GPU (sweep, verify against float64, time against
//             the library baselines; choices stored in the tuning database), realize each kernel
//             once (CUTLASS source → parallel cached nvcc build), write <out>/plan/plan.json
//   package   python -m fact.package --plan: the plan applied to the model and written as an
//             importable Python package (plan, kernel libraries, model file, weights); every
//             replacement verified against the subgraph it replaces (GPU, or CPU reference)
//   measure   (GPU) python -m fact.measure: the package against the model in float64, and the
//             speedup table against eager / torch.compile / max-autotune → <out>/e2e.{md,json}
//   report    <out>/report.md + report.json (compose/optimize_report.hpp: legend, kernels, roofline,
//             tuning, end to end, skipped), then python -m fact.plots: PNG plots beside it, added
//             to report.md, and report.html (one file, plots inlined)
//
// Stages that cannot run here are skipped with the reason printed, never silently. Quiet by
// default: the terminal shows FACT's stages, progress and tables; each Python stage's
// third-party output (torch.export, Inductor autotuning, compilers, warnings) goes to
// <out>/logs/<stage>.log, and everything this command prints also to <out>/logs/optimize.log.
// -v shows the commands, the per-configuration tuning tables and the third-party output too.
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "fact/build_info.hpp"
#include "fact/compose/optimize_report.hpp"
#include "fact/discover/report.hpp"
#include "fact/engine/engine.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/subprocess.hpp"
#include "fact/util/table.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/vocabulary.hpp"
#include "src/cli/python_module.hpp"

#include "fact/problem/device_profile.hpp"

namespace fact::cli {

namespace {

namespace fs = std::filesystem;

struct OptimizeArgs {
  std::string model;  // path/to/model.py:ClassName
  std::string dtype = "float32";  // torch's name; bf16 / fp16 / fp32 are accepted too
  std::string precision;  // default: strict for float32, native otherwise
  std::string out_dir = "out/optimize";
  std::string space = "default";
  size_t max_candidates = 0;
  int jobs = 0;
  bool no_tune = false;
  bool no_compile = false;
  std::vector<std::string> patterns;  // empty: every default pattern (opt-in ones not named)
  std::string package_name;  // empty: fact_<class>
  bool no_measure = false, no_max_autotune = false;
  bool verbose = false;
  // --agent: NEW matches go to an LLM (python -m fact.agent.synthesize) before the plan.
  bool agent = false;
  std::string agent_endpoint, agent_model;
  int agent_attempts = 0, agent_max_tokens = 0;
  double agent_seconds = 0;
};

// std::cout's characters to two buffers (the terminal and the run's log).
class TeeBuffer : public std::streambuf {
 public:
  TeeBuffer(std::streambuf* first, std::streambuf* second) : first_(first), second_(second) {}

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    first_->sputc(ch);
    second_->sputc(ch);
    return c;
  }
  std::streamsize xsputn(const char* text, std::streamsize n) override {
    first_->sputn(text, n);
    second_->sputn(text, n);
    return n;
  }
  int sync() override { return (first_->pubsync() == 0 && second_->pubsync() == 0) ? 0 : -1; }

 private:
  std::streambuf* first_;
  std::streambuf* second_;
};

// While alive: std::cout also goes to <logs>/optimize.log, and detail() is a stream that reaches
// the log always and the terminal only with -v.
class RunOutput {
 public:
  RunOutput(const fs::path& logs_dir, bool verbose)
      : file_((fs::create_directories(logs_dir), logs_dir / "optimize.log"), std::ios::app),
        terminal_(std::cout.rdbuf()),
        tee_(terminal_, file_.rdbuf()),
        detail_(verbose ? static_cast<std::streambuf*>(&tee_) : file_.rdbuf()) {
    std::cout.rdbuf(&tee_);
  }
  ~RunOutput() {
    std::cout.flush();
    std::cout.rdbuf(terminal_);
  }
  RunOutput(const RunOutput&) = delete;
  RunOutput& operator=(const RunOutput&) = delete;
  std::ostream& detail() { return detail_; }

 private:
  std::ofstream file_;
  std::streambuf* terminal_;
  TeeBuffer tee_;
  std::ostream detail_;
};

RunOutput* g_output = nullptr;  // the current run's, for detail output

std::ostream& detail() { return g_output ? g_output->detail() : std::cout; }

// `python -m <module>` for a stage of this run (python_module.hpp), its third-party output in
// <logs>/<stage>.log.
util::ProcessResult run_python_module(const std::string& stage, const std::string& module,
                                      const std::vector<std::string>& module_args,
                                      const fs::path& logs_dir, bool verbose) {
  detail() << std::flush;
  // the command line reaches the run's log always, the terminal with -v (detail())
  return cli::run_python_module(stage, module, module_args, PythonStep{logs_dir, verbose, &detail()});
}

// Captures on the device the package runs on (cuda, else cpu), not on meta: the graph the plan
// names must be the one fact.package exports there, and meta kernels give some ops other output
// strides (SDPA: [B, H, T, D]-contiguous on meta, [B, T, H, D] from the CPU and CUDA kernels),
// so a later `.contiguous()` is a node on meta and none on the device, and every replacement
// reading it was declined at apply time. The package builds the model there anyway.
void capture(const OptimizeArgs& args, const fs::path& graph_path, const fs::path& logs,
             const std::string& device) {
  const util::ProcessResult result = run_python_module(
      "capture", "fact.capture",
      {args.model, "-o", graph_path.string(), "--dtype", args.dtype, "--device", device}, logs, args.verbose);
  if (!result.succeeded())
    throw std::runtime_error("capture of " + args.model + " failed (" + result.describe() +
                             "); see the message above and " + (logs / "capture.log").string());
}

std::string default_package_name(const std::string& model) {
  const std::string class_name = model.substr(model.rfind(':') + 1);
  std::string name = "fact_";
  for (char c : class_name)
    name += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  return name;
}

struct PackageOutcome {
  bool written = false;
  fs::path path;
  std::string note;  // what the package holds, or why it was not written
};

// The composed module as a Python package (python -m fact.package --plan): the engine's plan
// applied to the model (no second realization), every replacement verified against the
// subgraph it replaces on the GPU, or on the CPU with the host reference when there is none.
PackageOutcome write_package(const OptimizeArgs& args, const fs::path& plan_dir, const fs::path& out_dir,
                             bool on_gpu, bool compile) {
  PackageOutcome outcome;
  const std::string name = args.package_name.empty() ? default_package_name(args.model) : args.package_name;
  const util::ProcessResult result = run_python_module(
      "package", "fact.package",
      {args.model, "--plan", plan_dir.string(), "-o", out_dir.string(), "--name", name, "--dtype",
       args.dtype, "--device", on_gpu ? "cuda" : "cpu"},
      out_dir / "logs", args.verbose);
  outcome.path = out_dir / name;
  if (!result.succeeded()) {
    outcome.note = "not written: python -m fact.package failed (" + result.describe() +
                   "); see the message above and " + (out_dir / "logs" / "package.log").string();
    return outcome;
  }
  outcome.written = true;
  outcome.note = "`" + outcome.path.string() + "/`: `import " + name + "; " + name +
                 ".load(device=...)` (see its README.md and report.json); kernels " +
                 (compile ? std::string("compiled") : std::string("not compiled (--no-compile or no nvcc)")) +
                 (on_gpu ? ", verified against float64 on this GPU"
                         : ", not verified (no GPU here; load() verifies them on the GPU)");
  return outcome;
}

// End to end on the GPU (python -m fact.measure): the packaged module against the original in
// float64, and timed against eager / torch.compile / max-autotune. Returns the Markdown table
// (also printed by the child), or why there is none.
std::string measure_end_to_end(const OptimizeArgs& args, const fs::path& out_dir, const PackageOutcome& package) {
  std::vector<std::string> module_args = {package.path.string(), "-o", out_dir.string()};
  if (args.no_max_autotune) module_args.push_back("--no-max-autotune");
  const util::ProcessResult result =
      run_python_module("end to end", "fact.measure", module_args, out_dir / "logs", args.verbose);
  if (!result.succeeded())
    return "End-to-end measurement failed (" + result.describe() + "); see " +
           (out_dir / "logs" / "measure.log").string() + ".\n";
  try {
    return util::read_file(out_dir / "e2e.md");
  } catch (const std::exception& e) {
    return std::string("End-to-end measurement wrote no e2e.md: ") + e.what() + "\n";
  }
}

// The planned signature (docs/plan.md "inputs") of the captured graph's inputs, as
// fact.compose spells the example inputs it is given: [{"shape": [...], "dtype": "torch.<dtype>"}].
// Without it the package would find its inputs differ from the plan's and compose nothing.
nlohmann::json planned_signature(const fs::path& graph_path) {
  const nlohmann::json graph = nlohmann::json::parse(util::read_file(graph_path));
  std::map<std::string, nlohmann::json> values;
  for (const auto& v : graph.at("values")) values[v.at("id").get<std::string>()] = v;
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& id : graph.at("inputs")) {
    const nlohmann::json& v = values.at(id.get<std::string>());
    inputs.push_back({{"shape", v.at("shape")}, {"dtype", "torch." + v.at("dtype").get<std::string>()}});
  }
  return inputs;
}

// The kernel table for the terminal: the full problem and configuration (nothing is cut).
void print_kernel_table(const std::vector<compose::KernelRow>& rows, std::ostream& os) {
  os << "\n== realize: " << rows.size() << " kernel call(s)\n";
  util::Table table({{"#", util::Table::Align::Right}, {"kernel problem"}, {"key"}, {"build"},
                     {"configuration / reason"}});
  for (const compose::KernelRow& r : rows)
    table.add_row({r.label, r.problem, r.key.empty() ? "-" : r.key, r.build, r.detail});
  os << table.render();
}

// The plan call label of a tuned call ("3a gemm_bias 65536x..." -> "3a").
std::string label_of(const engine::TunedCall& t) { return t.label.substr(0, t.label.find(' ')); }

std::vector<compose::TuningRow> tuning_rows(const std::vector<engine::TunedCall>& tuned) {
  std::vector<compose::TuningRow> rows;
  for (const engine::TunedCall& t : tuned) {
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

std::map<std::string, compose::Measurement> measured_times(const std::vector<engine::TunedCall>& tuned) {
  std::map<std::string, compose::Measurement> times;
  for (const engine::TunedCall& t : tuned) {
    if (!t.result || !t.result->ok() || !t.result->best->ms) continue;
    times[label_of(t)] = {t.result->best->ms->median * 1e-3,
                          t.result->origin == "sweep" ? "tuned in this run" : "tuning (" + t.result->origin + ")"};
  }
  return times;
}

// One line per tuned call for the terminal (the full tables go to the log, and with -v here).
void print_tuning(const std::vector<engine::TunedCall>& tuned) {
  if (tuned.empty()) return;
  std::cout << "\n== tune\n";
  for (const engine::TunedCall& t : tuned) {
    detail() << "\n-- tune " << t.label << "\n";
    if (t.result) detail() << realize::format_tune_table(*t.result);
    std::cout << "  " << t.label << ": ";
    if (!t.result || !t.result->ok()) {
      std::cout << "not tuned: " << (t.error.empty() ? "no configuration verified" : t.error) << "\n";
      continue;
    }
    const realize::CandidateOutcome& best = *t.result->best;
    std::cout << best.config;
    if (best.ms) std::cout << " " << std::fixed << std::setprecision(4) << best.ms->median << " ms";
    if (const realize::BaselineMeasurement* base = realize::reference_baseline(*t.result); base && base->ms && best.ms)
      std::cout << ", " << std::setprecision(2) << *base->ms / best.ms->median << "x vs " << base->name;
    std::cout << std::defaultfloat << " (" << t.result->origin << ")\n";
  }
}

// python -m fact.plots <out>: PNG plots beside report.md, a "Plots" section added to it, and
// report.html. Returns why not, or nullopt when it ran.
std::optional<std::string> draw_plots(const OptimizeArgs& args, const fs::path& out_dir) {
  const util::ProcessResult result =
      run_python_module("report", "fact.plots", {out_dir.string()}, out_dir / "logs", args.verbose);
  if (result.succeeded()) return std::nullopt;
  return "python -m fact.plots failed (" + result.describe() + "); see " + (out_dir / "logs" / "plots.log").string();
}

// torch's dtype name for the spellings users type: bf16 -> bfloat16, fp16 -> float16, ...
std::string torch_dtype(const std::string& dtype) {
  const core::DType parsed = core::parse_dtype(dtype);  // any spelling of the dtype table
  if (parsed == core::DType::BFloat16 || parsed == core::DType::Float16 || parsed == core::DType::Float32) {
    return std::string(core::dtype_name(parsed));
  }
  throw std::invalid_argument("--dtype '" + dtype + "': expected bfloat16 (bf16), float16 (fp16) or float32 (fp32)");
}

void run(OptimizeArgs args) {
  const auto start = std::chrono::steady_clock::now();
  args.dtype = torch_dtype(args.dtype);
  const fs::path out_dir = args.out_dir;
  fs::create_directories(out_dir);
  const fs::path logs = out_dir / "logs";
  RunOutput output(logs, args.verbose);
  g_output = &output;
  struct Reset {
    ~Reset() { g_output = nullptr; }
  } reset;
  std::cout << "fact optimize " << args.model << " (" << args.dtype << ") -> " << out_dir.string()
            << "/\nthird-party output (torch.export, Inductor, compilers, warnings): " << logs.string()
            << "/" << (args.verbose ? "" : "  (-v shows it here too)") << "\n";

  // 1. capture (Python)
  const fs::path graph_path = out_dir / "graph.json";
  const std::optional<std::string> no_gpu = engine::gpu_unavailable_reason();
  capture(args, graph_path, logs, no_gpu ? "cpu" : "cuda");

  std::vector<std::string> skipped;

  // 1b. --agent: an LLM writes kernels for the NEW matches; only those that pass the gates
  // enter the registry, from which the plan below takes them (python/fact/agent/synthesize.py).
  if (args.agent) {
    std::vector<std::string> agent_args = {"--graph", graph_path.string(), "--model", args.model, "--dtype", args.dtype,
                                           "--arch", no_gpu ? "host" : "sm_90a", "-o", (out_dir / "agent").string()};
    if (!args.precision.empty()) agent_args.insert(agent_args.end(), {"--precision", args.precision});
    if (!args.agent_endpoint.empty()) agent_args.insert(agent_args.end(), {"--endpoint", args.agent_endpoint});
    if (!args.agent_model.empty()) agent_args.insert(agent_args.end(), {"--llm-model", args.agent_model});
    if (args.agent_attempts > 0) agent_args.insert(agent_args.end(), {"--attempts", std::to_string(args.agent_attempts)});
    if (args.agent_max_tokens > 0) agent_args.insert(agent_args.end(), {"--max-tokens", std::to_string(args.agent_max_tokens)});
    if (args.agent_seconds > 0) agent_args.insert(agent_args.end(), {"--seconds", std::to_string(args.agent_seconds)});
    const util::ProcessResult agent = run_python_module("agent", "fact.agent.synthesize", agent_args, logs, args.verbose);
    if (!agent.succeeded()) skipped.push_back("agent: python -m fact.agent.synthesize failed (" + agent.describe() + ")");
  }

  // The roofline estimates use the device's measured ceilings: on a GPU with no saved profile,
  // `fact device` runs once here (a few seconds) and saves it, so a report on an H200 does not
  // read the H100 defaults.
  if (!no_gpu && !std::filesystem::exists(default_device_profile_path())) {
    std::cout << "\n== device (no saved profile: measured once)\n";
    measure_and_save_device_profile();
  }

  // 2. the engine: discover, tune (GPU), realize each kernel once, plan
  engine::PlanRequest request;
  request.graph = graph_path;
  request.out_dir = out_dir / "plan";
  request.precision = precision_option(args.precision);
  request.compile = !args.no_compile;
  if (args.no_compile) skipped.push_back("compilation: --no-compile was given");
  request.tune = args.no_tune || no_gpu ? 0 : (args.max_candidates > 0 ? args.max_candidates : 1000000);
  if (args.no_tune) skipped.push_back("auto-tuning: --no-tune was given");
  request.space = args.space;
  request.baselines = {"cublas", "cublaslt"};
  request.jobs = args.jobs;
  request.progress = isatty(STDERR_FILENO) != 0;
  request.device = no_gpu ? "cpu" : "cuda";
  request.inputs = planned_signature(graph_path);
  if (!args.patterns.empty()) request.patterns = args.patterns;
  std::cout << "\n== plan (engine: discover" << (request.tune ? ", tune" : "") << ", realize)\n" << std::flush;
  const engine::PlanResult plan = engine::make_plan(request);
  const std::string precision(core::precision_name(plan.options.precision));
  const std::string table = discover::discovery_table(plan.discovery, plan.captured, plan.options);
  std::cout << "\n== discover (precision mode: " << precision << ")\n" << table;
  print_tuning(plan.tuning);
  const std::vector<compose::KernelRow> rows = compose::kernel_rows(plan.plan);
  print_kernel_table(rows, std::cout);
  for (const auto& s : plan.skipped) {
    if (s.rfind("compilation: not asked", 0) != 0) skipped.push_back(s);
  }
  if (no_gpu && !args.no_tune) skipped.push_back("auto-tuning: " + *no_gpu);
  const bool compiled = std::any_of(plan.realized.kernels.begin(), plan.realized.kernels.end(),
                                    [](const realize::RealizedKernel& k) { return k.status == "built" || k.status == "cached"; });
  const std::vector<compose::RooflinePoint> roofline =
      compose::roofline_points(plan.plan, plan.options.device, plan.options.precision, measured_times(plan.tuning));
  std::cout << "\n== roofline (" << plan.options.device.name << ")\n" << compose::roofline_table(roofline);

  // 3. the composed module as a Python package
  const PackageOutcome package = write_package(args, request.out_dir, out_dir, !no_gpu, compiled);
  if (no_gpu) skipped.push_back("verification of the packaged kernels on the GPU: " + *no_gpu +
                                " (replacements were verified on the CPU with the host reference)");

  // 4. end to end on the GPU: verification against float64 and the speedup table
  std::string end_to_end;
  if (no_gpu) {
    skipped.push_back("end-to-end verification and timing against eager / torch.compile: " + *no_gpu);
  } else if (!package.written) {
    skipped.push_back("end-to-end verification and timing: no package");
  } else if (args.no_measure) {
    skipped.push_back("end-to-end verification and timing: --no-measure was given");
  } else {
    end_to_end = measure_end_to_end(args, out_dir, package);
  }

  // 5. the report, then its plots and HTML form
  compose::OptimizeReport report;
  report.model = args.model;
  report.dtype = args.dtype;
  report.precision = precision;
  report.fact_version = build_info::kVersion;
  report.cutlass_version = build_info::kCutlassVersion;
  report.device = plan.options.device;
  report.device_measured = report.device.name.find("(defaults)") == std::string::npos;
  report.device_profile_path = report.device_measured ? default_device_profile_path().string() : "";
  report.discovery_table = table;
  report.kernels = rows;
  report.roofline = roofline;
  report.tuning = tuning_rows(plan.tuning);
  report.package_note = package.note;
  if (package.written) report.package_name = package.path.filename().string();
  report.end_to_end = end_to_end;
  report.skipped = skipped;
  report.logs_dir = "logs";
  util::write_file_atomically(out_dir / "report.md", compose::render_optimize_report(report));

  nlohmann::json kernels = nlohmann::json::array();
  for (const compose::KernelRow& r : rows) {
    kernels.push_back({{"label", r.label}, {"rule", r.rule}, {"classification", r.classification},
                       {"problem", r.problem}, {"key", r.key}, {"build", r.build}, {"detail", r.detail}});
  }
  nlohmann::json tuning = nlohmann::json::array();
  for (const engine::TunedCall& t : plan.tuning) {
    nlohmann::json entry = t.result ? t.result->to_json() : nlohmann::json::object();
    entry["call"] = label_of(t);
    entry["label"] = t.label;
    if (!t.error.empty()) entry["error"] = t.error;
    tuning.push_back(std::move(entry));
  }
  nlohmann::json points = nlohmann::json::array();
  for (const compose::RooflinePoint& p : roofline) points.push_back(p.to_json());
  nlohmann::json doc = {{"schema", "fact.optimize_report/1"},
                        {"model", args.model},
                        {"dtype", args.dtype},
                        {"precision", precision},
                        {"device_profile", device_profile_to_json(plan.options.device)},
                        {"device_profile_measured", report.device_measured},
                        {"kernels", kernels},
                        {"roofline", points},
                        {"tuning", tuning},
                        {"skipped", skipped},
                        {"e2e", end_to_end.empty() ? nlohmann::json(nullptr) : nlohmann::json("e2e.json")},
                        {"package", {{"written", package.written}, {"path", package.path.string()},
                                     {"note", package.note}}},
                        {"cutlass", build_info::kCutlassVersion}};
  util::write_file_atomically(out_dir / "report.json", doc.dump(2) + "\n");
  if (auto why_not = draw_plots(args, out_dir)) {
    std::ofstream(out_dir / "report.md", std::ios::app) << "\n## Plots\n\nNot drawn: " << *why_not << "\n";
    std::cout << "plots: " << *why_not << "\n";
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\n== skipped\n";
  for (const std::string& s : skipped) std::cout << "  - " << s << "\n";
  std::cout << "\npackage: " << package.note << "\n";
  std::cout << "\nwrote " << (out_dir / "report.md").string();
  if (fs::exists(out_dir / "report.html")) std::cout << " and " << (out_dir / "report.html").string();
  std::cout << " (" << std::fixed << std::setprecision(0) << seconds << " s); logs: " << logs.string() << "/\n";
  size_t failed = 0;
  for (const auto& k : plan.realized.kernels) failed += k.status == "failed" ? 1 : 0;
  if (failed != 0)
    throw std::runtime_error(std::to_string(failed) + " kernel(s) could not be compiled; see the table above");
  if (!package.written) throw std::runtime_error("the package was " + package.note);
}

}  // namespace

void add_optimize_command(CLI::App& app) {
  auto args = std::make_shared<OptimizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "optimize", "Capture a model file's module, discover, realize and (on a Hopper GPU) tune its "
                  "kernels, then write the composed module as an importable Python package");
  cmd->add_option("model", args->model, "Model file and class: path/to/model.py:ClassName (the file "
                                        "also defines get_inputs() and get_init_inputs())")
      ->required();
  cmd->add_option("--dtype", args->dtype,
                  "Run the model in this dtype: float32 (fp32), bfloat16 (bf16), float16 (fp16)")
      ->check(CLI::IsMember(model_dtype_words()));
  cmd->add_option("--precision", args->precision,
                  "strict | tf32 | native (default: strict for float32, native for bf16/fp16)")
      ->check(CLI::IsMember(precision_words()));
  cmd->add_option("-o,--out", args->out_dir, "Output folder (graph, discovery, kernels, report, package)");
  cmd->add_option("--space", args->space, "Tuning space: default or exhaustive")
      ->check(CLI::IsMember({"default", "exhaustive"}));
  cmd->add_option("--max-candidates", args->max_candidates, "Tune at most this many configurations per kernel (0: all)");
  cmd->add_option("-j,--jobs", args->jobs, "Parallel compiles (0: all cores)");
  cmd->add_flag("--no-measure", args->no_measure,
                "On a GPU, skip the end-to-end check (float64 verification and the speedup table)");
  cmd->add_flag("--no-max-autotune", args->no_max_autotune,
                "End-to-end table without torch.compile(mode=\"max-autotune\") (its compile takes minutes)");
  cmd->add_option("--patterns", args->patterns,
                  "Only these rules or pattern folders (opt-in ones such as rmsnorm or rope only when "
                  "named; list the others too, e.g. rmsnorm,gemm,attention,swiglu,mlp)")
      ->delimiter(',');
  cmd->add_flag("--no-tune", args->no_tune, "Do not tune (the package takes stored or default configurations)");
  cmd->add_flag("--no-compile", args->no_compile,
                "Render the kernels only (no nvcc); the package then composes with the reference "
                "implementation on the CPU only");
  cmd->add_flag("--agent", args->agent,
                "Ask an LLM (OpenAI-compatible chat completions) for kernels of the NEW matches first; those that "
                "pass the gates enter the registry and the plan (endpoint: --agent-endpoint, $FACT_AGENT_BASE_URL "
                "or <cache>/agent.json; key: $FACT_AGENT_API_KEY). Without an endpoint they stay PyTorch's");
  cmd->add_option("--agent-endpoint", args->agent_endpoint, "Base URL of the chat-completions API (…/v1)");
  cmd->add_option("--agent-model", args->agent_model, "Model name to ask for");
  cmd->add_option("--agent-attempts", args->agent_attempts, "Attempts per NEW match (default 4)");
  cmd->add_option("--agent-max-tokens", args->agent_max_tokens, "Token budget per NEW match (default 60000)");
  cmd->add_option("--agent-seconds", args->agent_seconds, "Wall-clock budget per NEW match (default 600)");
  cmd->add_option("--package-name", args->package_name,
                  "Name of the Python package written into the output folder (default fact_<class>)");
  cmd->add_flag("-v,--verbose", args->verbose,
                "Also show the commands, every tuned configuration and third-party output (torch.export, "
                "Inductor autotuning, compilers, warnings); always in <out>/logs/");
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
