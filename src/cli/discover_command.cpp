// `fact discover graph.json [--json out.json] [--precision strict|tf32|native]`: stage 1 on a
// captured graph; prints the ranked match table. Options as the engine's (engine.hpp).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "fact/build_info.hpp"
#include "fact/discover/discover.hpp"
#include "fact/discover/report.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/engine/engine.hpp"
#include "fact/util/atomic_file.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/vocabulary.hpp"

namespace fact::cli {

namespace {

struct DiscoverArgs {
  std::string graph_path;
  std::string json_path;
  std::string canonical_path;
  std::string device_profile_path;
  std::string precision;       // empty: from the graph's dtypes
  std::string tuning_db_path;  // empty: the default database
  bool no_tuning_db = false;
  std::string arch = "sm_90a";  // classify against the registry for this arch
  std::string registry_dir;     // empty: the default registry
  bool no_registry = false;
};

void run(const DiscoverArgs& args) {
  const graph::Graph captured = graph::load_graph(args.graph_path);
  engine::DiscoverSettings settings;
  settings.precision = precision_option(args.precision);
  if (!args.device_profile_path.empty()) settings.device_profile = args.device_profile_path;
  settings.use_tuning_db = !args.no_tuning_db;
  if (!args.tuning_db_path.empty()) settings.tuning_db = args.tuning_db_path;
  settings.arch = args.arch;
  settings.use_registry = !args.no_registry;
  if (!args.registry_dir.empty()) settings.registry_dir = args.registry_dir;
  const discover::DiscoverOptions options = engine::discover_options(settings, captured);
  const discover::Discovery discovery = discover::discover(captured, options);
  std::cout << discover::discovery_table(discovery, captured, options);
  if (!args.json_path.empty()) {
    nlohmann::json doc = discover::discovery_to_json(discovery, captured, options);
    doc["graph"] = args.graph_path;
    util::write_file_atomically(args.json_path, doc.dump(2) + "\n");
    std::cout << "wrote " << args.json_path << "\n";
  }
  if (!args.canonical_path.empty()) {
    util::write_file_atomically(args.canonical_path,
                                graph::graph_to_json(discovery.canonical).dump(1) + "\n");
    std::cout << "wrote " << args.canonical_path << "\n";
  }
}

}  // namespace

void add_discover_command(CLI::App& app) {
  auto args = std::make_shared<DiscoverArgs>();
  CLI::App* cmd = app.add_subcommand(
      "discover", "Find the subgraphs of a captured graph worth replacing, ranked by time saved");
  cmd->add_option("graph", args->graph_path, "Graph JSON written by the capture")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--json", args->json_path, "Also write the matches as JSON here");
  cmd->add_option("--precision", args->precision,
                  "strict (fp32 via 3xTF32), tf32 (opt-in TF32), native (bf16/fp16 models); "
                  "default: native for a bf16/fp16 graph, strict otherwise")
      ->check(CLI::IsMember(precision_words()));
  cmd->add_option("--device-profile", args->device_profile_path,
                  "Device profile JSON (default: the one `fact device` saved, else an H100's "
                  "datasheet numbers)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tuning-db", args->tuning_db_path,
                  "Tuning database for the REUSE classification (default: the cache's, if any)");
  cmd->add_flag("--no-tuning-db", args->no_tuning_db, "Classify without the tuning database");
  cmd->add_option("--arch", args->arch, "Classify against the pattern registry for sm_90a (Hopper) or host (the CPU path)")
      ->check(CLI::IsMember({"sm_90a", "host"}));
  cmd->add_option("--registry-dir", args->registry_dir, "Pattern registry folder (default: <cache>/registry)");
  cmd->add_flag("--no-registry", args->no_registry, "Classify against the tuning database alone");
  cmd->add_option("--canonical", args->canonical_path,
                  "Write the canonicalized graph (fact.* nodes) as graph JSON here");
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
