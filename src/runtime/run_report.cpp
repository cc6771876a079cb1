#include "fact/runtime/run_report.hpp"

#include <cstdio>
#include <stdexcept>

namespace fact::runtime {

using nlohmann::json;

std::string_view run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::Ok: return "ok";
    case RunStatus::Wrong: return "wrong";
    case RunStatus::CannotImplement: return "cannot_implement";
    case RunStatus::Error: return "error";
  }
  return "error";
}

RunStatus parse_run_status(std::string_view text) {
  for (RunStatus s : {RunStatus::Ok, RunStatus::Wrong, RunStatus::CannotImplement, RunStatus::Error}) {
    if (run_status_name(s) == text) return s;
  }
  throw std::invalid_argument("unknown run status '" + std::string(text) + "'");
}

int exit_code_for(RunStatus s) {
  switch (s) {
    case RunStatus::Ok: return kExitOk;
    case RunStatus::Wrong: return kExitWrong;
    case RunStatus::CannotImplement: return kExitCannotImplement;
    case RunStatus::Error: return kExitError;
  }
  return kExitError;
}

namespace {

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::optional<double> read_optional_number(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<double>();
}

CheckResult check_from_json(const std::string& name, const json& j) {
  CheckResult c;
  c.name = name;
  c.passed = j.at("passed").get<bool>();
  c.rel_err = read_optional_number(j, "rel_err");
  c.max_abs_err = j.at("max_abs_err").get<double>();
  c.ref_norm = j.at("ref_norm").get<double>();
  c.tolerance = j.at("tolerance").get<double>();
  c.elements = j.at("elements").get<int64_t>();
  c.unwritten = j.at("unwritten").get<int64_t>();
  c.nonfinite = j.at("nonfinite").get<int64_t>();
  c.out_of_bounds = j.at("out_of_bounds").get<int64_t>();
  c.inputs_unchanged = j.at("inputs_unchanged").get<bool>();
  c.final_at_return = j.value("final_at_return", true);
  c.seed = j.at("seed").get<uint64_t>();
  c.stream = j.at("stream").get<std::string>();
  c.failure = j.value("failure", "");
  return c;
}

BaselineResult baseline_from_json(const std::string& name, const json& j) {
  BaselineResult b;
  b.name = name;
  b.status = j.at("status").get<std::string>();
  b.error = j.value("error", "");
  b.computes = j.value("computes", "");
  b.fused = j.value("fused", false);
  b.config = j.value("config", "");
  if (j.contains("check") && !j.at("check").is_null()) b.check = check_from_json(name, j.at("check"));
  if (j.contains("ms") && !j.at("ms").is_null()) b.ms = timing_stats_from_json(j.at("ms"));
  b.tflops = read_optional_number(j, "tflops");
  return b;
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

json to_json(const CheckResult& c) {
  json j = {{"passed", c.passed},
            {"rel_err", optional_number(c.rel_err)},
            {"max_abs_err", c.max_abs_err},
            {"ref_norm", c.ref_norm},
            {"tolerance", c.tolerance},
            {"elements", c.elements},
            {"unwritten", c.unwritten},
            {"nonfinite", c.nonfinite},
            {"out_of_bounds", c.out_of_bounds},
            {"inputs_unchanged", c.inputs_unchanged},
            {"final_at_return", c.final_at_return},
            {"seed", c.seed},
            {"stream", c.stream}};
  if (!c.failure.empty()) j["failure"] = c.failure;
  return j;
}

json to_json(const BaselineResult& b) {
  json j = {{"status", b.status}, {"computes", b.computes}, {"fused", b.fused},
            {"config", b.config}};
  if (!b.error.empty()) j["error"] = b.error;
  j["check"] = b.check ? to_json(*b.check) : json(nullptr);
  j["rel_err"] = b.check ? optional_number(b.check->rel_err) : json(nullptr);
  j["ms"] = b.ms ? to_json(*b.ms) : json(nullptr);
  j["tflops"] = optional_number(b.tflops);
  return j;
}

json to_json(const RunReport& r) {
  json j;
  j["schema"] = kRunReportSchema;
  j["status"] = run_status_name(r.status);
  if (!r.error.empty()) j["error"] = r.error;
  j["timed_out"] = r.timed_out;
  j["kernel"] = {{"lib", r.lib}, {"entry", r.entry}, {"name", r.kernel_name}};
  j["problem"] = r.problem;
  j["precision"] = r.precision;
  j["tolerance"] = r.tolerance;
  j["rel_err"] = optional_number(r.rel_err);
  json checks = json::object();
  for (const CheckResult& c : r.checks) checks[c.name] = to_json(c);
  j["checks"] = checks;
  if (r.accuracy) {
    j["accuracy"] = {{"against", r.accuracy->against},
                     {"rel_err", r.accuracy->rel_err},
                     {"ratio", r.accuracy->ratio},
                     {"limit", r.accuracy->limit},
                     {"within_limit", r.accuracy->within_limit}};
  } else {
    j["accuracy"] = nullptr;
  }
  j["workspace_bytes"] = r.workspace_bytes;
  j["ms"] = r.ms ? to_json(*r.ms) : json(nullptr);
  j["tflops"] = optional_number(r.tflops);
  json baselines = json::object();
  for (const BaselineResult& b : r.baselines) baselines[b.name] = to_json(b);
  j["baselines"] = baselines;
  j["device"] = r.device;
  j["timing"] = r.timing;
  return j;
}

RunReport run_report_from_json(const json& j) {
  if (j.value("schema", "") != kRunReportSchema) {
    throw std::invalid_argument("not a " + std::string(kRunReportSchema) + " report");
  }
  RunReport r;
  r.status = parse_run_status(j.at("status").get<std::string>());
  r.error = j.value("error", "");
  r.timed_out = j.value("timed_out", false);
  if (j.contains("kernel")) {
    const json& k = j.at("kernel");
    r.lib = k.value("lib", "");
    r.entry = k.value("entry", "");
    r.kernel_name = k.value("name", "");
  }
  r.problem = j.value("problem", json::object());
  r.precision = j.value("precision", "");
  r.tolerance = j.value("tolerance", 0.0);
  r.rel_err = read_optional_number(j, "rel_err");
  if (j.contains("checks")) {
    for (const auto& [name, c] : j.at("checks").items()) r.checks.push_back(check_from_json(name, c));
  }
  if (j.contains("accuracy") && !j.at("accuracy").is_null()) {
    const json& a = j.at("accuracy");
    r.accuracy = AccuracyComparison{a.at("against").get<std::string>(), a.at("rel_err").get<double>(),
                                    a.at("ratio").get<double>(), a.value("limit", 0.0),
                                    a.at("within_limit").get<bool>()};
  }
  r.workspace_bytes = j.value("workspace_bytes", int64_t{0});
  if (j.contains("ms") && !j.at("ms").is_null()) r.ms = timing_stats_from_json(j.at("ms"));
  r.tflops = read_optional_number(j, "tflops");
  if (j.contains("baselines")) {
    for (const auto& [name, b] : j.at("baselines").items()) {
      r.baselines.push_back(baseline_from_json(name, b));
    }
  }
  r.device = j.value("device", json::object());
  r.timing = j.value("timing", json::object());
  return r;
}

std::string summary_line(const RunReport& r) {
  std::string line(run_status_name(r.status));
  const std::string fusion = r.problem.value("fusion", "");
  const std::string shape = r.problem.value("shape", "");
  if (!r.kernel_name.empty()) line += "  " + r.kernel_name;
  else if (!fusion.empty()) line += "  " + fusion;
  if (!shape.empty()) line += "  " + shape;
  if (!r.precision.empty()) line += "  [" + r.precision + "]";
  if (r.rel_err) {
    line += "  rel_err " + format("%.2e", *r.rel_err) + " (tol " + format("%.0e", r.tolerance) + ")";
  }
  if (r.accuracy) line += "  " + r.accuracy->against + " " + format("%.2e", r.accuracy->rel_err);
  if (r.ms) {
    line += "  " + format("%.4f", r.ms->median) + " ms";
    if (r.tflops) line += "  " + format("%.1f", *r.tflops) + " TFLOP/s";
  }
  for (const BaselineResult& b : r.baselines) {
    line += "  | " + b.name;
    if (b.ms) line += " " + format("%.4f", b.ms->median) + " ms";
    if (b.check && b.check->rel_err) line += " err " + format("%.1e", *b.check->rel_err);
    if (b.status != "ok") line += " " + b.status;
  }
  if (!r.error.empty()) line += "  : " + r.error;
  return line;
}

}  // namespace fact::runtime
