// `fact realize graph.json`: discover, then write one CUTLASS source per kernel call of every
// accepted match and a manifest (default folder: kernels/ beside the graph); with --compile also build them (build driver and kernel cache, or --serial
// nvcc into the output folder). Each call takes the configuration stored for its key in the
// tuning database (`fact tune` writes it; --tuning-db, --no-tuning-db, --reuse-bucket), else
// the default configuration; the manifest says which. Exit code 1 when a compile failed.
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include <unistd.h>

#include "fact/discover/discover.hpp"
#include "fact/engine/engine.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/realize/realize_matches.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/util/table.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/vocabulary.hpp"

namespace fact::cli {
namespace {

struct RealizeArgs {
  std::string graph;
  std::string out_dir;    // empty: kernels/ beside the graph
  std::string precision;  // empty: from the graph's dtypes
  bool emit_only = false;
  bool compile = false;
  bool serial = false;
  int jobs = 0;
  std::string cache_dir;
  std::string tuning_db;  // empty: the default database
  bool no_tuning_db = false;
  bool reuse_bucket = false;
};

// The discovery table's label of a call: "3", or "1a"/"1b" for a match of several calls.
std::string call_label(const std::vector<discover::Match>& matches, const realize::RealizedCall& c) {
  std::string label = std::to_string(c.match + 1);
  if (c.match < matches.size() && matches[c.match].problems.size() > 1) label += static_cast<char>('a' + c.call);
  return label;
}

// One row per call (the discovery table's labels), full names: nothing is cut.
void print_summary(const realize::RealizeResult& result, const std::vector<discover::Match>& matches,
                   core::PrecisionMode precision, const std::string& out_dir, size_t accepted_matches) {
  std::cout << "realize: " << accepted_matches << " accepted match(es), " << result.calls.size()
            << " call(s), " << result.kernels.size() << " kernel(s), precision " << core::precision_name(precision)
            << " -> " << out_dir << "/\n\n";
  util::Table table({{"#", util::Table::Align::Right}, {"problem"}, {"kernel"}, {"entry"}, {"status"},
                     {"compile s", util::Table::Align::Right}, {"configuration"}});
  for (const auto& c : result.calls) {
    const std::string problem = c.match < matches.size() && c.call < matches[c.match].problems.size()
                                    ? problem_summary(matches[c.match].problems[c.call]) : "";
    if (!c.error.empty()) {
      table.add_row({call_label(matches, c), problem, "-", "-", "not realized", "", c.error});
      continue;
    }
    const realize::RealizedKernel* k = result.kernel(c.kernel_key);
    std::string source = c.config_source == "default" ? "default" : "tuned (" + c.config_source;
    if (c.config_source != "default") source += ", " + c.tuned.value("shape", std::string()) + ")";
    if (!c.tuning_note.empty()) source += "; " + c.tuning_note;
    table.add_row({call_label(matches, c), problem, k ? k->kernel.spec.name() : c.kernel_key,
                   k ? k->kernel.entry_symbol : "-", k ? k->status : "?",
                   k && k->status != "rendered" ? util::format_fixed(k->compile_seconds, 1) : "",
                   source});
  }
  std::cout << table.render();
  for (const auto& k : result.kernels) {
    if (!k.reason.empty()) std::cout << k.kernel.spec.name() << ": " << k.reason << "\n";
  }
  std::cout << "manifest: " << out_dir << "/manifest.json\n";
}

int run(const RealizeArgs& args) {
  const graph::Graph g = graph::load_graph(args.graph);
  engine::DiscoverSettings settings;
  settings.precision = precision_option(args.precision);
  settings.use_tuning_db = !args.no_tuning_db;
  if (!args.tuning_db.empty()) settings.tuning_db = args.tuning_db;
  const discover::DiscoverOptions discover_options = engine::discover_options(settings, g);
  const discover::Discovery discovery = discover::discover(g, discover_options);
  const std::string out_dir = args.out_dir.empty()
                                  ? (std::filesystem::absolute(args.graph).parent_path() / "kernels").string()
                                  : args.out_dir;
  size_t accepted = 0;
  for (const auto& m : discovery.matches) accepted += m.status == discover::MatchStatus::Accepted;

  realize::RealizeOptions options;
  options.precision = discover_options.precision;
  options.out_dir = out_dir;
  options.compile = args.compile && !args.emit_only;
  options.serial = args.serial;
  options.jobs = args.jobs;
  options.cache_dir = args.cache_dir;
  options.show_progress = isatty(STDERR_FILENO) != 0;
  if (!args.no_tuning_db) {
    options.tuning_db = args.tuning_db.empty() ? realize::default_tuning_db_path()
                                               : std::filesystem::path(args.tuning_db);
  }
  options.tuning_db_bucket = args.reuse_bucket;
  if (options.compile) {
    if (auto why = realize::compile_unavailable_reason(options.compile_options)) {
      std::cerr << "fact realize: cannot compile: " << *why << "\n";
      return 1;
    }
  }
  const realize::RealizeResult result = realize::realize_matches(discovery.matches, options);
  print_summary(result, discovery.matches, discover_options.precision, out_dir, accepted);
  return result.failed_compiles() > 0 ? 1 : 0;
}

}  // namespace

void add_realize_command(CLI::App& app) {
  auto args = std::make_shared<RealizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "realize",
      "Render a CUTLASS sm90a kernel for every call of every accepted match (the tuning "
      "database's choice, else the default configuration) into a folder with manifest.json; "
      "--compile also builds them");
  cmd->add_option("graph", args->graph, "Graph JSON written by the capture")->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", args->out_dir, "Output folder (default: kernels/ beside the graph)");
  cmd->add_option("--precision", args->precision,
                  "strict | tf32 | native (default: native for a bf16/fp16 graph, strict otherwise)")
      ->check(CLI::IsMember(precision_words()));
  cmd->add_flag("--emit-only", args->emit_only, "Write sources and manifest only (the default)");
  cmd->add_flag("--compile,--build", args->compile, "Also compile every kernel (sm_90a)");
  cmd->add_flag("--serial", args->serial,
                "Compile one at a time into the output folder, without the kernel cache");
  cmd->add_option("-j,--jobs", args->jobs, "Parallel compiles through the build driver (0: all cores)");
  cmd->add_option("--cache-dir", args->cache_dir, "Kernel cache (default: ~/.cache/fact/kernels)");
  cmd->add_option("--tuning-db", args->tuning_db,
                  "Tuning database to take stored configurations from (default: "
                  "<fact cache>/tuning_db.json)");
  cmd->add_flag("--no-tuning-db", args->no_tuning_db, "Default configurations only");
  cmd->add_flag("--reuse-bucket", args->reuse_bucket,
                "For a call without a stored choice, use the nearest tuned shape's (power-of-two bucket)");
  cmd->callback([args] { exit_unless_ok(run(*args)); });
}

}  // namespace fact::cli
