// `fact optimize model.py:ClassName`: the whole pipeline on a model file.
//
//   capture   python -m fact.capture (the only Python step) → <out>/graph.json
//   discover  ranked matches → printed table, <out>/discovery.json
//   realize   every GEMM of every accepted match → CUTLASS source → parallel cached nvcc build
//   tune      (Hopper GPU present) sweep, verify against float64, time against cuBLAS/cuBLASLt
//   package   python -m fact.package → <out>/<package>/: the composed module as an importable
//             Python package (plan, kernel libraries, model file, weights; the realize step
//             there takes the tuned choices from the tuning database), verified on the GPU
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

#ifdef FACT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "fact/build_info.hpp"
#include "fact/discover/discover.hpp"
#include "fact/discover/report.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/compile_command.hpp"
#include "fact/realize/gemm_candidates.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/render.hpp"
#include "fact/realize/spec_from_problem.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/realize/tuner.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/subprocess.hpp"
#include "src/cli/commands.hpp"

namespace fact::cli {

namespace {

namespace fs = std::filesystem;

struct OptimizeArgs {
  std::string model;  // path/to/model.py:ClassName
  std::string dtype = "float32";
  std::string precision;  // default: strict for float32, native otherwise
  std::string out_dir = "out/optimize";
  std::string space = "default";
  size_t max_candidates = 0;
  int jobs = 0;
  bool no_tune = false;
  bool no_compile = false;
  std::string package_name;  // empty: fact_<class>
  bool no_measure = false, no_max_autotune = false;
};

// One kernel to realize: a GEMM of an accepted match.
struct KernelTask {
  std::string match_rule;
  size_t match_index = 0;
  discover::GemmProblem problem;
  std::string problem_label;
  std::optional<realize::RenderedKernel> rendered;
  std::string render_error;
  std::optional<realize::BuildOutcome> build;
};

// Why GPU stages cannot run in this process, or nullopt when a Hopper GPU is usable.
std::optional<std::string> gpu_unavailable_reason() {
#ifdef FACT_HAVE_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return std::string("no CUDA GPU on this machine (cudaGetDeviceCount: ") + cudaGetErrorString(err) + ")";
  if (count == 0) return "no CUDA device on this machine";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cannot read device 0's properties";
  if (prop.major != 9)
    return std::string("device 0 (") + prop.name + ") is not a Hopper GPU (sm_" +
           std::to_string(prop.major) + std::to_string(prop.minor) + "); kernels target sm_90a";
  return std::nullopt;
#else
  return "this fact binary was built without the CUDA runtime";
#endif
}

std::string python_executable() {
  if (const char* p = std::getenv("FACT_PYTHON"); p && *p) return p;
  return "python3";
}

// Runs `python -m <module> <args>` with the source tree's python/ first on PYTHONPATH and
// FACT_ENGINE naming this executable (so Python's engine calls come back to this build).
util::ProcessResult run_python_module(const std::string& stage, const std::string& module,
                                      const std::vector<std::string>& module_args) {
  std::vector<std::string> argv = {python_executable(), "-m", module};
  argv.insert(argv.end(), module_args.begin(), module_args.end());
  util::ProcessOptions options;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) options.extra_environment.emplace_back("FACT_ENGINE", self.string());
  std::string pythonpath = std::string(build_info::kSourceDir) + "/python";
  if (const char* existing = std::getenv("PYTHONPATH"); existing && *existing)
    pythonpath += std::string(":") + existing;
  options.extra_environment.emplace_back("PYTHONPATH", pythonpath);
  std::cout << "\n== " << stage << ": " << util::shell_join(argv) << "\n" << std::flush;
  return util::run_process(argv, options);
}

void capture(const OptimizeArgs& args, const fs::path& graph_path) {
  // Capture needs shapes, not data: the meta device keeps large models off host memory.
  const util::ProcessResult result = run_python_module(
      "capture", "fact.capture",
      {args.model, "-o", graph_path.string(), "--dtype", args.dtype, "--device", "meta"});
  if (!result.succeeded())
    throw std::runtime_error("capture of " + args.model + " failed (" + result.describe() +
                             "); see the message above");
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

// The composed module as a Python package (python -m fact.package): planned with the engine
// again (kernels come from the kernel cache, configurations from the tuning database), applied
// once on the GPU to verify every kernel, or on the CPU when there is none.
PackageOutcome write_package(const OptimizeArgs& args, const std::string& precision,
                             const fs::path& out_dir, bool on_gpu, bool compile) {
  PackageOutcome outcome;
  const std::string name = args.package_name.empty() ? default_package_name(args.model) : args.package_name;
  const util::ProcessResult result = run_python_module(
      "package", "fact.package",
      {args.model, "-o", out_dir.string(), "--name", name, "--precision", precision, "--dtype",
       args.dtype, "--device", on_gpu ? "cuda" : "cpu", compile ? "--compile" : "--no-compile",
       "--work-dir", (out_dir / "plan").string()});
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

std::vector<KernelTask> collect_kernels(const discover::Discovery& discovery) {
  std::vector<KernelTask> tasks;
  for (size_t i = 0; i < discovery.matches.size(); ++i) {
    const discover::Match& match = discovery.matches[i];
    if (match.status != discover::MatchStatus::Accepted) continue;
    for (size_t g = 0; g < match.gemms.size(); ++g) {
      KernelTask task;
      task.match_rule = match.rule;
      task.match_index = i + 1;
      task.problem = match.gemms[g];
      task.problem_label = match.gemms[g].fusion_name() + " " + match.gemms[g].shape_string();
      tasks.push_back(std::move(task));
    }
  }
  return tasks;
}

void realize_kernels(std::vector<KernelTask>& tasks, const std::string& precision, int jobs,
                     const realize::CompileOptions& compile_options,
                     const std::optional<std::string>& cannot_compile) {
  std::vector<realize::BuildJob> build_jobs;
  std::vector<size_t> job_task;
  for (size_t i = 0; i < tasks.size(); ++i) {
    try {
      const realize::KernelSpec spec = realize::spec_from_problem(tasks[i].problem, precision);
      tasks[i].rendered = realize::render_kernel(spec, compile_options);
      if (!cannot_compile) {
        build_jobs.push_back(realize::build_job(*tasks[i].rendered, compile_options));
        job_task.push_back(i);
      }
    } catch (const std::exception& e) {
      tasks[i].render_error = e.what();
    }
  }
  if (cannot_compile || build_jobs.empty()) return;
  realize::KernelCache cache;
  realize::BuildOptions options;
  options.jobs = jobs;
  options.title = "compile";
  realize::BuildDriver driver(cache, options);
  std::vector<realize::BuildOutcome> outcomes = driver.build(build_jobs);
  for (size_t j = 0; j < outcomes.size(); ++j) tasks[job_task[j]].build = outcomes[j];
}

void print_kernel_table(const std::vector<KernelTask>& tasks, std::ostream& os) {
  os << "\n== realize: " << tasks.size() << " kernel(s)\n";
  os << std::left << std::setw(4) << "#" << std::setw(34) << "match / kernel problem"
     << std::setw(16) << "key" << std::setw(16) << "build" << "config / reason\n";
  for (const KernelTask& t : tasks) {
    os << std::left << std::setw(4) << t.match_index << std::setw(34) << t.problem_label.substr(0, 33);
    if (!t.rendered) {
      os << std::setw(16) << "-" << std::setw(16) << "not rendered" << t.render_error << "\n";
      continue;
    }
    os << std::setw(16) << t.rendered->key.substr(0, 12);
    if (!t.build) {
      os << std::setw(16) << "not compiled" << t.rendered->spec.name() << "\n";
      continue;
    }
    std::ostringstream status;
    status << realize::build_status_name(t.build->status);
    if (t.build->usable()) status << " " << std::fixed << std::setprecision(0) << t.build->compile_seconds << "s";
    os << std::setw(16) << status.str()
       << (t.build->usable() ? t.rendered->spec.name() : t.build->reason) << "\n";
  }
}

struct TunedKernel {
  std::string label;
  std::optional<realize::TuneResult> result;
  std::string error;
};

std::vector<TunedKernel> tune_kernels(const std::vector<KernelTask>& tasks, const OptimizeArgs& args,
                                      const std::string& precision, const fs::path& out_dir) {
  realize::GemmCandidateSource source;
  realize::KernelCache cache;
  realize::BuildOptions build_options;
  build_options.jobs = args.jobs;
  build_options.title = "tune build";
  realize::BuildDriver driver(cache, build_options);
  realize::SubprocessRunner runner;
  realize::TuningDb db;
  realize::Tuner tuner(source, driver, runner, db);
  std::vector<TunedKernel> tuned;
  for (const KernelTask& task : tasks) {
    TunedKernel entry;
    entry.label = task.problem_label;
    std::cout << "\n== tune: " << task.problem_label << "\n" << std::flush;
    try {
      realize::TuneRequest request;
      request.problem = task.problem;
      request.precision = precision;
      request.space = args.space;
      request.max_candidates = args.max_candidates;
      request.baselines = {"cublas", "cublaslt"};
      request.work_dir = out_dir / "tune" / std::to_string(tuned.size());
      entry.result = tuner.tune(request);
      realize::write_tune_report(*entry.result, out_dir / "tune");
      std::cout << realize::format_tune_table(*entry.result);
    } catch (const std::exception& e) {
      entry.error = e.what();
      std::cout << "  not tuned: " << entry.error << "\n";
    }
    tuned.push_back(std::move(entry));
  }
  return tuned;
}

void write_report(const OptimizeArgs& args, const std::string& precision, const fs::path& out_dir,
                  const std::string& discovery_table, const std::vector<KernelTask>& tasks,
                  const std::vector<TunedKernel>& tuned, const PackageOutcome& package,
                  const std::string& end_to_end, const std::vector<std::string>& skipped) {
  std::ostringstream md;
  md << "# FACT optimize report: `" << args.model << "`\n\n"
     << "- dtype: " << args.dtype << "\n- precision mode: **" << precision << "**\n"
     << "- fact " << build_info::kVersion << ", CUTLASS " << build_info::kCutlassVersion << "\n\n"
     << "## Discovery\n\n```\n" << discovery_table << "```\n\n## Kernels\n\n"
     << "| # | problem | key | build | configuration / reason |\n|---|---|---|---|---|\n";
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelTask& t : tasks) {
    const std::string key = t.rendered ? t.rendered->key.substr(0, 16) : "-";
    const std::string build = !t.rendered ? "not rendered"
                              : t.build   ? std::string(realize::build_status_name(t.build->status))
                                          : "not compiled";
    const std::string detail = !t.rendered ? t.render_error
                               : (t.build && !t.build->usable()) ? t.build->reason
                                                                  : t.rendered->spec.name();
    md << "| " << t.match_index << " | " << t.problem_label << " | `" << key << "` | " << build
       << " | " << detail << " |\n";
    kernels.push_back({{"match", t.match_index}, {"rule", t.match_rule}, {"problem", t.problem_label},
                       {"key", t.rendered ? t.rendered->key : ""}, {"build", build}, {"detail", detail}});
  }
  nlohmann::json tuning = nlohmann::json::array();
  if (!tuned.empty()) {
    md << "\n## Tuning (verified against float64; baselines measured in the same run)\n\n"
       << "| problem | best configuration | ms | rel. err | baseline | baseline ms | speedup |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const TunedKernel& t : tuned) {
      if (!t.result || !t.result->ok()) {
        md << "| " << t.label << " | not tuned: " << (t.error.empty() ? "no candidate verified" : t.error)
           << " | | | | | |\n";
        tuning.push_back({{"problem", t.label}, {"error", t.error}});
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
      tuning.push_back(t.result->to_json());
    }
  }
  md << "\n## Composed module (Python package)\n\n" << package.note << "\n";
  if (package.written)
    md << "\nPer composed GEMM (configuration, tuned or default, verification error): "
       << "`" << package.path.filename().string() << "/report.json`.\n";
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

void run(const OptimizeArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path out_dir = args.out_dir;
  fs::create_directories(out_dir);
  const std::string precision =
      !args.precision.empty() ? args.precision : (args.dtype == "float32" ? "strict" : "native");

  // 1. capture (Python) and discover (C++)
  const fs::path graph_path = out_dir / "graph.json";
  capture(args, graph_path);
  const graph::Graph captured = graph::load_graph(graph_path);
  discover::DiscoverOptions options;
  options.precision = precision;
  const discover::Discovery discovery = discover::discover(captured, options);
  const std::string table = discover::discovery_table(discovery, captured, options);
  std::cout << "\n== discover (precision mode: " << precision << ")\n" << table;
  util::write_file_atomically(out_dir / "discovery.json",
                              discover::discovery_to_json(discovery, captured, options).dump(2) + "\n");

  // 2. realize: render and compile every kernel
  std::vector<std::string> skipped;
  const realize::CompileOptions compile_options = realize::default_compile_options();
  std::optional<std::string> cannot_compile = realize::compile_unavailable_reason(compile_options);
  if (!cannot_compile && args.no_compile) cannot_compile = "--no-compile was given";
  if (cannot_compile) skipped.push_back("compilation: " + *cannot_compile);
  std::vector<KernelTask> tasks = collect_kernels(discovery);
  realize_kernels(tasks, precision, args.jobs, compile_options, cannot_compile);
  print_kernel_table(tasks, std::cout);
  for (KernelTask& t : tasks)
    if (t.rendered) util::write_file_atomically(out_dir / "kernels" / (t.rendered->spec.name() + ".cu"),
                                                t.rendered->source);

  // 3. tune + verify on the GPU
  std::vector<TunedKernel> tuned;
  const std::optional<std::string> no_gpu = gpu_unavailable_reason();
  if (no_gpu) {
    skipped.push_back("verification against float64, auto-tuning and timing: " + *no_gpu);
  } else if (args.no_tune) {
    skipped.push_back("auto-tuning: --no-tune was given");
  } else if (cannot_compile) {
    skipped.push_back("auto-tuning: nothing can be compiled here");
  } else {
    tuned = tune_kernels(tasks, args, precision, out_dir);
  }

  // 4. the composed module as a Python package
  const PackageOutcome package = write_package(args, precision, out_dir, !no_gpu, !cannot_compile);
  if (no_gpu) skipped.push_back("verification of the packaged kernels: " + *no_gpu);

  // 5. end to end on the GPU: verification against float64 and the speedup table
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

  write_report(args, precision, out_dir, table, tasks, tuned, package, end_to_end, skipped);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\n== skipped\n";
  for (const std::string& s : skipped) std::cout << "  - " << s << "\n";
  std::cout << "\npackage: " << package.note << "\n";
  std::cout << "\nwrote " << (out_dir / "report.md").string() << " ("
            << std::fixed << std::setprecision(0) << seconds << " s)\n";
  size_t failed = 0;
  for (const KernelTask& t : tasks)
    if (!t.rendered || (t.build && !t.build->usable())) ++failed;
  if (failed != 0)
    throw std::runtime_error(std::to_string(failed) + " kernel(s) could not be rendered or compiled; see the table above");
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
  cmd->add_option("--dtype", args->dtype, "Run the model in this dtype")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
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
  cmd->add_option("--package-name", args->package_name,
                  "Name of the Python package written into the output folder (default fact_<class>)");
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
