// `fact plan graph.json -o dir`: the engine's whole pipeline on a captured graph (discover,
// optionally tune, realize, write plan.json) through the in-process API — what
// fact.compose.plan and `fact optimize` run.
#include <iostream>
#include <memory>
#include <string>

#include <unistd.h>

#include "fact/discover/report.hpp"
#include "fact/engine/engine.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/vocabulary.hpp"

namespace fact::cli {
namespace {

struct PlanArgs {
  engine::PlanRequest request;
  std::string graph, out_dir, tuning_db, device_profile;
  std::string precision;  // empty: from the graph's dtypes
  std::vector<std::string> patterns;
  bool no_tuning_db = false;
};

void run(PlanArgs& args) {
  engine::PlanRequest& r = args.request;
  r.graph = args.graph;
  r.out_dir = args.out_dir.empty() ? std::filesystem::absolute(args.graph).parent_path() : std::filesystem::path(args.out_dir);
  r.precision = precision_option(args.precision);
  r.use_tuning_db = !args.no_tuning_db;
  if (!args.tuning_db.empty()) r.tuning_db = args.tuning_db;
  if (!args.device_profile.empty()) r.device_profile = args.device_profile;
  if (!args.patterns.empty()) r.patterns = args.patterns;
  r.progress = isatty(STDERR_FILENO) != 0;
  const engine::PlanResult result = engine::make_plan(r);
  std::cout << discover::discovery_table(result.discovery, result.captured, result.options);
  size_t planned = 0;
  for (const auto& rep : result.plan.at("replacements")) {
    const std::string status = rep.value("status", "");
    planned += status == "planned";
    if (status == "failed") {
      std::cout << "not planned #" << rep.value("label", "") << " " << rep.value("rule", "") << ": "
                << rep.value("reason", "") << "\n";
    }
  }
  std::cout << "\nplan: " << planned << " of " << result.plan.at("replacements").size()
            << " replacement(s) planned -> " << result.plan_path.string() << "\n";
  for (const auto& s : result.skipped) std::cout << "skipped: " << s << "\n";
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Discover, (tune,) realize and write the composition plan (plan.json) of a captured graph");
  cmd->add_option("graph", args->graph, "Graph JSON written by the capture")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", args->out_dir, "Output folder (default: the graph's folder)");
  cmd->add_option("--precision", args->precision,
                  "strict | tf32 | native (default: native for a bf16/fp16 graph, strict otherwise)")
      ->check(CLI::IsMember(precision_words()));
  cmd->add_flag("--compile", args->request.compile, "Compile the kernels (nvcc, sm_90a)");
  cmd->add_option("--tune", args->request.tune,
                  "Tune each kernel over at most N configurations first (Hopper GPU)");
  cmd->add_option("--space", args->request.space, "Tuning space: default or exhaustive")
      ->check(CLI::IsMember({"default", "exhaustive"}));
  cmd->add_option("--patterns", args->patterns, "Only these rules or pattern folders")->delimiter(',');
  cmd->add_option("--tuning-db", args->tuning_db, "Tuning database (default: the cache's)");
  cmd->add_flag("--no-tuning-db", args->no_tuning_db, "Default configurations only");
  cmd->add_option("--device-profile", args->device_profile, "Device profile JSON (default: the saved one)");
  cmd->add_option("--device", args->request.device, "Device of the example inputs: cuda | cpu")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  cmd->add_option("-j,--jobs", args->request.jobs, "Parallel compiles (0: all cores)");
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
