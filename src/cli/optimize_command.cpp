// `fact optimize model.py:ClassName`: the whole pipeline on a model file, in one Python process.
//
// This command parses the flags, measures the device profile once on a GPU that has none saved
// (`fact device`), and runs `python -m fact.optimize_run` (python/fact/optimize_run.py) as its
// one child, with the same flags; its exit status is this command's. That process:
//
//   capture   builds the model and exports it once (torch.export), the graph in memory
//             (also written to <out>/graph.json for the user)
//   plan      the engine in process (libfact: fact_optimize_plan): discover, tune each kernel on
//             a Hopper GPU (one `fact run-kernel` child per candidate), realize each kernel once
//             (cached parallel nvcc builds), <out>/plan/plan.json
//   package   the plan applied to the SAME exported program, every replacement verified against
//             the subgraph it replaces (GPU, or the CPU host reference); the importable package
//   measure   (GPU) the package against the model in float64, and the speedup table against
//             eager / torch.compile / max-autotune -> <out>/e2e.{md,json}
//   report    report.md + report.json (libfact: fact_optimize_report), then the plots and
//             report.html (fact.plots, in the same process)
//
// Stages that cannot run here are skipped with the reason printed, never silently. Quiet by
// default: the terminal shows FACT's stages, progress and tables; third-party output (torch.export,
// Inductor autotuning, compilers, warnings) goes to <out>/logs/<stage>.log, and everything the
// run prints also to <out>/logs/optimize.log. -v shows the per-configuration tuning tables and
// the third-party output too.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fact/engine/engine.hpp"
#include "fact/problem/device_profile.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/python_module.hpp"
#include "src/cli/vocabulary.hpp"

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
  // --dynamic NAME=MIN..MAX[:MULTIPLE][@T1/T2],... and --dims INPUT:DIM,... (docs/dynamic_shapes.md):
  // parsed by python/fact/dynamic_ranges.py, the one parser; passed through as written.
  std::string dynamic;
  std::vector<std::string> dims;
  bool no_measure = false, no_max_autotune = false;
  bool verbose = false;
  // --agent: NEW matches go to an LLM (python -m fact.agent.synthesize) before the plan.
  bool agent = false;
  std::string agent_endpoint, agent_model;
  // The budget per NEW match: python/fact/agent/synthesize.py's Budget defaults (a test holds
  // them equal), shown by --help as the defaults they are.
  int agent_attempts = 4, agent_max_tokens = 60000;
  double agent_seconds = 600;
};

// torch's dtype name for the spellings users type: bf16 -> bfloat16, fp16 -> float16, ...
std::string torch_dtype(const std::string& dtype) {
  const core::DType parsed = core::parse_dtype(dtype);  // any spelling of the dtype table
  if (parsed == core::DType::BFloat16 || parsed == core::DType::Float16 || parsed == core::DType::Float32) {
    return std::string(core::dtype_name(parsed));
  }
  throw std::invalid_argument("--dtype '" + dtype + "': expected bfloat16 (bf16), float16 (fp16) or float32 (fp32)");
}

// The driver's command line: the same flags, spelled as python/fact/optimize_run.py parses them.
std::vector<std::string> driver_arguments(const OptimizeArgs& args) {
  std::vector<std::string> argv = {args.model, "--dtype", args.dtype, "-o", args.out_dir, "--space", args.space};
  if (!args.precision.empty()) argv.insert(argv.end(), {"--precision", args.precision});
  if (args.max_candidates > 0) argv.insert(argv.end(), {"--max-candidates", std::to_string(args.max_candidates)});
  if (args.jobs > 0) argv.insert(argv.end(), {"--jobs", std::to_string(args.jobs)});
  if (args.no_tune) argv.push_back("--no-tune");
  if (args.no_compile) argv.push_back("--no-compile");
  if (!args.patterns.empty()) {
    std::string joined;
    for (const std::string& p : args.patterns) joined += (joined.empty() ? "" : ",") + p;
    argv.insert(argv.end(), {"--patterns", joined});
  }
  if (!args.package_name.empty()) argv.insert(argv.end(), {"--package-name", args.package_name});
  if (!args.dynamic.empty()) argv.insert(argv.end(), {"--dynamic", args.dynamic});
  for (const std::string& dims : args.dims) argv.insert(argv.end(), {"--dims", dims});
  if (args.no_measure) argv.push_back("--no-measure");
  if (args.no_max_autotune) argv.push_back("--no-max-autotune");
  if (args.verbose) argv.push_back("-v");
  if (args.agent) argv.push_back("--agent");
  if (!args.agent_endpoint.empty()) argv.insert(argv.end(), {"--agent-endpoint", args.agent_endpoint});
  if (!args.agent_model.empty()) argv.insert(argv.end(), {"--agent-model", args.agent_model});
  if (args.agent) {
    argv.insert(argv.end(), {"--agent-attempts", std::to_string(args.agent_attempts), "--agent-max-tokens",
                             std::to_string(args.agent_max_tokens), "--agent-seconds", std::to_string(args.agent_seconds)});
  }
  return argv;
}

void run(OptimizeArgs args) {
  args.dtype = torch_dtype(args.dtype);
  const fs::path logs = fs::path(args.out_dir) / "logs";
  fs::create_directories(logs);
  // The roofline estimates use the device's measured ceilings: on a GPU with no saved profile,
  // `fact device` runs once here (a few seconds) and saves it, so a report on an H200 does not
  // read the H100 defaults.
  if (!engine::gpu_unavailable_reason() && !fs::exists(default_device_profile_path())) {
    std::cout << "\n== device (no saved profile: measured once)\n";
    measure_and_save_device_profile();
  }
  std::cout << std::flush;
  std::ostream no_command_line(nullptr);  // the driver logs its own command line (and shows it with -v)
  const util::ProcessResult driver = run_python_module("", "fact.optimize_run", driver_arguments(args),
                                                       PythonStep{logs, args.verbose, &no_command_line});
  if (driver.spawn_failed || driver.timed_out || driver.term_signal != 0)
    throw std::runtime_error("python -m fact.optimize_run " + driver.describe() + "; see " +
                             (logs / "optimize.log").string());
  // The driver printed its own error line; its status is this command's.
  if (driver.exit_code != 0) std::exit(driver.exit_code);
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
  cmd->add_option("--agent-attempts", args->agent_attempts, "Attempts per NEW match")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--agent-max-tokens", args->agent_max_tokens, "Token budget per NEW match")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--agent-seconds", args->agent_seconds, "Wall-clock budget per NEW match, in seconds")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dynamic", args->dynamic,
                  "Plan for declared ranges of dynamic dimensions: NAME=MIN..MAX[:MULTIPLE][@T1/T2],... "
                  "(e.g. batch=1..256,seq=16..4096:8@512/1024); the example inputs give each size's hint. "
                  "Without --dims, range i binds dimension i of every input whose example size there equals "
                  "the first input's");
  cmd->add_option("--dims", args->dims,
                  "Name an input's dimensions for --dynamic: INPUT:DIM,DIM,... (INPUT: forward parameter "
                  "name or 0-based position; _ for a static dimension; repeatable), e.g. x:batch,seq,_")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--package-name", args->package_name,
                  "Name of the Python package written into the output folder (default fact_<class>)");
  cmd->add_flag("-v,--verbose", args->verbose,
                "Also show the commands, every tuned configuration and third-party output (torch.export, "
                "Inductor autotuning, compilers, warnings); always in <out>/logs/");
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
