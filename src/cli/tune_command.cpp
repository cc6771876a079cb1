// `fact tune`: auto-tune kernels for one problem given on the command line (read by whichever
// problem kind accepts it: m=..,n=..,k=.. is a GEMM), or for every call of every accepted match
// that discovery finds in a graph JSON. Each problem: stored choice (tuning
// database) or sweep (build all through the driver, run each in a child `fact run-kernel`,
// exclude failures with their reason, keep the fastest verified), then a report per problem.
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fact/discover/discover.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/candidate_runner.hpp"
#include "fact/engine/engine.hpp"
#include "fact/realize/realizer_source.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/realize/tuner.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/util/atomic_file.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/vocabulary.hpp"

namespace fact::cli {
namespace {
namespace fs = std::filesystem;

struct TuneArgs {
  std::string graph_path;
  std::string problem;
  std::string dtype = "bf16";
  std::string precision;  // empty: from the dtype (command line) or the graph
  std::string epilogue;
  std::string layout = "tn";
  std::string space = "default";
  size_t max_candidates = 0;
  int jobs = 0;
  std::string out_dir = "out/tune";
  std::string baselines = "cublas,cublaslt";
  double timeout_s = 120;
  bool force = false, retry_failed = false, reuse_bucket = false, remeasure = false, no_progress = false;
};

struct NamedProblem {
  std::string label;
  Problem problem;
  core::PrecisionMode precision = core::PrecisionMode::Strict;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (!item.empty() && item != "none") items.push_back(item);
  }
  return items;
}

std::vector<NamedProblem> problems_from_graph(const TuneArgs& args) {
  graph::Graph g = graph::load_graph(args.graph_path);
  engine::DiscoverSettings settings;
  settings.precision = precision_option(args.precision);
  const discover::DiscoverOptions options = engine::discover_options(settings, g);
  discover::Discovery found = discover::discover(g, options);
  std::vector<NamedProblem> problems;
  for (size_t i = 0; i < found.matches.size(); ++i) {
    const discover::Match& match = found.matches[i];
    if (match.status != discover::MatchStatus::Accepted) {
      std::cout << "skip match " << i + 1 << " " << match.rule << " (" << discover::match_status_name(match.status)
                << (match.reason.empty() ? "" : ": " + match.reason) << ")\n";
      continue;
    }
    for (size_t j = 0; j < match.problems.size(); ++j) {
      NamedProblem named;
      named.label = "match " + std::to_string(i + 1) +
                    (match.problems.size() > 1 ? std::string(1, static_cast<char>('a' + j)) : "") + " " +
                    match.rule + " " + problem_summary(match.problems[j]);
      named.problem = match.problems[j];
      named.precision = options.precision;
      problems.push_back(std::move(named));
    }
  }
  return problems;
}

// The command-line problem, read by the kind that accepts its words.
NamedProblem problem_from_words(const TuneArgs& args) {
  const std::map<std::string, std::string> words = {{"problem", args.problem}, {"dtype", args.dtype},
                                                    {"epilogue", args.epilogue}, {"layout", args.layout}};
  const KindRegistry& kinds = KindRegistry::global();
  for (const auto& name : kinds.names()) {
    if (auto desc = kinds.get(name).from_command_line(words)) {
      NamedProblem named;
      named.problem = Problem{name, *desc};
      const graph::DType dtype = kinds.get(name).dtype(*desc);
      named.precision = precision_option(args.precision).value_or(core::default_precision(dtype));
      named.label = problem_summary(named.problem);
      return named;
    }
  }
  throw std::invalid_argument("--problem '" + args.problem + "' is not a problem any kind reads (a GEMM: m=..,n=..,k=..[,batch=..])");
}

std::string format_ms(const std::optional<double>& ms) {
  if (!ms) return "-";
  std::ostringstream text;
  text << std::fixed << std::setprecision(4) << *ms << " ms";
  return text.str();
}

void print_summary(const realize::TuneResult& result, const realize::TuneReportFiles& files) {
  std::cout << realize::format_tune_table(result);
  if (result.best) {
    std::cout << "best: " << result.best->config << "  "
              << format_ms(result.best->ms ? std::optional<double>(result.best->ms->median) : std::nullopt);
    if (result.best->tflops) std::cout << "  " << std::fixed << std::setprecision(1) << *result.best->tflops << " TFLOP/s";
    std::cout << "  (" << result.origin << ")\n";
    for (const auto& b : result.baselines) {
      std::cout << "  " << b.name << ": " << b.status << " " << format_ms(b.ms);
      if (b.ms && result.best->ms) {
        std::cout << "  speedup " << std::fixed << std::setprecision(2) << *b.ms / result.best->ms->median << "x";
      }
      std::cout << "\n";
    }
  } else {
    std::cout << "no configuration verified\n";
  }
  for (const auto& note : result.notes) std::cout << "note: " << note << "\n";
  std::cout << "report: " << files.markdown.string() << "\ndata: " << files.json.string() << ", "
            << files.csv.string() << "\n";
  std::cout << "plot: " << (files.plot_command.empty() ? files.plot_note : files.plot_command) << "\n";
  std::cout << std::defaultfloat << "time: " << std::setprecision(3) << result.seconds << " s\n";
}

int run_tune(const TuneArgs& args) {
  std::vector<NamedProblem> problems;
  if (!args.graph_path.empty()) {
    if (!args.problem.empty()) throw std::invalid_argument("give either a graph JSON or --problem, not both");
    problems = problems_from_graph(args);
    if (problems.empty()) {
      std::cout << "no accepted GEMM match in " << args.graph_path << ": nothing to tune\n";
      return 0;
    }
  } else {
    if (args.problem.empty()) throw std::invalid_argument("give a graph JSON or --problem m=..,n=..,k=..");
    problems.push_back(problem_from_words(args));
  }
  // Before compiling anything: tuning runs every candidate on the GPU.
  if (auto no_gpu = engine::gpu_unavailable_reason()) {
    std::cerr << "fact tune: cannot tune here: " << *no_gpu << "\n";
    return 2;
  }

  realize::RealizerSource source;
  realize::KernelCache cache;
  realize::BuildOptions build_options;
  build_options.jobs = args.jobs;
  build_options.retry_failed = args.retry_failed;
  build_options.show_progress = !args.no_progress;
  realize::BuildDriver builder(cache, build_options);
  realize::SubprocessRunner runner(engine::engine_executable());
  realize::TuningDb db;
  realize::Tuner tuner(source, builder, runner, db);
  fs::path out_dir = args.out_dir;

  nlohmann::json summary = nlohmann::json::array();
  int untuned = 0;
  auto request_of = [&](const NamedProblem& named) {
    realize::TuneRequest request;
    request.problem = named.problem;
    request.precision = named.precision;
    request.space = args.space;
    request.max_candidates = args.max_candidates;
    request.force = args.force;
    request.reuse_bucket = args.reuse_bucket;
    request.remeasure = args.remeasure;
    request.baselines = split_list(args.baselines);
    request.run_timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
    request.show_progress = !args.no_progress;
    return request;
  };
  if (problems.size() > 1) {  // every problem's candidates in one parallel build first
    std::vector<realize::TuneRequest> requests;
    for (const NamedProblem& named : problems) requests.push_back(request_of(named));
    tuner.prebuild(requests);
  }
  for (const NamedProblem& named : problems) {
    std::cout << "== tune " << named.label << " (precision " << core::precision_name(named.precision) << ")\n" << std::flush;
    const realize::TuneRequest request = request_of(named);
    try {
      realize::TuneResult result = tuner.tune(request);
      realize::TuneReportFiles files = realize::write_tune_report(result, out_dir);
      print_summary(result, files);
      if (!result.ok()) ++untuned;
      nlohmann::json entry = result.to_json();
      entry["label"] = named.label;
      entry["report"] = files.markdown.string();
      summary.push_back(entry);
    } catch (const std::exception& e) {
      ++untuned;
      std::cout << "not tuned: " << e.what() << "\n";
      summary.push_back({{"label", named.label}, {"error", e.what()}});
    }
    std::cout << "\n";
  }
  fs::create_directories(out_dir);
  util::write_file_atomically(out_dir / "tune-summary.json", summary.dump(2) + "\n");
  std::cout << "tuning database: " << db.file().string() << "\nkernel cache: " << cache.root().string() << "\n";
  if (untuned > 0) {
    std::cout << untuned << " of " << problems.size() << " problem(s) without a verified kernel\n";
    return 1;
  }
  return 0;
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Auto-tune kernels: build the pruned parameter space in parallel, verify and time each "
      "configuration in a child process, store the fastest verified one (reused on the next run)");
  cmd->add_option("graph", args->graph_path, "Graph JSON: tune every accepted match discovery finds");
  cmd->add_option("--problem", args->problem, "m=..,n=..,k=..[,batch=..]");
  cmd->add_option("--dtype", args->dtype, "Operand dtype: bf16 (or bfloat16), fp16 (float16), fp32 (float32); default bf16");
  cmd->add_option("--precision", args->precision,
                  "strict | tf32 | native (default: strict for fp32, native for bf16/fp16)")
      ->check(CLI::IsMember(precision_words()));
  cmd->add_option("--epilogue", args->epilogue, "Comma list: bias, residual, mul, scale, add, relu, gelu_tanh, ...");
  cmd->add_option("--layout", args->layout, "A and B layouts: t = row-major, n = column-major (default tn)");
  cmd->add_option("--space", args->space, "default | exhaustive")->check(CLI::IsMember({"default", "exhaustive"}));
  cmd->add_option("--max-candidates", args->max_candidates, "Try only the first N configurations of the space");
  cmd->add_option("-j,--jobs", args->jobs, "Parallel compiles (default: all cores)");
  cmd->add_option("-o,--out", args->out_dir, "Report folder (default out/tune)");
  cmd->add_option("--baselines", args->baselines, "Timed with the winner: cublas,cublaslt (or none)");
  cmd->add_option("--timeout", args->timeout_s, "Seconds per candidate run before it counts as hung (default 120)");
  cmd->add_flag("--force", args->force, "Sweep again even when a choice is stored");
  cmd->add_flag("--retry-failed", args->retry_failed, "Rebuild configurations recorded as failed builds");
  cmd->add_flag("--reuse-bucket", args->reuse_bucket,
                "For an unseen shape, first try the choice of the nearest tuned shape (power-of-two bucket)");
  cmd->add_flag("--remeasure", args->remeasure, "Time a stored choice again");
  cmd->add_flag("--no-progress", args->no_progress, "No progress bars");
  cmd->callback([args] { exit_unless_ok(run_tune(*args)); });
}

}  // namespace fact::cli
