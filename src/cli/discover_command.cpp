// `fact discover graph.json [--json out.json] [--precision strict|tf32|native]`: stage 1 on a
// captured graph; prints the ranked match table.
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
#include "fact/realize/spec_from_problem.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/util/atomic_file.hpp"
#include "src/cli/commands.hpp"

namespace fact::cli {

namespace {

struct DiscoverArgs {
  std::string graph_path;
  std::string json_path;
  std::string canonical_path;
  std::string device_profile_path;
  std::string precision = "strict";
  std::string tuning_db_path;  // empty: the default database, when it exists
};

// REUSE needs the tuning database: every stored key, and the database's own key spelling for
// a discovered GEMM (exact shape, not its bucket).
void use_tuning_db(const std::string& path, discover::DiscoverOptions& options) {
  const std::filesystem::path file =
      path.empty() ? realize::default_tuning_db_path() : std::filesystem::path(path);
  if (!std::filesystem::exists(file)) return;
  for (const auto& record : realize::TuningDb(file).all()) options.tuned_keys.insert(record.key.id());
  options.key_of = [](const discover::GemmProblem& problem, const std::string& precision) {
    try {
      const realize::KernelSpec spec = realize::spec_from_problem(problem, precision);
      return realize::make_tuning_key(spec, problem.m, problem.n, problem.k, problem.batch,
                                      precision, build_info::kCutlassVersion)
          .id();
    } catch (const std::exception&) {
      return std::string();  // a problem no template takes has no key
    }
  };
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("'" + path + "' is not valid JSON: " + e.what());
  }
}

void run(const DiscoverArgs& args) {
  const graph::Graph captured = graph::load_graph(args.graph_path);
  discover::DiscoverOptions options;
  options.precision = args.precision;
  use_tuning_db(args.tuning_db_path, options);
  if (!args.device_profile_path.empty())
    options.device = discover::device_profile_from_json(read_json_file(args.device_profile_path));
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
                  "strict (fp32 via 3xTF32), tf32 (opt-in TF32), native (bf16/fp16 models)")
      ->check(CLI::IsMember({"strict", "tf32", "native"}));
  cmd->add_option("--device-profile", args->device_profile_path,
                  "Device profile JSON (fact device --json); H100 SXM defaults otherwise")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tuning-db", args->tuning_db_path,
                  "Tuning database for the REUSE classification (default: the cache's, if any)");
  cmd->add_option("--canonical", args->canonical_path,
                  "Write the canonicalized graph (fact.* nodes) as graph JSON here");
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
