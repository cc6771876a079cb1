// `fact run-kernel`: verify and time one kernel library (or only its kind's baselines) on one
// problem, writing a fact.run/1 JSON report (docs/runtime.md). Exit code: 0 ok, 2 wrong,
// 3 cannot_implement, 4 error, 5 timeout; a crash leaves a "crashed" report.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "src/cli/commands.hpp"
#include "src/cli/vocabulary.hpp"

#ifdef FACT_HAVE_CUDA
#include "fact/runtime/run_kernel.hpp"
#endif

namespace fact::cli {

namespace {

struct RunArgs {
  std::string lib, problem, problem_json, kind, precision = "strict", baselines;
  bool verify_only = false, baseline_only = false;
  std::string dtype = "bf16", out_dtype, epilogue, layout = "tn";
  std::string json_path;
  double timeout_s = 30.0;
  uint64_t seed = 0;
  int device = 0;
  int min_runs = 30, max_runs = 5000, warmup_runs = 5;
  double min_time_s = 0.5;
  bool no_flush = false;
};

#ifdef FACT_HAVE_CUDA
int run(const RunArgs& args) {
  runtime::RunKernelOptions options;
  options.lib = args.lib;
  options.problem = args.problem;
  options.problem_json = args.problem_json;
  options.kind = args.kind;
  options.precision = core::parse_precision(args.precision);
  options.verify_only = args.verify_only;
  options.baseline_only = args.baseline_only;
  options.baselines = runtime::parse_baseline_list(args.baselines);
  // The command line's shorthand for a GEMM problem's further words (the kind reads them:
  // ProblemKind::from_command_line).
  options.problem_words = {{"dtype", args.dtype},
                           {"out_dtype", args.out_dtype},
                           {"epilogue", args.epilogue},
                           {"layout", args.layout}};
  options.json_path = args.json_path;
  options.timeout_s = args.timeout_s;
  options.seed = args.seed;
  options.device = args.device;
  options.timing.min_runs = args.min_runs;
  options.timing.max_runs = args.max_runs;
  options.timing.warmup_runs = args.warmup_runs;
  options.timing.min_time_s = args.min_time_s;
  options.timing.flush_l2 = !args.no_flush;
  return runtime::run_kernel_command(options);
}
#else
int run(const RunArgs& args) {
  const std::string why =
      "fact was built without CUDA (no CUDA toolkit at configure time): run-kernel cannot run";
  if (!args.json_path.empty()) {
    std::ofstream out(args.json_path);
    out << nlohmann::json{{"schema", "fact.run/1"}, {"status", "error"}, {"error", why}}.dump(2)
        << "\n";
  }
  std::cerr << "fact: error: " << why << "\n";
  return 4;
}
#endif

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run-kernel",
      "Verify one kernel library against a float64 reference (fresh random inputs, poisoned "
      "output, adversarial checks), time it, and time its kind's baselines (GEMM: cuBLAS/cuBLASLt)");
  cmd->add_option("lib,--lib", args->lib, "Kernel library (.so) exporting the FACT C ABI");
  auto* problem = cmd->add_option("--problem", args->problem,
                                  "The problem in its kind's words (a GEMM: m=..,n=..,k=..[,batch=..])");
  auto* problem_json = cmd->add_option("--problem-json", args->problem_json,
                                       "The problem as JSON (what the tuner writes)");
  problem->excludes(problem_json);
  cmd->add_option("--kind", args->kind, "Problem kind of a --baseline-only run (default: the one that reads --problem)");
  cmd->add_option("--precision", args->precision, "strict | tf32 | native")
      ->check(CLI::IsMember(precision_words()));
  cmd->add_flag("--verify-only", args->verify_only, "Verify, do not time");
  cmd->add_option("--baselines", args->baselines,
                  "Comma list of the kind's baselines (GEMM: cublas,cublaslt); with --baseline-only "
                  "default all of them");
  cmd->add_flag("--baseline-only", args->baseline_only,
                "No kernel: verify and time the baselines on --dtype/--epilogue/--layout");
  cmd->add_option("--dtype", args->dtype, "Baseline-only operand dtype (fp32, bf16, fp16)");
  cmd->add_option("--out-dtype", args->out_dtype, "Baseline-only output dtype (default: --dtype)");
  cmd->add_option("--epilogue", args->epilogue,
                  "Baseline-only epilogue, e.g. bias,gelu_tanh (default: none)");
  cmd->add_option("--layout", args->layout, "Baseline-only A/B layouts: tn, nn, tt, nt");
  cmd->add_option("--json", args->json_path, "Write the fact.run/1 report here");
  cmd->add_option("--timeout-s", args->timeout_s, "Give up (status error, exit 5) after this");
  cmd->add_option("--seed", args->seed, "Base seed of the random inputs (default: fresh)");
  cmd->add_option("--device", args->device, "CUDA device index");
  cmd->add_option("--min-runs", args->min_runs, "Timed runs at least");
  cmd->add_option("--max-runs", args->max_runs, "Timed runs at most");
  cmd->add_option("--min-time-s", args->min_time_s, "Measured time at least");
  cmd->add_option("--warmup-runs", args->warmup_runs, "Untimed runs first");
  cmd->add_flag("--no-l2-flush", args->no_flush, "Do not flush L2 between timed runs");
  cmd->callback([args] { exit_unless_ok(run(*args)); });
}

}  // namespace fact::cli
