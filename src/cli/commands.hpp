// Subcommands of the `fact` CLI. Each lives in its own file (src/cli/<name>_command.cpp) and
// adds itself to the app; main.cpp only lists them.
#pragma once
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>

namespace fact::cli {

void add_discover_command(CLI::App& app);  // fact discover graph.json [--json out.json]
void add_realize_command(CLI::App& app);   // fact realize graph.json --emit-only | --build
void add_plan_command(CLI::App& app);      // fact plan graph.json -o dir (plan.json)
void add_tune_command(CLI::App& app);      // fact tune graph.json / --problem ...
void add_bench_command(CLI::App& app);     // fact bench gemm
void add_optimize_command(CLI::App& app);  // fact optimize model.py:Class
void add_run_command(CLI::App& app);       // fact run-kernel lib.so --problem ... (one candidate, JSON out)
void add_device_command(CLI::App& app);    // fact device: measure the device profile
// `fact device` with its defaults, for a command that needs the profile: measures the device,
// saves the profile where discovery reads it, prints its one-line summary, and returns false
// (the defaults stay) when measuring fails or FACT was built without CUDA.
bool measure_and_save_device_profile();
void add_registry_command(CLI::App& app);  // fact registry list|show|add|remove|export|import
void add_mcp_command(CLI::App& app);       // fact mcp: the MCP server (stdio) for agents

// For commands whose run returns an exit code (CLI11 callbacks return nothing): ends the
// process with `code` unless it is 0, flushing stdout first so printed tables are not lost.
inline void exit_unless_ok(int code) {
  if (code == 0) return;
  std::cout.flush();
  std::exit(code);
}

}  // namespace fact::cli
