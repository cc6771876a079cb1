// The C API (fact/engine/c_api.h) over the in-process engine API: JSON in, JSON out, no
// exception across the boundary.
#include "fact/engine/c_api.h"

#include <cstring>
#include <string>

#include "fact/build_info.hpp"
#include "fact/engine/engine.hpp"
#include "fact/problem/problem.hpp"

namespace {

char* copy_out(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

fact::engine::PlanRequest request_from_json(const nlohmann::json& j) {
  fact::engine::PlanRequest r;
  r.graph = j.at("graph").get<std::string>();
  r.out_dir = j.at("out_dir").get<std::string>();
  r.precision = j.value("precision", std::string());
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
  return r;
}

}  // namespace

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

extern "C" void fact_engine_free(char* text) { std::free(text); }

extern "C" const char* fact_engine_version(void) {
  static const std::string version = std::string(fact::build_info::kVersion);
  return version.c_str();
}

extern "C" const char* fact_status_name(int status) {
  switch (status) {
    case FACT_OK: return "FACT_OK";
    case FACT_ERR_INVALID_ARGS: return "FACT_ERR_INVALID_ARGS";
    case FACT_ERR_CANNOT_IMPLEMENT: return "FACT_ERR_CANNOT_IMPLEMENT";
    case FACT_ERR_WORKSPACE: return "FACT_ERR_WORKSPACE";
    case FACT_ERR_INITIALIZE: return "FACT_ERR_INITIALIZE";
    case FACT_ERR_LAUNCH: return "FACT_ERR_LAUNCH";
    case FACT_ERR_INTERNAL: return "FACT_ERR_INTERNAL";
    default: return "FACT_STATUS_UNKNOWN";
  }
}

extern "C" int fact_reference_call(const FactCallHeader* args) { return fact::reference_call(args); }
