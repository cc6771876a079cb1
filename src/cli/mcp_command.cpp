// `fact mcp`: the Model Context Protocol server for agents, over stdio (docs/agent.md). The
// server is Python (the official MCP SDK, python/fact/agent/mcp_server.py) around the engine's
// in-process API (libfact's C API); this command replaces itself with it (exec), so the agent's
// stdin and stdout reach the server untouched and its exit status is the server's.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fact/build_info.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/python_module.hpp"

namespace fact::cli {

namespace {

struct McpArgs {
  std::string work_dir;  // where tools write graphs, kernels, logs (default: a temporary folder)
  std::string registry_dir;
  bool list_tools = false;
};

[[noreturn]] void run(const McpArgs& args) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) ::setenv("FACT_ENGINE", self.c_str(), 1);
  // From a build folder the source tree's python/ is the front end (an installed fact has its own).
  if (!error && fs::exists(self.parent_path() / "CMakeCache.txt", error)) {
    std::string pythonpath = std::string(build_info::kSourceDir) + "/python";
    if (const char* existing = std::getenv("PYTHONPATH"); existing && *existing) pythonpath += std::string(":") + existing;
    ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
  }
  if (!args.registry_dir.empty()) ::setenv("FACT_REGISTRY_DIR", args.registry_dir.c_str(), 1);
  std::vector<std::string> argv = {python_executable(), "-m", "fact.agent.mcp_server"};
  if (!args.work_dir.empty()) {
    argv.push_back("--work-dir");
    argv.push_back(args.work_dir);
  }
  if (args.list_tools) argv.push_back("--list-tools");
  std::vector<char*> raw;
  for (auto& word : argv) raw.push_back(word.data());
  raw.push_back(nullptr);
  std::cout.flush();
  ::execvp(raw[0], raw.data());
  std::cerr << "fact mcp: cannot start " << argv[0] << ": " << std::strerror(errno) << " (set FACT_PYTHON)\n";
  std::exit(127);
}

}  // namespace

void add_mcp_command(CLI::App& app) {
  auto args = std::make_shared<McpArgs>();
  CLI::App* cmd = app.add_subcommand(
      "mcp", "Serve FACT's stages to an agent over the Model Context Protocol (stdio): capture, inspect, discover, "
             "registry, examples, realize, build, verify, tune, compose, benchmark, explain");
  cmd->add_option("--work-dir", args->work_dir, "Folder for the tools' files (default: a fresh temporary folder)");
  cmd->add_option("--registry-dir", args->registry_dir, "Pattern registry folder (default: <cache>/registry)");
  cmd->add_flag("--list-tools", args->list_tools, "Print the tools and exit (no server)");
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
