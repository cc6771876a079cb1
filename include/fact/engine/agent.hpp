// What agents (the MCP server, the LLM synthesis loop: python/fact/agent/) need from the engine
// beyond make_plan, in process and as JSON documents: discovery as data, the task for one match
// (its reference semantics and the call a kernel must implement), builds of agent-supplied
// sources with structured compiler diagnostics, and realization from a built-in template with
// chosen parameters. The C API (c_api.h) exposes each one; docs/agent.md describes the
// documents.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/engine/engine.hpp"

namespace fact::engine {

// Discovery of a captured graph as a document: fact.discovery/1 (discover/report.hpp) plus
// "table" (the report an engineer reads, the registry's explanation of each class included)
// and "registry" {"dir", "version", "arch"}. Throws like make_plan for a bad graph or setting.
nlohmann::json discover_document(const std::filesystem::path& graph, const DiscoverSettings& settings);

// The task for one match of a captured graph (schema fact.agent.task/1): the match (selected
// by its discovery label "3", or the first whose rule is `match`), its reference semantics
// (registry::Semantics), the call a kernel for it implements — the "subgraph" ABI
// (fact_subgraph_abi.h): operands are the values the subgraph reads from outside, results the
// values it hands back, with the argument image and tolerance — the ABI header's text, and
// the registry entries that cover its rule at its dtype and arch. Throws std::invalid_argument
// when no match is selected or the call cannot be packed (the reason).
nlohmann::json agent_task(const std::filesystem::path& graph, const std::string& match,
                          const DiscoverSettings& settings);

// The task for a fragment alone (a registry entry's reference semantics, no captured graph):
// {"semantics", "call"} as agent_task gives them, the call's operands being every value the
// fragment reads from outside, its results the fragment's outputs, at `dtype`'s tolerance
// under `precision` (nullopt = strict).
nlohmann::json fragment_task(const nlohmann::json& fragment, const std::string& rule, const std::string& dtype,
                             std::optional<core::PrecisionMode> precision);

// One source build. device "host": the host C++ compiler ($FACT_CXX, else c++), -O2 -DNDEBUG
// -shared -fPIC, FACT's include folders; "cuda": the nvcc command every FACT kernel is built
// with (compile_command.hpp: -O3 -DNDEBUG, sm_90a, ptxas -v; C7510 and any "Potential
// Performance Loss" fail the build). The source defines
//   extern "C" int fact_entry(const FactCallHeader*, void*, size_t*, void*);
// and FACT appends the ABI's other symbols: fact_kernel_info() (kind, abi_version, entry, key,
// name, device) and the entry fact_<key> that calls fact_entry. Built through the build driver
// into the kernel cache (content-addressed), under a wall-clock limit.
struct SourceBuild {
  std::string source;
  std::string device = "host";      // host | cuda
  std::string kind = "subgraph";    // the ABI kind the entry implements
  std::string name = "agent_kernel";  // readable name (logs, fact_kernel_info)
  std::string file_name;            // how diagnostics name the source ("" = kernel.cpp / kernel.cu)
  int timeout_seconds = 600;
};
// {"status": "built"|"cached"|"failed"|"unavailable", "key", "library", "entry", "command",
//  "seconds", "reason", "log" (last 16 KiB), "diagnostics": [{"file","line","column",
//  "severity","message"}]}. "unavailable": no compiler for the device here (the reason).
nlohmann::json build_source(const SourceBuild& build);

// Compiler messages as data: gcc/clang ("f:12:5: error: m"), nvcc's front end ("f(12): error:
// m"), ptxas and linker lines (no file). Paths ending in the staged source's name are reported
// as `source_name`. Notes and warnings included, in order.
std::vector<nlohmann::json> parse_diagnostics(const std::string& log, const std::string& source_name);

// A kernel from a built-in template with chosen parameters. `request`:
//   {"problem": {"kind", ...} (a call's problem as the plan / agent task gives it),
//    "precision": "strict"|"tf32"|"native", "space": "default"|"exhaustive",
//    "config": "<configuration name>" | "params": {subset of a configuration's parameters},
//    "compile": bool}
// The configuration comes from the realizer's pruned space (the first whose name or parameters
// match; without either, the problem class's default). Returns {"status": "rendered"|build
// statuses|"no_config", "spec", "name", "key", "entry", "source_file", "source" (text),
// "configs": [names in the space] (when none matched), "build": build_source-like result}.
// Throws std::invalid_argument when no realizer takes the problem.
nlohmann::json realize_template(const nlohmann::json& request, const std::filesystem::path& out_dir);

}  // namespace fact::engine
