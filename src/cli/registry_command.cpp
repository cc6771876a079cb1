// `fact registry list | show | add | remove | export | import`: the pattern registry
// (include/fact/registry/registry.hpp, docs/agent.md). list, show, remove and export run in the
// engine; add and import run the gates first (python -m fact.agent.admit: build, float64
// verification against the entry's reference semantics on fresh inputs with poisoned outputs,
// the adversarial checks, timing; in a child process with a time limit), which then store the
// entry through the engine's C API. Nothing enters without passing them.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fact/registry/registry.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/table.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/python_module.hpp"

namespace fact::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct RegistryArgs {
  std::string dir;  // empty: the default registry
  bool json = false;
  bool no_builtin = false;
  std::string id;
  std::string file;
  std::string out;
  bool builtin = false;
  bool source = false;
  std::vector<std::string> ids;
  double timeout = 120;
};

registry::Registry open(const RegistryArgs& args) {
  return registry::Registry(args.dir.empty() ? registry::default_registry_dir() : fs::path(args.dir));
}

std::string records(const json& doc, const char* key) {
  const json list = doc.value(key, json::array());
  return list.empty() ? "-" : std::to_string(list.size());
}

void list(const RegistryArgs& args) {
  const registry::Registry reg = open(args);
  const auto entries = reg.entries(!args.no_builtin);
  if (args.json) {
    json out = json::array();
    for (const auto& e : entries) out.push_back(e.doc);
    std::cout << json{{"dir", reg.dir().string()}, {"version", reg.version()}, {"entries", out}}.dump(2) << "\n";
    return;
  }
  std::cout << "FACT pattern registry " << reg.dir().string() << " (version " << reg.version() << ", "
            << entries.size() << " entries)\n\n";
  util::Table table({{"id"}, {"rule"}, {"dtype"}, {"arch"}, {"realized by"}, {"verified", util::Table::Align::Right},
                     {"tuned", util::Table::Align::Right}, {"rev", util::Table::Align::Right}});
  for (const auto& e : entries) {
    table.add_row({e.id(), e.rule(), e.dtype(), e.arch(), registry::describe_realization(e), records(e.doc, "verified"),
                   records(e.doc, "tuned"), std::to_string(e.doc.value("revision", 1))});
  }
  std::cout << table.render();
}

void show(const RegistryArgs& args) {
  const registry::Registry reg = open(args);
  const auto entry = reg.find(args.id);
  if (!entry) throw std::invalid_argument("no registry entry '" + args.id + "' (or the prefix is ambiguous); see `fact registry list`");
  if (args.json) {
    std::cout << entry->doc.dump(2) << "\n";
    return;
  }
  const json& d = entry->doc;
  std::cout << "entry     " << entry->id() << " (revision " << d.value("revision", 1) << ")\n"
            << "index     T(" << entry->rule() << ", " << entry->dtype() << ", " << entry->arch() << "), scope "
            << d.value("scope", std::string("rule")) << " (pattern " << d.value("pattern", std::string("-")) << ")\n"
            << "realized  " << registry::describe_realization(*entry) << "\n";
  const json p = d.value("provenance", json::object());
  std::cout << "origin    " << entry->origin();
  if (entry->builtin()) {
    std::cout << ": built into fact " << p.value("fact_version", std::string("?")) << " (registered rules and realizers)\n";
  } else {
    std::cout << "\n";
    for (const auto& [key, value] : p.items()) {
      if (!value.is_null()) std::cout << "          " << key << ": " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    }
  }
  if (entry->has_template()) {
    const json& t = d.at("template");
    std::cout << "template  rule " << t.value("rule", std::string()) << " of patterns/" << t.value("pattern", std::string()) << "\n";
    for (const auto& r : t.value("realizers", json::array()))
      std::cout << "          realizer " << r.value("pattern", std::string()) << " (kind " << r.value("kind", std::string())
                << ", priority " << r.value("priority", 0) << ")\n";
    std::cout << "          " << t.value("selection", std::string()) << "\n";
  }
  if (entry->has_source()) {
    const json& s = d.at("source");
    const std::string text = s.value("text", std::string());
    std::cout << "source    " << s.value("language", std::string()) << " for " << s.value("device", std::string()) << ", ABI "
              << s.value("abi", std::string()) << ", entry " << s.value("entry", std::string()) << ", sha256 "
              << s.value("sha256", std::string()).substr(0, 16) << ", "
              << std::count(text.begin(), text.end(), '\n') << " lines\n";
  }
  const json space = d.value("param_space", json::object());
  if (!space.empty()) std::cout << "params    " << space.dump() << "\n";
  const json ref = d.value("reference", json::object());
  if (ref.contains("fragment")) {
    std::cout << "reference the captured subgraph it replaces (semantics " << ref.value("semantics_hash", std::string()).substr(0, 12)
              << "):\n";
    for (const auto& n : ref.at("fragment").value("nodes", json::array()))
      std::cout << "          " << n.value("id", std::string()) << " = " << n.value("target", std::string()) << "\n";
  } else if (ref.contains("semantics")) {
    std::cout << "reference " << ref.value("semantics", std::string()) << "\n";
  }
  for (const auto& v : d.value("verified", json::array())) {
    std::cout << "verified  " << v.value("shape", std::string("?")) << " on " << v.value("device", std::string("?")) << ": rel_err "
              << v.value("rel_err", 0.0) << " <= " << v.value("tolerance", 0.0) << ", " << v.value("date", std::string()) << "\n";
  }
  for (const auto& t : d.value("tuned", json::array())) {
    std::cout << "tuned     " << t.value("device", std::string("?")) << ": " << t.value("ms", 0.0) << " ms";
    if (t.contains("baseline") && t.at("baseline").is_object())
      std::cout << " (baseline " << t.at("baseline").value("name", std::string()) << " " << t.at("baseline").value("ms", 0.0)
                << " ms, same run)";
    std::cout << ", " << t.value("timer", std::string()) << "\n";
  }
  // The speed rule: usable only when at least as fast as PyTorch, or under a written override.
  if (entry->has_source()) {
    const std::string override_reason = registry::speed_override_reason(d);
    const auto slow = registry::speed_problem(d);
    if (!override_reason.empty())
      std::cout << "speed     used under a speed override (not timed faster than PyTorch): " << override_reason << "\n";
    else
      std::cout << "speed     " << (slow ? "NOT USED: " + *slow : std::string("at least as fast as PyTorch")) << "\n";
  }
  if (d.contains("gates") && d.at("gates").is_object()) {
    std::cout << "gates     " << (d.at("gates").value("passed", false) ? "passed" : "FAILED") << ":";
    for (const auto& c : d.at("gates").value("checks", json::array())) std::cout << " " << c.value("name", std::string());
    std::cout << "\n";
  }
  if (args.source && entry->has_source()) std::cout << "\n" << d.at("source").value("text", std::string()) << "\n";
}

void remove_entry(const RegistryArgs& args) {
  registry::Registry reg = open(args);
  const auto entry = reg.find(args.id);
  const std::string id = entry ? entry->id() : args.id;
  if (!reg.remove(id)) throw std::invalid_argument("no stored registry entry '" + args.id + "'");
  std::cout << "removed " << id << " (registry version " << reg.version() << ")\n";
}

void export_entries(const RegistryArgs& args) {
  const registry::Registry reg = open(args);
  std::vector<std::string> ids;
  for (const auto& wanted : args.ids) {
    const auto entry = reg.find(wanted);
    if (!entry) throw std::invalid_argument("no registry entry '" + wanted + "'");
    ids.push_back(entry->id());
  }
  const json doc = reg.export_entries(ids, args.builtin);
  if (args.out.empty() || args.out == "-") {
    std::cout << doc.dump(2) << "\n";
  } else {
    util::write_file_atomically(args.out, doc.dump(2) + "\n");
    std::cout << "wrote " << doc.at("entries").size() << " entries to " << args.out << "\n";
  }
}

// add / import: the gates first, in Python (python/fact/agent/admit.py).
void admit(const std::string& op, const RegistryArgs& args) {
  std::vector<std::string> module_args = {op, args.file, "--timeout", std::to_string(args.timeout)};
  if (!args.dir.empty()) {
    module_args.push_back("--dir");
    module_args.push_back(args.dir);
  }
  const util::ProcessResult result = run_python_module("gates", "fact.agent.admit", module_args);
  if (!result.succeeded()) exit_unless_ok(result.exit_code > 0 ? result.exit_code : 1);
}

}  // namespace

void add_registry_command(CLI::App& app) {
  auto args = std::make_shared<RegistryArgs>();
  CLI::App* cmd = app.add_subcommand("registry", "The pattern registry T(rule, dtype, arch): what realizes each match, "
                                                 "verified on what, and where it came from");
  cmd->require_subcommand(1);
  cmd->add_option("--dir", args->dir, "Registry folder (default: $FACT_REGISTRY_DIR, else <cache>/registry)");

  CLI::App* list_cmd = cmd->add_subcommand("list", "List the entries (built-in templates and stored kernels)");
  list_cmd->add_flag("--json", args->json, "As JSON");
  list_cmd->add_flag("--no-builtin", args->no_builtin, "Stored entries only");
  list_cmd->callback([args] { list(*args); });

  CLI::App* show_cmd = cmd->add_subcommand("show", "One entry: realization, reference semantics, verification, tuning, provenance");
  show_cmd->add_option("id", args->id, "Entry id (or a unique prefix)")->required();
  show_cmd->add_flag("--json", args->json, "As JSON");
  show_cmd->add_flag("--source", args->source, "Print the kernel source too");
  show_cmd->callback([args] { show(*args); });

  CLI::App* add_cmd = cmd->add_subcommand("add", "Add a kernel entry (JSON) after it passes the gates here");
  add_cmd->add_option("entry", args->file, "Entry JSON (docs/agent.md)")->required()->check(CLI::ExistingFile);
  add_cmd->add_option("--timeout", args->timeout, "Seconds the gates may run");
  add_cmd->callback([args] { admit("add", *args); });

  CLI::App* remove_cmd = cmd->add_subcommand("remove", "Remove a stored entry");
  remove_cmd->add_option("id", args->id, "Entry id (or a unique prefix)")->required();
  remove_cmd->callback([args] { remove_entry(*args); });

  CLI::App* export_cmd = cmd->add_subcommand("export", "Write entries (all stored ones, or those named) as one JSON file");
  export_cmd->add_option("ids", args->ids, "Entry ids (default: every stored entry)");
  export_cmd->add_option("-o,--out", args->out, "File to write (default: stdout)");
  export_cmd->add_flag("--builtin", args->builtin, "Include the built-in entries");
  export_cmd->callback([args] { export_entries(*args); });

  CLI::App* import_cmd = cmd->add_subcommand("import", "Import an export file: each kernel entry passes the gates here first");
  import_cmd->add_option("file", args->file, "fact.registry.export/1 file")->required()->check(CLI::ExistingFile);
  import_cmd->add_option("--timeout", args->timeout, "Seconds the gates may run per entry");
  import_cmd->callback([args] { admit("import", *args); });
}

}  // namespace fact::cli
