// `fact bench <suite>`: a suite a pattern folder registered (realize/bench_suite.hpp) against
// its library baselines. Every case is tuned (or its stored choice reused), then
// the winner and the baselines are timed in one `fact run-kernel` process on the same inputs.
// Writes <out>/<suite>-<device>-<date>.json (docs/architecture.md; "-quick" / "-max<N>" before
// ".json" for cut sweeps), a speedup plot beside it, and the per-case tuning reports in
// <out>/<suite>-<device>-<date>-tune/.
//
// One suite is not a pattern folder's: `fact bench conformance` is the model-level benchmark of
// the conformance corpus (corpus/), run by `python -m fact.conformance --gpu` (run_conformance).
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <algorithm>

#include "fact/build_info.hpp"
#include "fact/realize/bench_results.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/candidate_runner.hpp"
#include "fact/engine/engine.hpp"
#include "fact/realize/bench_suite.hpp"
#include "fact/realize/realizer_source.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/realize/tuner.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/subprocess.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/python_module.hpp"

namespace fact::cli {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

struct BenchArgs {
  std::string suite;
  std::string out_dir = "bench/results";
  bool quick = false;
  size_t max_candidates = 0;  // 0: the whole pruned space (--quick: 4)
  int jobs = 0;
  double timeout_s = 120;
  bool force = false, retry_failed = false;
  std::string tuning_cost_case;  // empty: the suite's own; "none": skip
};

using SuiteCase = realize::BenchSuiteCase;

// The case's command-line words as CLI options: --problem .. --dtype .. (empty ones left out).
std::vector<std::string> word_options(const SuiteCase& c) {
  std::vector<std::string> argv;
  for (const auto& [word, value] : c.words) {
    if (value.empty()) continue;
    argv.push_back("--" + word);
    argv.push_back(value);
  }
  return argv;
}

// `fact run-kernel --baseline-only`: the library baselines alone, for cases without a kernel and
// for the preflight that names the device.
realize::RunResult run_baselines_only(const SuiteCase& c, const fs::path& scratch, double timeout_s) {
  fs::create_directories(scratch);
  std::string joined;
  for (const auto& b : c.baselines) joined += (joined.empty() ? "" : ",") + b;
  std::vector<std::string> argv = {engine::engine_executable().string(), "run-kernel", "--baseline-only",
                                   "--kind", c.problem.kind, "--precision", c.precision, "--baselines",
                                   joined, "--timeout-s", std::to_string(static_cast<int>(timeout_s)),
                                   "--json", (scratch / "report.json").string()};
  const std::vector<std::string> words = word_options(c);
  argv.insert(argv.end(), words.begin(), words.end());
  util::ProcessOptions options;
  options.output_file = scratch / "output.log";
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>((timeout_s + 15) * 1000));
  util::ProcessResult finished = util::run_process(argv, options);
  std::optional<json> report;
  try {
    report = json::parse(util::read_file(scratch / "report.json"));
  } catch (const std::exception&) {
  }
  return realize::interpret_run(finished.exit_code, finished.term_signal, finished.timed_out, timeout_s, report,
                                util::tail_of_file(scratch / "output.log", 20));
}

std::string first_line(const std::optional<std::string>& text) {
  if (!text) return "";
  return text->substr(0, text->find('\n'));
}

realize::BenchVersions collect_versions(const json& device) {
  realize::BenchVersions versions;
  versions.driver = first_line(util::capture_output(
      {"nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"}, std::chrono::seconds(20)));
  if (versions.driver.empty()) versions.driver = device.value("driver", std::string("unknown"));
  versions.cuda = device.value("cuda_runtime", std::string());
  if (versions.cuda.empty()) versions.cuda = "unknown";
  versions.torch = "n/a";
  versions.cutlass = build_info::kCutlassVersion;
  // $FACT_GIT_SHA (for copies of the tree without .git), else the checkout's own description.
  if (const char* given = std::getenv("FACT_GIT_SHA"); given && *given) versions.fact = given;
  if (versions.fact.empty()) {
    versions.fact = first_line(util::capture_output(
        {"git", "-C", build_info::kSourceDir, "describe", "--always", "--dirty", "--abbrev=12"}));
  }
  if (versions.fact.empty()) versions.fact = std::string("unknown (") + build_info::kVersion + ")";
  return versions;
}

// Why a tuned case has no verified kernel, in one line.
std::string failure_summary(const realize::TuneResult& result) {
  std::map<std::string, int> by_status;
  std::string example;
  for (const auto& c : result.candidates) {
    by_status[std::string(realize::candidate_status_name(c.status))]++;
    if (example.empty() && !c.reason.empty()) example = c.config + ": " + c.reason;
  }
  std::ostringstream text;
  if (result.candidates.empty()) {
    text << "no candidate configuration";
  } else {
    text << "no configuration verified (";
    bool first = true;
    for (const auto& [status, count] : by_status) {
      text << (first ? "" : ", ") << count << " " << status;
      first = false;
    }
    text << ")";
  }
  for (const auto& note : result.notes) text << "; " << note;
  if (!example.empty()) text << "; e.g. " << example;
  std::string line = text.str();
  if (line.size() > 600) line = line.substr(0, 600) + "...";
  return line;
}

void fill_baselines(realize::BenchCase& out, const std::vector<realize::BaselineMeasurement>& baselines) {
  for (const auto& b : baselines) {
    realize::BenchBaseline entry;
    if (b.status == "ok") entry.ms = b.ms;
    entry.rel_err = b.rel_err;
    out.baselines[b.name] = entry;
  }
}

// Cold and warm `fact tune` of one suite case in child processes that share a fresh cache root
// (kernel cache + tuning database), so the cold run compiles every candidate.
realize::BenchTuningCost measure_tuning_cost(const SuiteCase& c, size_t max_candidates, const BenchArgs& args,
                                             const fs::path& scratch) {
  realize::BenchTuningCost cost;
  cost.case_name = c.name;
  cost.candidates = max_candidates;
  cost.compile_jobs = args.jobs > 0 ? args.jobs : static_cast<int>(std::thread::hardware_concurrency());
  std::vector<std::string> argv = {engine::engine_executable().string(), "tune", "--precision", c.precision,
                                   "--baselines", "none", "--no-progress", "--timeout",
                                   std::to_string(static_cast<int>(args.timeout_s)), "-o",
                                   (scratch / "tuning-cost-report").string()};
  const std::vector<std::string> words = word_options(c);
  argv.insert(argv.end(), words.begin(), words.end());
  if (max_candidates > 0) {
    argv.push_back("--max-candidates");
    argv.push_back(std::to_string(max_candidates));
  }
  if (args.jobs > 0) {
    argv.push_back("-j");
    argv.push_back(std::to_string(args.jobs));
  }
  std::vector<std::string> shown(argv.begin() + 1, argv.end());
  cost.command = "fact " + util::shell_join(shown);
  util::ProcessOptions options;
  options.extra_environment = {{"FACT_CACHE_DIR", (scratch / "tuning-cost-cache").string()}};
  for (int round = 0; round < 2; ++round) {
    const bool cold = round == 0;
    options.output_file = scratch / (cold ? "tuning-cost-cold.log" : "tuning-cost-warm.log");
    std::cout << "\n== tuning cost of " << c.name << ": " << (cold ? "cold" : "warm") << " `fact tune` ("
              << (max_candidates > 0 ? std::to_string(max_candidates) : std::string("all")) << " configurations)\n"
              << std::flush;
    util::ProcessResult finished = util::run_process(argv, options);
    std::string& status = cold ? cost.cold_status : cost.warm_status;
    if (finished.succeeded()) {
      (cold ? cost.cold_s : cost.warm_s) = finished.seconds;
      status = "ok";
    } else {
      status = finished.describe() + ": " + util::tail_of_file(options.output_file, 5);
    }
    std::cout << (cold ? "cold" : "warm") << ": " << status << " in " << std::fixed << std::setprecision(2)
              << finished.seconds << " s" << std::defaultfloat << "\n";
    if (!finished.succeeded()) break;
  }
  return cost;
}

int run_bench(const BenchArgs& args) {
  const realize::BenchSuite suite = realize::bench_suite(args.suite);
  const std::vector<SuiteCase>& cases = suite.cases;
  fs::path out_dir = args.out_dir;
  fs::path scratch = fs::temp_directory_path() / ("fact-bench-" + util::unique_suffix());

  // Preflight: a small baseline-only run names the device and proves there is one.
  realize::RunResult preflight = run_baselines_only(suite.preflight, scratch / "preflight", 60);
  // A baseline-only report has no kernel timing: its top-level status alone says whether it ran.
  bool preflight_ran = preflight.report.is_object() && preflight.report.value("status", "") == "ok";
  if (!preflight_ran || !preflight.device.contains("name")) {
    throw std::runtime_error("fact bench needs a CUDA device: the preflight run failed (" +
                             std::string(realize::candidate_status_name(preflight.status)) + ": " + preflight.reason + ")");
  }
  realize::BenchResults results;
  results.suite = suite.name;
  results.date = util::utc_date();
  results.device = preflight.device.value("name", std::string("unknown"));
  results.versions = collect_versions(preflight.device);
  // A cut sweep never takes the full suite's file name.
  const size_t max_candidates = args.max_candidates > 0 ? args.max_candidates : (args.quick ? 4 : 0);
  if (max_candidates > 0) {
    results.variant = args.quick && args.max_candidates == 0 ? "quick" : "max" + std::to_string(max_candidates);
  }
  std::string stem = results.file_name().substr(0, results.file_name().size() - 5);
  fs::path tune_dir = out_dir / (stem + "-tune");
  std::cout << "bench " << suite.name << " on " << results.device << " (driver " << results.versions.driver << ", CUDA "
            << results.versions.cuda << ", CUTLASS " << results.versions.cutlass << ", fact "
            << results.versions.fact << ")" << (max_candidates > 0 ? ", " + std::to_string(max_candidates) + " configurations per case" : "") << "\n";

  realize::RealizerSource source;
  realize::KernelCache cache;
  realize::BuildOptions build_options;
  build_options.jobs = args.jobs;
  build_options.retry_failed = args.retry_failed;
  realize::BuildDriver builder(cache, build_options);
  realize::SubprocessRunner runner(engine::engine_executable());
  realize::TuningDb db;
  realize::Tuner tuner(source, builder, runner, db);
  auto request_of = [&](const SuiteCase& c) {
    realize::TuneRequest request;
    request.problem = c.problem;
    request.precision = core::parse_precision(c.precision);
    request.max_candidates = max_candidates;
    request.force = args.force;
    request.baselines = c.baselines;
    request.run_timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
    return request;
  };
  // Every case's candidates compiled in one parallel build first (Tuner::prebuild), so that the
  // per-case tuning below finds them in the kernel cache.
  {
    std::vector<realize::TuneRequest> requests;
    for (const SuiteCase& c : cases) {
      try {
        requests.push_back(request_of(c));
      } catch (const std::exception&) {
        // an unknown precision: the case's own tuning below reports it
      }
    }
    std::cout << "compiling the candidates of all " << cases.size() << " cases first\n" << std::flush;
    tuner.prebuild(requests);
  }

  for (const SuiteCase& c : cases) {
    std::cout << "\n== " << c.name << " (" << c.precision << ")\n" << std::flush;
    realize::BenchCase out;
    out.name = c.name;
    out.precision = c.precision;
    try {
      realize::TuneResult result = tuner.tune(request_of(c));
      realize::TuneReportFiles files = realize::write_tune_report(result, tune_dir);
      if (result.ok()) {
        out.fact_ms = result.best->ms ? std::optional<double>(result.best->ms->median) : std::nullopt;
        out.rel_err = result.best->rel_err;
        out.config = result.best->config;
        fill_baselines(out, result.baselines);
      } else {
        out.status = "no_kernel";
        out.reason = failure_summary(result);
      }
      std::cout << realize::format_tune_table(result) << "report: " << files.markdown.string() << "\n";
    } catch (const std::exception& e) {
      out.status = "no_kernel";
      out.reason = e.what();
    }
    if (out.baselines.empty()) {
      realize::RunResult baselines = run_baselines_only(c, scratch / c.name, args.timeout_s);
      fill_baselines(out, baselines.baselines);
      if (baselines.baselines.empty()) {
        out.reason += (out.reason.empty() ? "" : "; ") + std::string("baselines did not run: ") + baselines.reason;
      }
    }
    std::cout << c.name << ": " << out.status;
    if (out.fact_ms) std::cout << "  fact " << std::fixed << std::setprecision(4) << *out.fact_ms << " ms";
    for (const auto& [name, b] : out.baselines) {
      if (b.ms) std::cout << "  " << name << " " << std::fixed << std::setprecision(4) << *b.ms << " ms";
      if (b.ms && out.fact_ms) std::cout << " (" << std::setprecision(2) << *b.ms / *out.fact_ms << "x)";
    }
    if (!out.reason.empty()) std::cout << "\n  reason: " << out.reason;
    std::cout << std::defaultfloat << "\n";
    results.cases.push_back(std::move(out));
    // Written after every case, so an interrupted suite still leaves its results.
    util::write_file_atomically(out_dir / results.file_name(), results.to_json().dump(2) + "\n");
  }

  const std::string cost_case = args.tuning_cost_case.empty() ? suite.tuning_cost_case : args.tuning_cost_case;
  if (cost_case != "none" && !cost_case.empty()) {
    auto it = std::find_if(cases.begin(), cases.end(), [&](const SuiteCase& c) { return c.name == cost_case; });
    if (it == cases.end()) throw std::invalid_argument("--tuning-cost: no suite case named '" + cost_case + "'");
    results.tuning_cost = measure_tuning_cost(*it, max_candidates, args, scratch);
    util::write_file_atomically(out_dir / results.file_name(), results.to_json().dump(2) + "\n");
  }

  fs::path json_path = out_dir / results.file_name();
  std::cout << "\nresults: " << json_path.string() << "\nplot: python -m fact.plots " << json_path.string()
            << " (draws " << (out_dir / (stem + ".png")).string() << ")\n";
  std::error_code ignored;
  fs::remove_all(scratch, ignored);
  return 0;
}

// The model-level suite: whole corpus models through fact.optimize against eager and
// torch.compile, in Python (python/fact/conformance/, driver.py writes the results file, its plot
// and its table). -o, --quick and --max-candidates map onto its options; anything the bench command
// does not know is passed on (e.g. --models a,b --time-budget 480; see
// `python -m fact.conformance --help`).
constexpr const char* kConformanceSuite = "conformance";

int run_conformance(const BenchArgs& args, const std::vector<std::string>& extras) {
  std::vector<std::string> module_args = {"--gpu", "--out-dir", args.out_dir};
  if (args.max_candidates > 0) {
    module_args.push_back("--tune");
    module_args.push_back(std::to_string(args.max_candidates));
  }
  if (args.quick) module_args.push_back("--quick");
  module_args.insert(module_args.end(), extras.begin(), extras.end());
  const util::ProcessResult result = run_python_module("conformance", "fact.conformance", module_args);
  if (!result.succeeded()) std::cerr << "fact bench conformance: " << result.describe() << "\n";
  return result.succeeded() ? 0 : (result.exit_code > 0 ? result.exit_code : 1);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Benchmark suites against the vendor libraries");
  std::string suites;
  for (const auto& name : realize::bench_suite_names()) {
    suites += "\n  " + name + ": " + realize::bench_suite(name).description;
  }
  suites += std::string("\n  ") + kConformanceSuite +
            ": the conformance corpus (corpus/) end to end: fact.optimize against eager and "
            "torch.compile, verified against float64 (python -m fact.conformance --gpu; options "
            "this command does not know are passed to it)";
  cmd->add_option("suite", args->suite, "Suite to run:" + suites)->required();
  cmd->allow_extras();
  cmd->add_option("-o,--out", args->out_dir, "Results folder (default bench/results)");
  cmd->add_flag("--quick", args->quick,
                "Tune over 4 configurations per case (spread over kernel families); results go to "
                "<suite>-<device>-<date>-quick.json");
  cmd->add_option("--max-candidates", args->max_candidates,
                  "Tune over at most N configurations of each space, spread over kernel families "
                  "(results go to <suite>-<device>-<date>-max<N>.json)");
  cmd->add_option("-j,--jobs", args->jobs, "Parallel compiles (default: all cores)");
  cmd->add_option("--timeout", args->timeout_s, "Seconds per kernel run before it counts as hung (default 120)");
  cmd->add_flag("--force", args->force, "Sweep again even where a choice is stored");
  cmd->add_option("--tuning-cost", args->tuning_cost_case,
                  "After the suite, time a cold and a warm `fact tune` of this case in a fresh cache "
                  "(default: the suite's own; none: skip)");
  cmd->add_flag("--retry-failed", args->retry_failed, "Rebuild configurations recorded as failed builds");
  cmd->callback([args, cmd] {
    const std::vector<std::string> extras = cmd->remaining();
    if (args->suite == kConformanceSuite) {
      exit_unless_ok(run_conformance(*args, extras));
      return;
    }
    if (!extras.empty()) throw CLI::ExtrasError(extras);
    exit_unless_ok(run_bench(*args));
  });
}

}  // namespace fact::cli
