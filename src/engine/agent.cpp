#include "fact/engine/agent.hpp"

#include <algorithm>
#include <map>
#include <cctype>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "fact/build_info.hpp"
#include "fact/discover/report.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/compile_command.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/realizer_source.hpp"
#include "fact/registry/registry.hpp"
#include "fact/registry/semantics.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/sha256.hpp"
#include "fact/util/subprocess.hpp"

namespace fact::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kLogTail = 16 * 1024;

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

std::string identifier(const std::string& text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out.empty() ? "kernel" : out;
}

std::string tail(const std::string& text, size_t bytes = kLogTail) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

// The entry's call of the ABI, the kernel info, and the key / entry placeholders (substituted
// once the source is keyed, as render_kernel does). It includes the ABI by its forwarding path,
// fact/runtime/fact_abi.h: the trailer is part of the source key, which stays what it was.
std::string abi_trailer(const std::string& kind, const std::string& name, const std::string& device) {
  std::string info = "{\\\"kind\\\":\\\"" + kind + "\\\",\\\"abi_version\\\":" + std::to_string(FACT_ABI_VERSION) +
                     ",\\\"entry\\\":\\\"FACT_ENTRY_SYMBOL\\\",\\\"key\\\":\\\"FACT_KERNEL_KEY\\\",\\\"name\\\":\\\"" + name +
                     "\\\",\\\"device\\\":\\\"" + device + "\\\",\\\"origin\\\":\\\"source\\\"}";
  return "\n\n// ---- appended by FACT (docs/abi.md, docs/agent.md): the ABI's entry and kernel info ----\n"
         "#include \"fact/runtime/fact_abi.h\"\n"
         "extern \"C\" int fact_entry(const FactCallHeader* args, void* workspace, size_t* workspace_size, void* stream);\n"
         "extern \"C\" __attribute__((visibility(\"default\"))) int FACT_ENTRY_SYMBOL(const FactCallHeader* args, "
         "void* workspace, size_t* workspace_size, void* stream) {\n"
         "  return fact_entry(args, workspace, workspace_size, stream);\n}\n"
         "extern \"C\" __attribute__((visibility(\"default\"))) const char* fact_kernel_info(void) {\n"
         "  return \"" + info + "\";\n}\n";
}

std::vector<std::string> timeout_prefix(int seconds) {
  if (seconds <= 0 || !util::find_executable("timeout")) return {};
  return {"timeout", "--kill-after=5", std::to_string(seconds)};
}

std::string host_compiler() {
  if (const char* cxx = std::getenv("FACT_CXX"); cxx && *cxx) return cxx;
  return "c++";
}

const discover::Match& select_match(const discover::Discovery& discovery, const std::string& which, size_t* index) {
  const bool number = !which.empty() && std::all_of(which.begin(), which.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (number) {
    const size_t label = std::stoul(which);
    if (label == 0 || label > discovery.matches.size())
      throw std::invalid_argument("no match #" + which + " (discovery found " + std::to_string(discovery.matches.size()) + ")");
    *index = label - 1;
    return discovery.matches[*index];
  }
  for (size_t i = 0; i < discovery.matches.size(); ++i) {
    const auto& m = discovery.matches[i];
    if (m.rule == which || m.pattern == which) {
      *index = i;
      return m;
    }
  }
  throw std::invalid_argument("no match of rule or pattern '" + which + "'");
}

double value_bytes(const graph::Graph& g, const std::string& id) {
  if (!g.has_value(id)) return 0.0;
  const auto& d = g.value(id).desc;
  return double(d.numel()) * graph::dtype_bytes(d.dtype);
}

// The "subgraph" call reading `operands` and writing `results` of `g` (an agent task's call).
json subgraph_call(const graph::Graph& g, const std::vector<std::string>& operands, const std::vector<std::string>& results,
                   graph::DType dtype, const std::string& rule, core::PrecisionMode precision, double flops) {
  double bytes = 0.0;
  for (const auto& id : operands) bytes += value_bytes(g, id);
  for (const auto& id : results) bytes += value_bytes(g, id);
  const Problem problem{"subgraph", {{"operands", operands},
                                     {"results", results},
                                     {"dtype", graph::dtype_name(dtype)},
                                     {"rule", rule},
                                     {"flops", flops},
                                     {"min_bytes", bytes}}};
  const ProblemKind& kind = kind_of(problem);
  json image = kind.pack(problem.desc, g).to_json();
  for (auto& operand : image.at("operands")) {
    const std::string value = operand.at("value").get<std::string>();
    operand["shape"] = g.value(value).desc.shape;
    operand["stride"] = g.value(value).desc.stride;
  }
  json call = {{"kind", "subgraph"},
               {"label", "1"},
               {"summary", rule + " (" + kind.shape(problem.desc) + ") " + std::string(graph::dtype_label(dtype))},
               {"problem", problem_to_json(problem)},
               {"tolerance", kind.tolerance(problem.desc, precision)},
               {"flops", flops},
               {"min_bytes", bytes}};
  call.update(image);
  return call;
}

}  // namespace

json discover_document(const fs::path& graph_path, const DiscoverSettings& settings) {
  if (graph_path.empty() || !fs::exists(graph_path))
    throw std::invalid_argument("no captured graph at '" + graph_path.string() + "'");
  const graph::Graph captured = graph::load_graph(graph_path);
  const discover::DiscoverOptions options = discover_options(settings, captured);
  const discover::Discovery discovery = discover::discover(captured, options);
  json doc = discover::discovery_to_json(discovery, captured, options);
  doc["table"] = discover::discovery_table(discovery, captured, options);
  const registry::Registry reg(settings.registry_dir.value_or(registry::default_registry_dir()));
  doc["registry"] = {{"dir", reg.dir().string()},
                     {"version", settings.use_registry ? reg.version() : 0},
                     {"arch", settings.arch},
                     {"used", settings.use_registry}};
  return doc;
}

json agent_task(const fs::path& graph_path, const std::string& which, const DiscoverSettings& settings) {
  if (graph_path.empty() || !fs::exists(graph_path))
    throw std::invalid_argument("no captured graph at '" + graph_path.string() + "'");
  const graph::Graph captured = graph::load_graph(graph_path);
  const discover::DiscoverOptions options = discover_options(settings, captured);
  const discover::Discovery discovery = discover::discover(captured, options);
  size_t index = 0;
  const discover::Match& m = select_match(discovery, which, &index);
  if (m.nodes.empty() || m.outputs.empty()) throw std::invalid_argument("match #" + std::to_string(index + 1) + " covers no nodes");
  const registry::Semantics semantics = registry::semantics_of(captured, m.nodes, m.outputs);

  double flops = 0.0;
  for (const auto& p : m.problems) {
    try {
      flops += kind_of(p).flops(p.desc);
    } catch (const std::exception&) {
    }
  }
  json call = subgraph_call(captured, semantics.fragment.at("inputs").get<std::vector<std::string>>(), m.outputs,
                            m.dtype, m.rule, options.precision, flops);
  call["label"] = std::to_string(index + 1);
  const realize::CompileOptions compile = realize::default_compile_options();
  // "header": the path an agent's kernel includes (a forwarding header that stays for them);
  // "text" and "common": the ABI itself, read where it lives.
  json abi = {{"header", "include/fact/runtime/fact_subgraph_abi.h"},
              {"entry", "extern \"C\" int fact_entry(const FactCallHeader* args, void* workspace, size_t* workspace_size, void* stream)"}};
  try {
    abi["text"] = util::read_file(compile.fact_root / "include/fact/core/fact_subgraph_abi.h");
    abi["common"] = util::read_file(compile.fact_root / "include/fact/core/fact_abi.h");
  } catch (const std::exception& e) {
    abi["text"] = std::string("(unreadable: ") + e.what() + ")";
  }

  json candidates = json::array();
  if (settings.use_registry) {
    const registry::Registry reg(settings.registry_dir.value_or(registry::default_registry_dir()));
    for (const auto& entry : reg.lookup(m.rule, m.pattern, std::string(graph::dtype_name(m.dtype)), settings.arch))
      candidates.push_back(entry.doc);
  }
  return {{"schema", "fact.agent.task/1"},
          {"graph", graph_path.string()},
          {"module", captured.source.value("module", std::string())},
          {"precision", options.precision},
          {"arch", settings.arch},
          {"label", std::to_string(index + 1)},
          {"match", discover::match_to_json(m)},
          {"semantics", {{"fragment", semantics.fragment}, {"hash", semantics.hash}, {"structure_hash", semantics.structure_hash}}},
          {"call", call},
          {"abi", abi},
          {"registry", candidates}};
}

json fragment_task(const json& fragment, const std::string& rule, const std::string& dtype,
                   std::optional<core::PrecisionMode> precision) {
  const registry::Semantics semantics = registry::semantics_of_fragment(fragment);
  json doc = fragment;
  json inputs = json::array();
  std::map<std::string, std::string> kinds;
  for (const auto& v : fragment.at("values")) kinds[v.at("id").get<std::string>()] = v.value("kind", std::string());
  for (const auto& id : fragment.at("inputs")) {
    if (kinds[id.get<std::string>()] == "input") inputs.push_back(id);
  }
  doc["inputs"] = inputs;
  const graph::Graph g = graph::graph_from_json(doc);
  json call = subgraph_call(g, fragment.at("inputs").get<std::vector<std::string>>(),
                            fragment.at("outputs").get<std::vector<std::string>>(), graph::parse_dtype(dtype), rule,
                            precision.value_or(core::PrecisionMode::Strict), 0.0);
  return {{"schema", "fact.agent.task/1"},
          {"precision", precision ? std::string(core::precision_name(*precision)) : std::string()},
          {"semantics", {{"fragment", fragment}, {"hash", semantics.hash}, {"structure_hash", semantics.structure_hash}}},
          {"call", call}};
}

std::vector<json> parse_diagnostics(const std::string& log, const std::string& source_name) {
  static const std::regex gcc(R"(^(.*?):(\d+):(\d+):\s+(fatal error|error|warning|note):\s+(.*)$)");
  static const std::regex gcc_no_column(R"(^(.*?):(\d+):\s+(fatal error|error|warning|note):\s+(.*)$)");
  static const std::regex edg(R"(^(.*?)\((\d+)\):\s+(catastrophic error|error|warning|remark)(?:\s+#[\w-]+)?:\s+(.*)$)");
  static const std::regex ptxas(R"(^ptxas\b.*?\b(error|warning|fatal)\s*:\s*(.*)$)");
  static const std::regex linker(R"(^(?:.*ld(?:\.\w+)?:\s+)?(.*undefined reference to .*)$)");
  auto file_of = [&](std::string file) {
    if (file == "source.cu" || (file.size() > 10 && file.compare(file.size() - 10, 10, "/source.cu") == 0)) return source_name;
    return file;
  };
  std::vector<json> out;
  std::istringstream lines(log);
  std::string line;
  std::smatch match;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (std::regex_match(line, match, gcc)) {
      out.push_back({{"file", file_of(match[1])}, {"line", std::stoi(match[2])}, {"column", std::stoi(match[3])},
                     {"severity", match[4] == "fatal error" ? "error" : std::string(match[4])}, {"message", match[5]}});
    } else if (std::regex_match(line, match, gcc_no_column)) {
      out.push_back({{"file", file_of(match[1])}, {"line", std::stoi(match[2])}, {"column", 0},
                     {"severity", match[3] == "fatal error" ? "error" : std::string(match[3])}, {"message", match[4]}});
    } else if (std::regex_match(line, match, edg)) {
      const std::string severity = match[3] == "catastrophic error" ? "error" : std::string(match[3]);
      out.push_back({{"file", file_of(match[1])}, {"line", std::stoi(match[2])}, {"column", 0},
                     {"severity", severity}, {"message", match[4]}});
    } else if (std::regex_match(line, match, ptxas)) {
      out.push_back({{"file", ""}, {"line", 0}, {"column", 0},
                     {"severity", match[1] == "warning" ? "warning" : "error"}, {"message", "ptxas: " + std::string(match[2])}});
    } else if (std::regex_match(line, match, linker)) {
      out.push_back({{"file", ""}, {"line", 0}, {"column", 0}, {"severity", "error"}, {"message", match[1]}});
    }
  }
  // ptxas C7510 / performance-loss warnings fail FACT builds: say so as an error.
  for (auto& d : out) {
    const std::string message = d.value("message", std::string());
    if (message.find("C7510") != std::string::npos || message.find("Potential Performance Loss") != std::string::npos)
      d["severity"] = "error";
  }
  return out;
}

json build_source(const SourceBuild& build) {
  if (build.device != "host" && build.device != "cuda")
    throw std::invalid_argument("build: device '" + build.device + "' is not host or cuda");
  if (build.source.empty()) throw std::invalid_argument("build: empty source");
  const realize::CompileOptions options = realize::default_compile_options();
  const std::string name = identifier(build.name);
  const std::string source_name = build.file_name.empty() ? (build.device == "host" ? "kernel.cpp" : "kernel.cu") : build.file_name;
  std::vector<std::string> command = {"env", "LC_ALL=C"};  // plain ASCII quotes in diagnostics
  for (const auto& word : timeout_prefix(build.timeout_seconds)) command.push_back(word);
  std::string fingerprint;
  std::string compiler;
  if (build.device == "cuda") {
    if (auto why = realize::compile_unavailable_reason(options)) return {{"status", "unavailable"}, {"reason", *why}};
    const auto nvcc = realize::nvcc_command(options);
    command.insert(command.end(), nvcc.begin(), nvcc.end());
    fingerprint = realize::compile_fingerprint(options);
    compiler = options.nvcc.string();
  } else {
    compiler = host_compiler();
    if (!util::find_executable(compiler)) return {{"status", "unavailable"}, {"reason", "no host C++ compiler ('" + compiler + "'; set FACT_CXX)"}};
    const std::vector<std::string> host = {compiler, "-std=c++17", "-O2", "-DNDEBUG", "-shared", "-fPIC", "-pthread",
                                           "-I" + (options.fact_root / "include").string(), "-I" + options.fact_root.string(),
                                           "-x", "c++", std::string(realize::kSourcePlaceholder), "-x", "none",
                                           "-o", std::string(realize::kOutputPlaceholder)};
    command.insert(command.end(), host.begin(), host.end());
    fingerprint = "host:" + realize::compiler_identity_of(compiler) + "\n" +
                  util::sha256_hex(util::read_file(options.fact_root / "include/fact/core/fact_abi.h")) + "\n";
    for (size_t i = 1; i + 1 < host.size(); ++i) fingerprint += host[i] + " ";
  }
  std::string source = build.source + abi_trailer(build.kind, name, build.device);
  const std::string key = util::sha256_hex("fact-source-key/1\n" + fingerprint + "\ndevice:" + build.device +
                                           "\nkind:" + build.kind + "\nsource:\n" + source);
  const std::string entry = "fact_" + key.substr(0, 16);
  replace_all(source, "FACT_ENTRY_SYMBOL", entry);
  replace_all(source, "FACT_KERNEL_KEY", key);

  realize::KernelCache cache;
  realize::BuildOptions build_options;
  build_options.jobs = 1;
  build_options.retry_failed = true;
  build_options.use_ninja = false;
  build_options.show_progress = false;
  build_options.title = "agent build";
  build_options.compiler_identity = realize::compiler_identity_of(compiler);
  realize::BuildDriver driver(cache, build_options);
  realize::BuildJob job{key, source, entry,
                        json{{"kind", build.kind}, {"pattern", "source"}, {"name", name}, {"params", {{"device", build.device}}}},
                        command, name};
  const realize::BuildOutcome outcome = driver.build({job}).front();
  std::string log;
  const realize::EntryLookup found = cache.lookup(key);
  if (found.failure) log = found.failure->log;
  if (log.empty() && !outcome.log.empty()) {
    try {
      log = util::read_file(outcome.log);
    } catch (const std::exception&) {
    }
  }
  std::vector<std::string> shown = command;
  for (auto& word : shown) {
    if (word.find("/.staging/") != std::string::npos) word = word.substr(word.rfind('/') + 1);
  }
  json result = {{"status", std::string(realize::build_status_name(outcome.status))},
                 {"key", key},
                 {"entry", entry},
                 {"device", build.device},
                 {"library", outcome.usable() ? outcome.library.string() : ""},
                 {"command", util::shell_join(command)},
                 {"seconds", outcome.compile_seconds},
                 {"reason", std::regex_replace(outcome.reason, std::regex(R"(\S*/source\.cu)"), source_name)},
                 {"log", std::regex_replace(tail(log), std::regex(R"(\S*/source\.cu)"), source_name)},
                 {"diagnostics", parse_diagnostics(log, source_name)},
                 {"source_name", source_name}};
  return result;
}

json realize_template(const json& request, const fs::path& out_dir) {
  const Problem problem = problem_from_json(request.at("problem"));
  const core::PrecisionMode precision = core::parse_precision(request.value("precision", std::string("native")));
  const std::string space_name = request.value("space", std::string("default"));
  const realize::CompileOptions options = realize::default_compile_options();
  realize::RealizerSource source(options);
  const realize::KernelSpec problem_class = source.problem_class(problem, precision);
  realize::KernelSpec chosen = problem_class;
  json configs = json::array();
  const bool by_name = request.contains("config") && request.at("config").is_string();
  const bool by_params = request.contains("params") && request.at("params").is_object() && !request.at("params").empty();
  if (by_name || by_params) {
    const realize::ParamSpace space = source.candidates(problem_class, problem, space_name);
    std::optional<realize::KernelSpec> found;
    for (const auto& spec : space.candidates) {
      configs.push_back(spec.name());
      if (found) continue;
      if (by_name && spec.name() == request.at("config").get<std::string>()) found = spec;
      if (!by_name && by_params) {
        bool all = true;
        for (const auto& [k, v] : request.at("params").items()) {
          if (!spec.params().contains(k) || spec.params().at(k) != v) all = false;
        }
        if (all) found = spec;
      }
    }
    if (!found) {
      return {{"status", "no_config"},
              {"reason", "no configuration of the pruned " + space_name + " space matches the request"},
              {"configs", configs},
              {"problem_class", problem_class.to_json()}};
    }
    chosen = *found;
  }
  const realize::RenderedKernel kernel = realize::render_kernel(chosen, options);
  fs::create_directories(out_dir);
  const fs::path source_file = out_dir / (kernel.spec.name() + ".cu");
  util::write_file_atomically(source_file, kernel.source);
  json result = {{"status", "rendered"},
                 {"spec", kernel.spec.to_json()},
                 {"name", kernel.spec.name()},
                 {"key", kernel.key},
                 {"entry", kernel.entry_symbol},
                 {"source_file", source_file.string()},
                 {"source", kernel.source}};
  if (request.value("compile", false)) {
    if (auto why = realize::compile_unavailable_reason(options)) {
      result["build"] = {{"status", "unavailable"}, {"reason", *why}};
      return result;
    }
    realize::KernelCache cache;
    realize::BuildOptions build_options;
    build_options.jobs = 1;
    build_options.retry_failed = true;
    build_options.use_ninja = false;
    build_options.show_progress = false;
    realize::BuildDriver driver(cache, build_options);
    const realize::BuildOutcome outcome = driver.build({realize::build_job(kernel, options)}).front();
    std::string log;
    const realize::EntryLookup found = cache.lookup(kernel.key);
    if (found.failure) log = found.failure->log;
    if (log.empty() && !outcome.log.empty()) {
      try {
        log = util::read_file(outcome.log);
      } catch (const std::exception&) {
      }
    }
    result["status"] = std::string(realize::build_status_name(outcome.status));
    result["build"] = {{"status", std::string(realize::build_status_name(outcome.status))},
                       {"library", outcome.usable() ? outcome.library.string() : ""},
                       {"seconds", outcome.compile_seconds},
                       {"reason", outcome.reason},
                       {"log", tail(log)},
                       {"diagnostics", parse_diagnostics(log, source_file.filename().string())}};
  }
  return result;
}

}  // namespace fact::engine
