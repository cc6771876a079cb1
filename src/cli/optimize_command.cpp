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
//   report    <out>/report.md + report.json, saying what ran, what was skipped and why
//
// Stages that cannot run here are skipped with the reason printed, never silently.
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "fact/build_info.hpp"
#include "fact/discover/report.hpp"
#include "fact/engine/engine.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/subprocess.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/python_module.hpp"

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
  std::string package_name;  // empty: fact_<class>
  bool no_measure = false, no_max_autotune = false;
  // --agent: NEW matches go to an LLM (python -m fact.agent.synthesize) before the plan.
  bool agent = false;
  std::string agent_endpoint, agent_model;
  int agent_attempts = 0, agent_max_tokens = 0;
  double agent_seconds = 0;
};

// Captures on the device the package runs on (cuda, else cpu), not on meta: the graph the plan
// names must be the one fact.package exports there, and meta kernels give some ops other output
// strides (SDPA: [B, H, T, D]-contiguous on meta, [B, T, H, D] from the CPU and CUDA kernels),
// so a later `.contiguous()` is a node on meta and none on the device, and every replacement
// reading it was declined at apply time. The package builds the model there anyway.
void capture(const OptimizeArgs& args, const fs::path& graph_path, const std::string& device) {
  const util::ProcessResult result = run_python_module(
      "capture", "fact.capture",
      {args.model, "-o", graph_path.string(), "--dtype", args.dtype, "--device", device});
  if (!result.succeeded())
    throw std::runtime_error("capture of " + args.model + " failed (" + result.describe() +
                             "); see the message above");
}

// The planned signature (plan.json's "inputs", docs/plan.md) of the captured example inputs:
// {"shape", "dtype": "torch.<dtype>"} per graph input, as fact.compose writes it. The package
// applies the plan only to inputs with this signature; left empty, it applied nothing.
nlohmann::json captured_inputs(const fs::path& graph_path) {
  const nlohmann::json graph = nlohmann::json::parse(util::read_file(graph_path));
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& id : graph.at("inputs")) {
    for (const auto& value : graph.at("values")) {
      if (value.value("id", "") != id.get<std::string>()) continue;
      inputs.push_back({{"shape", value.at("shape")}, {"dtype", "torch." + value.value("dtype", "")}});
      break;
    }
  }
  return inputs;
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
       args.dtype, "--device", on_gpu ? "cuda" : "cpu"});
  outcome.path = out_dir / name;
  if (!result.succeeded()) {
    outcome.note = "not written: python -m fact.package failed (" + result.describe() +
                   "); see the message above";
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
  const util::ProcessResult result = run_python_module("end to end", "fact.measure", module_args);
  if (!result.succeeded())
    return "End-to-end measurement failed (" + result.describe() + "); see the console output.\n";
  try {
    return util::read_file(out_dir / "e2e.md");
  } catch (const std::exception& e) {
    return std::string("End-to-end measurement wrote no e2e.md: ") + e.what() + "\n";
  }
}

std::string fmt_ms(std::optional<double> ms) {
  if (!ms) return "-";
  std::ostringstream s;
  s << std::fixed << std::setprecision(4) << *ms;
  return s.str();
}

// One row per kernel call of the plan: label, problem, build status, configuration or reason.
struct KernelRow {
  std::string label, rule, problem, key, build, detail;
};

std::vector<KernelRow> kernel_rows(const nlohmann::json& plan) {
  std::vector<KernelRow> rows;
  const nlohmann::json& kernels = plan.at("kernels");
  for (const auto& r : plan.at("replacements")) {
    if (r.value("status", "") != "planned" && r.value("status", "") != "failed") continue;
    for (const auto& call : r.at("calls")) {
      KernelRow row;
      row.label = call.value("label", "");
      row.rule = r.value("rule", "");
      row.problem = call.value("summary", "");
      const std::string key = call.value("kernel", "");
      row.key = key.substr(0, 12);
      if (key.empty() || !kernels.contains(key)) {
        row.build = "not realized";
        row.detail = r.value("reason", "");
      } else {
        const auto& k = kernels.at(key);
        row.build = k.value("status", "");
        row.detail = k.contains("reason") ? k.value("reason", "") : k.value("name", "");
        if (call.value("config_source", "default") != "default") row.detail += " (" + call.value("config_source", "") + ")";
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

void print_kernel_table(const std::vector<KernelRow>& rows, std::ostream& os) {
  os << "\n== realize: " << rows.size() << " kernel call(s)\n";
  os << std::left << std::setw(5) << "#" << std::setw(48) << "kernel problem" << std::setw(14) << "key"
     << std::setw(14) << "build" << "configuration / reason\n";
  for (const KernelRow& r : rows) {
    os << std::left << std::setw(5) << r.label << std::setw(48) << r.problem << std::setw(14)
       << (r.key.empty() ? "-" : r.key) << std::setw(14) << r.build << r.detail << "\n";
  }
}

void write_report(const OptimizeArgs& args, const std::string& precision, const fs::path& out_dir,
                  const std::string& discovery_table, const std::vector<KernelRow>& rows,
                  const std::vector<engine::TunedCall>& tuned, const PackageOutcome& package,
                  const std::string& end_to_end, const std::vector<std::string>& skipped) {
  std::ostringstream md;
  md << "# FACT optimize report: `" << args.model << "`\n\n"
     << "- dtype: " << args.dtype << "\n- precision mode: **" << precision << "**\n"
     << "- fact " << build_info::kVersion << ", CUTLASS " << build_info::kCutlassVersion << "\n\n"
     << "## Discovery\n\n```\n" << discovery_table << "```\n\n## Kernels\n\n"
     << "| # | match | problem | key | build | configuration / reason |\n|---|---|---|---|---|---|\n";
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelRow& r : rows) {
    md << "| " << r.label << " | " << r.rule << " | " << r.problem << " | `" << r.key << "` | " << r.build
       << " | " << r.detail << " |\n";
    kernels.push_back({{"label", r.label}, {"rule", r.rule}, {"problem", r.problem}, {"key", r.key},
                       {"build", r.build}, {"detail", r.detail}});
  }
  nlohmann::json tuning = nlohmann::json::array();
  if (!tuned.empty()) {
    md << "\n## Tuning (verified against float64; baselines measured in the same run)\n\n"
       << "| call | best configuration | ms | rel. err | baseline | baseline ms | speedup |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const engine::TunedCall& t : tuned) {
      if (!t.result || !t.result->ok()) {
        md << "| " << t.label << " | not tuned: " << (t.error.empty() ? "no candidate verified" : t.error)
           << " | | | | | |\n";
        tuning.push_back({{"call", t.label}, {"error", t.error}});
        continue;
      }
      const realize::CandidateOutcome& best = *t.result->best;
      const realize::BaselineMeasurement* base = realize::reference_baseline(*t.result);
      const std::optional<double> ms = best.ms ? std::optional<double>(best.ms->median) : std::nullopt;
      md << "| " << t.label << " | " << best.config << " | " << fmt_ms(ms) << " | "
         << (best.rel_err ? std::to_string(*best.rel_err) : "-") << " | "
         << (base ? base->name : "-") << " | " << fmt_ms(base ? base->ms : std::nullopt) << " | ";
      if (base && base->ms && ms) md << std::fixed << std::setprecision(2) << *base->ms / *ms << "x";
      md << " |\n";
      nlohmann::json entry = t.result->to_json();
      entry["call"] = t.label;
      tuning.push_back(std::move(entry));
    }
  }
  md << "\n## Composed module (Python package)\n\n" << package.note << "\n";
  if (package.written)
    md << "\nPer replacement (calls, configuration, tuned or default, verification error against "
       << "the subgraph it replaces): `" << package.path.filename().string() << "/report.json`.\n";
  if (!end_to_end.empty()) md << "\n" << end_to_end << "\nData: `e2e.json`.\n";
  if (!skipped.empty()) {
    md << "\n## Skipped\n\n";
    for (const std::string& s : skipped) md << "- " << s << "\n";
  }
  util::write_file_atomically(out_dir / "report.md", md.str());
  nlohmann::json doc = {{"model", args.model},   {"dtype", args.dtype}, {"precision", precision},
                        {"kernels", kernels},    {"tuning", tuning},    {"skipped", skipped},
                        {"package", {{"written", package.written}, {"path", package.path.string()},
                                     {"note", package.note}}},
                        {"cutlass", build_info::kCutlassVersion}};
  util::write_file_atomically(out_dir / "report.json", doc.dump(2) + "\n");
}

// torch's dtype name for the spellings users type: bf16 -> bfloat16, fp16 -> float16, ...
std::string torch_dtype(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "bfloat16") return "bfloat16";
  if (dtype == "fp16" || dtype == "f16" || dtype == "half" || dtype == "float16") return "float16";
  if (dtype == "fp32" || dtype == "f32" || dtype == "float" || dtype == "float32") return "float32";
  throw std::invalid_argument("--dtype '" + dtype + "': expected bfloat16 (bf16), float16 (fp16) or float32 (fp32)");
}

void run(OptimizeArgs args) {
  const auto start = std::chrono::steady_clock::now();
  args.dtype = torch_dtype(args.dtype);
  const fs::path out_dir = args.out_dir;
  fs::create_directories(out_dir);

  // 1. capture (Python)
  const fs::path graph_path = out_dir / "graph.json";
  const std::optional<std::string> no_gpu = engine::gpu_unavailable_reason();
  capture(args, graph_path, no_gpu ? "cpu" : "cuda");

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
    const util::ProcessResult agent = run_python_module("agent", "fact.agent.synthesize", agent_args);
    if (!agent.succeeded()) skipped.push_back("agent: python -m fact.agent.synthesize failed (" + agent.describe() + ")");
  }

  // 2. the engine: discover, tune (GPU), realize each kernel once, plan
  engine::PlanRequest request;
  request.graph = graph_path;
  request.out_dir = out_dir / "plan";
  request.inputs = captured_inputs(graph_path);
  request.precision = args.precision;
  request.compile = !args.no_compile;
  if (args.no_compile) skipped.push_back("compilation: --no-compile was given");
  request.tune = args.no_tune || no_gpu ? 0 : (args.max_candidates > 0 ? args.max_candidates : 1000000);
  if (args.no_tune) skipped.push_back("auto-tuning: --no-tune was given");
  request.space = args.space;
  request.baselines = {"cublas", "cublaslt"};
  request.jobs = args.jobs;
  request.progress = isatty(STDERR_FILENO) != 0;
  request.device = no_gpu ? "cpu" : "cuda";
  std::cout << "\n== plan (engine)\n" << std::flush;
  const engine::PlanResult plan = engine::make_plan(request);
  const std::string precision = plan.options.precision;
  const std::string table = discover::discovery_table(plan.discovery, plan.captured, plan.options);
  std::cout << "\n== discover (precision mode: " << precision << ")\n" << table;
  for (const auto& t : plan.tuning) {
    std::cout << "\n== tune " << t.label << "\n";
    if (t.result) std::cout << realize::format_tune_table(*t.result);
    if (!t.error.empty()) std::cout << "  not tuned: " << t.error << "\n";
  }
  const std::vector<KernelRow> rows = kernel_rows(plan.plan);
  print_kernel_table(rows, std::cout);
  for (const auto& s : plan.skipped) {
    if (s.rfind("compilation: not asked", 0) != 0) skipped.push_back(s);
  }
  if (no_gpu && !args.no_tune) skipped.push_back("auto-tuning: " + *no_gpu);
  const bool compiled = std::any_of(plan.realized.kernels.begin(), plan.realized.kernels.end(),
                                    [](const realize::RealizedKernel& k) { return k.status == "built" || k.status == "cached"; });

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

  write_report(args, precision, out_dir, table, rows, plan.tuning, package, end_to_end, skipped);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\n== skipped\n";
  for (const std::string& s : skipped) std::cout << "  - " << s << "\n";
  std::cout << "\npackage: " << package.note << "\n";
  std::cout << "\nwrote " << (out_dir / "report.md").string() << " ("
            << std::fixed << std::setprecision(0) << seconds << " s)\n";
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
      ->check(CLI::IsMember({"float32", "bfloat16", "float16", "fp32", "bf16", "fp16", "f32", "f16"}));
  cmd->add_option("--precision", args->precision,
                  "strict | tf32 | native (default: strict for float32, native for bf16/fp16)")
      ->check(CLI::IsMember({"strict", "tf32", "native"}));
  cmd->add_option("-o,--out", args->out_dir, "Output folder (graph, discovery, kernels, report, package)");
  cmd->add_option("--space", args->space, "Tuning space: default or exhaustive")
      ->check(CLI::IsMember({"default", "exhaustive"}));
  cmd->add_option("--max-candidates", args->max_candidates, "Tune at most this many configurations per kernel (0: all)");
  cmd->add_option("-j,--jobs", args->jobs, "Parallel compiles (0: all cores)");
  cmd->add_flag("--no-measure", args->no_measure,
                "On a GPU, skip the end-to-end check (float64 verification and the speedup table)");
  cmd->add_flag("--no-max-autotune", args->no_max_autotune,
                "End-to-end table without torch.compile(mode=\"max-autotune\") (its compile takes minutes)");
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
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
