// The C API (fact/engine/c_api.h) over the in-process engine API: JSON in, JSON out, no
// exception across the boundary.
#include "fact/engine/c_api.h"

#include <cstring>
#include <sstream>
#include <string>

#include "fact/build_info.hpp"
#include "fact/core/status_names.hpp"
#include "fact/engine/agent.hpp"
#include "fact/engine/call_verify.hpp"
#include "fact/engine/engine.hpp"
#include "fact/engine/engine_tables.hpp"
#include "fact/engine/optimize_stages.hpp"
#include "fact/problem/device_profile.hpp"
#include "fact/realize/compile_command.hpp"
#include "fact/registry/registry.hpp"
#include "fact/util/console.hpp"
#include "fact/problem/problem.hpp"

namespace {

char* copy_out(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

// A request's "precision": nullopt when absent or "" (the engine picks from the graph); throws
// std::invalid_argument for an unknown name.
std::optional<fact::core::PrecisionMode> precision_from_json(const nlohmann::json& j) {
  const std::string name = j.value("precision", std::string());
  if (name.empty()) return std::nullopt;
  return fact::core::parse_precision(name);
}

fact::engine::PlanRequest request_from_json(const nlohmann::json& j) {
  fact::engine::PlanRequest r;
  if (j.contains("graph_json") && j.at("graph_json").is_string()) {
    r.graph_document = nlohmann::json::parse(j.at("graph_json").get<std::string>());
  } else {
    r.graph = j.at("graph").get<std::string>();
  }
  r.out_dir = j.at("out_dir").get<std::string>();
  r.precision = precision_from_json(j);
  r.compile = j.value("compile", false);
  r.tune = j.value("tune", size_t{0});
  r.space = j.value("space", std::string("default"));
  if (j.contains("baselines") && j.at("baselines").is_array()) r.baselines = j.at("baselines").get<std::vector<std::string>>();
  if (j.contains("patterns") && j.at("patterns").is_array()) {
    r.patterns = j.at("patterns").get<std::vector<std::string>>();
  }
  if (j.contains("tuning_db") && j.at("tuning_db").is_string()) r.tuning_db = j.at("tuning_db").get<std::string>();
  r.use_tuning_db = j.value("use_tuning_db", true);
  r.reuse_bucket = j.value("reuse_bucket", false);
  if (j.contains("device_profile") && j.at("device_profile").is_string()) {
    r.device_profile = j.at("device_profile").get<std::string>();
  }
  r.jobs = j.value("jobs", 0);
  r.progress = j.value("progress", true);
  if (j.contains("inputs")) r.inputs = j.at("inputs");
  r.device = j.value("device", std::string("cpu"));

  r.use_registry = j.value("use_registry", true);
  if (j.contains("registry_dir") && j.at("registry_dir").is_string()) r.registry_dir = j.at("registry_dir").get<std::string>();
  return r;
}

fact::engine::DiscoverSettings settings_from_json(const nlohmann::json& j) {
  fact::engine::DiscoverSettings s;
  s.precision = precision_from_json(j);
  if (j.contains("device_profile") && j.at("device_profile").is_string()) s.device_profile = j.at("device_profile").get<std::string>();
  s.use_tuning_db = j.value("use_tuning_db", true);
  if (j.contains("tuning_db") && j.at("tuning_db").is_string()) s.tuning_db = j.at("tuning_db").get<std::string>();
  s.use_registry = j.value("use_registry", true);
  if (j.contains("registry_dir") && j.at("registry_dir").is_string()) s.registry_dir = j.at("registry_dir").get<std::string>();
  s.arch = j.value("arch", std::string("sm_90a"));
  return s;
}

// Runs `body` on the parsed request; its result (an object, "status" defaulting to "ok") or
// the exception's message goes back as JSON.
template <class Body>
int json_call(const char* request_json, char** response_json, Body body) {
  nlohmann::json response;
  int code = 1;
  try {
    const nlohmann::json request = nlohmann::json::parse(request_json ? request_json : "");
    response = body(request);
    if (!response.contains("status")) response["status"] = "ok";
    code = 0;
  } catch (const std::exception& e) {
    response = {{"status", "error"}, {"error", e.what()}};
  } catch (...) {
    response = {{"status", "error"}, {"error", "unknown failure in the engine"}};
  }
  if (response_json) *response_json = copy_out(response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return code;
}

nlohmann::json registry_call(const nlohmann::json& request) {
  namespace reg = fact::registry;
  const reg::Registry registry(request.contains("dir") && request.at("dir").is_string()
                                   ? std::filesystem::path(request.at("dir").get<std::string>())
                                   : reg::default_registry_dir());
  const std::string op = request.value("op", std::string("list"));
  nlohmann::json out = {{"dir", registry.dir().string()}};
  if (op == "list") {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : registry.entries(request.value("builtin", true))) {
      nlohmann::json doc = e.doc;
      if (!request.value("full", false) && doc.contains("source")) doc["source"].erase("text");
      if (!request.value("full", false) && doc.contains("reference")) doc["reference"].erase("fragment");
      doc["realization"] = reg::describe_realization(e);
      entries.push_back(std::move(doc));
    }
    out["entries"] = std::move(entries);
  } else if (op == "show") {
    const auto entry = registry.find(request.at("id").get<std::string>());
    if (!entry) throw std::invalid_argument("registry: no entry '" + request.at("id").get<std::string>() + "' (or the prefix is ambiguous)");
    out["entry"] = entry->doc;
    out["entry"]["realization"] = reg::describe_realization(*entry);
  } else if (op == "add") {
    out["entry"] = fact::registry::Registry(registry.dir()).add(request.at("entry")).doc;
  } else if (op == "check") {
    const auto problem = reg::entry_problem(request.at("entry"));
    out["problem"] = problem ? nlohmann::json(*problem) : nlohmann::json(nullptr);
    out["id"] = reg::entry_id(request.at("entry"));
  } else if (op == "remove") {
    out["removed"] = fact::registry::Registry(registry.dir()).remove(request.at("id").get<std::string>());
  } else if (op == "export") {
    std::vector<std::string> ids;
    if (request.contains("ids") && request.at("ids").is_array()) ids = request.at("ids").get<std::vector<std::string>>();
    out["export"] = registry.export_entries(ids, request.value("builtin", false));
  } else if (op == "lookup") {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : registry.lookup(request.value("rule", std::string()), request.value("pattern", std::string()),
                                         request.value("dtype", std::string()), request.value("arch", std::string("sm_90a"))))
      entries.push_back(e.doc);
    out["entries"] = std::move(entries);
  } else {
    throw std::invalid_argument("registry: unknown op '" + op + "' (list, show, add, check, remove, export, lookup)");
  }
  out["version"] = registry.version();
  return out;
}

}  // namespace

extern "C" int fact_engine_discover(const char* request_json, char** response_json) {
  return json_call(request_json, response_json, [](const nlohmann::json& request) {
    return fact::engine::discover_document(request.at("graph").get<std::string>(), settings_from_json(request));
  });
}

extern "C" int fact_engine_agent_task(const char* request_json, char** response_json) {
  return json_call(request_json, response_json, [](const nlohmann::json& request) {
    if (request.contains("fragment"))
      return fact::engine::fragment_task(request.at("fragment"), request.value("rule", std::string("subgraph")),
                                         request.value("dtype", std::string("float32")),
                                         precision_from_json(request));
    return fact::engine::agent_task(request.at("graph").get<std::string>(), request.at("match").get<std::string>(),
                                    settings_from_json(request));
  });
}

extern "C" int fact_engine_build(const char* request_json, char** response_json) {
  return json_call(request_json, response_json, [](const nlohmann::json& request) {
    fact::engine::SourceBuild build;
    build.source = request.at("source").get<std::string>();
    build.device = request.value("device", std::string("host"));
    build.kind = request.value("kind", std::string("subgraph"));
    build.name = request.value("name", std::string("agent_kernel"));
    build.file_name = request.value("file_name", std::string());
    build.timeout_seconds = request.value("timeout_seconds", 600);
    return fact::engine::build_source(build);
  });
}

extern "C" int fact_engine_realize(const char* request_json, char** response_json) {
  return json_call(request_json, response_json, [](const nlohmann::json& request) {
    return fact::engine::realize_template(request, request.at("out_dir").get<std::string>());
  });
}

extern "C" int fact_engine_device(const char* request_json, char** response_json) {
  return json_call(request_json, response_json, [](const nlohmann::json& request) {
    const auto gpu = fact::engine::gpu_unavailable_reason();
    const auto compile = fact::realize::compile_unavailable_reason(fact::realize::default_compile_options());
    const fact::DeviceProfile profile = request.contains("device_profile") && request.at("device_profile").is_string()
                                            ? fact::load_device_profile(request.at("device_profile").get<std::string>())
                                            : fact::default_device_profile();
    return nlohmann::json{{"gpu_unavailable", gpu ? nlohmann::json(*gpu) : nlohmann::json(nullptr)},
                          {"compile_unavailable", compile ? nlohmann::json(*compile) : nlohmann::json(nullptr)},
                          {"profile", fact::device_profile_to_json(profile)}};
  });
}

extern "C" int fact_registry(const char* request_json, char** response_json) {
  return json_call(request_json, response_json, registry_call);
}

extern "C" int fact_engine_plan(const char* request_json, char** response_json) {
  nlohmann::json response;
  int code = 1;
  try {
    const nlohmann::json request = nlohmann::json::parse(request_json ? request_json : "");
    const fact::engine::PlanResult result = fact::engine::make_plan(request_from_json(request));
    size_t planned = 0;
    for (const auto& r : result.plan.at("replacements")) planned += r.value("status", "") == "planned";
    response = {{"status", "ok"},
                {"plan", result.plan_path.string()},
                {"precision", result.options.precision},
                {"skipped", result.skipped},
                {"summary", std::to_string(planned) + " of " +
                                std::to_string(result.plan.at("replacements").size()) +
                                " replacement(s) planned"}};
    code = 0;
  } catch (const std::exception& e) {
    response = {{"status", "error"}, {"error", e.what()}};
  } catch (...) {
    response = {{"status", "error"}, {"error", "unknown failure in the engine"}};
  }
  if (response_json) *response_json = copy_out(response.dump());
  return code;
}

// The plan stage's lines come back as "text" (fact_optimize_plan) or go to `output` as they
// are written (fact_optimize_plan_output); the per-configuration tuning tables as "detail".
extern "C" int fact_optimize_plan(const char* request_json, char** response_json) {
  return json_call(request_json, response_json, [](const nlohmann::json& request) {
    fact::util::TextConsole text;
    std::ostringstream detail;
    nlohmann::json response = fact::engine::optimize_plan_stage(request, text, detail);
    response["text"] = text.text();
    response["detail"] = detail.str();
    return response;
  });
}

extern "C" int fact_optimize_plan_output(const char* request_json, fact_output_fn output, void* user,
                                         char** response_json) {
  return json_call(request_json, response_json, [&](const nlohmann::json& request) {
    if (output == nullptr) throw std::invalid_argument("fact_optimize_plan_output: no output function");
    fact::util::CallbackConsole console(
        [&](fact::util::Console::Kind kind, std::string_view text) {
          const std::string line(text);
          output(static_cast<int>(kind), line.c_str(), user);
        },
        request.value("terminal", false), request.value("columns", size_t{100}));
    std::ostringstream detail;
    nlohmann::json response = fact::engine::optimize_plan_stage(request, console, detail);
    response["text"] = "";
    response["detail"] = detail.str();
    return response;
  });
}

extern "C" int fact_optimize_report(const char* request_json, char** response_json) {
  return json_call(request_json, response_json, fact::engine::optimize_report_stage);
}

extern "C" void fact_engine_free(char* text) { std::free(text); }

extern "C" const char* fact_engine_version(void) {
  static const std::string version = std::string(fact::build_info::kVersion);
  return version.c_str();
}

extern "C" const char* fact_status_name(int status) {
  const std::string_view known = fact::core::known_status_name(status);
  if (!known.empty()) return known.data();  // the table's names are NUL-terminated literals
  thread_local std::string unknown;
  unknown = fact::core::status_name(status);
  return unknown.c_str();
}

extern "C" const char* fact_engine_tables(void) {
  static const std::string tables = fact::engine::engine_tables().dump();
  return tables.c_str();
}

extern "C" int fact_reference_call(const FactCallHeader* args) { return fact::reference_call(args); }

extern "C" int fact_verify_call(const char* request_json, FactEntry entry, FactFillInputs fill,
                                FactReferenceResults reference, const FactBaseline* baseline, void* user,
                                char** response_json) {
  return json_call(request_json, response_json, [&](const nlohmann::json& request) {
    fact::engine::CallVerifyHooks hooks;
    if (fill) {
      hooks.fill = [&](int index, const std::vector<void*>& operands) {
        if (fill(user, index, operands.data()) != 0) throw std::runtime_error("the caller's input fill failed");
      };
    }
    if (reference) {
      hooks.reference = [&](const std::vector<const void*>& operands, const std::vector<double*>& results) {
        if (reference(user, operands.data(), results.data()) != 0) {
          throw std::runtime_error("the caller's float64 reference failed");
        }
      };
    }
    if (baseline && baseline->call) {
      if (baseline->name) hooks.baseline_name = baseline->name;
      // No results: a timed run (NULL to the caller, c_api.h).
      hooks.baseline = [baseline](const std::vector<void*>& operands, const std::vector<void*>& results, void* stream) {
        if (baseline->call(baseline->user, operands.data(), results.empty() ? nullptr : results.data(), stream) != 0) {
          throw std::runtime_error("the caller's baseline failed");
        }
      };
    }
    return nlohmann::json{{"status", "ok"}, {"report", fact::engine::verify_call(request, entry, hooks)}};
  });
}
