// `fact`: the command-line front of the FACT engine.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "fact/build_info.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/unknown_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"FACT: find the subgraphs of a PyTorch model worth replacing, realize them as "
               "verified, tuned CUTLASS kernels, and compose them back"};
  app.set_version_flag("--version", std::string("fact ") + fact::build_info::kVersion);
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows every default (subcommands inherit)
  fact::cli::add_discover_command(app);
  fact::cli::add_realize_command(app);
  fact::cli::add_plan_command(app);
  fact::cli::add_tune_command(app);
  fact::cli::add_bench_command(app);
  fact::cli::add_optimize_command(app);
  fact::cli::add_run_command(app);
  fact::cli::add_device_command(app);
  fact::cli::add_registry_command(app);
  fact::cli::add_mcp_command(app);
  if (argc > 1) {
    if (auto message = fact::cli::unknown_command_message(app, argv[1])) {
      std::cerr << "fact: " << *message << "\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "fact: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
