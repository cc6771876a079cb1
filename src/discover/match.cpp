#include "fact/discover/match.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace fact::discover {

namespace {

using nlohmann::json;

json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end())
    throw std::invalid_argument(where + ": missing field '" + key + "'");
  return *it;
}

double number_from(const json& j, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  throw std::invalid_argument(where + ": expected a number");
}

double number_field(const json& j, const char* key, const std::string& where, double fallback) {
  auto it = j.find(key);
  return it == j.end() ? fallback : number_from(*it, where + "." + key);
}

int64_t int_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number_integer()) throw std::invalid_argument(where + "." + key + ": expected an integer");
  return v.get<int64_t>();
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string()) throw std::invalid_argument(where + "." + key + ": expected a string");
  return v.get<std::string>();
}

graph::DType dtype_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return graph::DType::Unknown;
  if (!it->is_string()) throw std::invalid_argument(where + "." + key + ": expected a string");
  return graph::parse_dtype(it->get<std::string>());
}

json operand_to_json(const GemmOperand& o) {
  return {{"value", o.value},
          {"dtype", graph::dtype_name(o.dtype)},
          {"layout", layout_name(o.layout)},
          {"ld", o.ld},
          {"batch_stride", o.batch_stride}};
}

GemmOperand operand_from_json(const json& j, const std::string& where) {
  GemmOperand o;
  o.value = j.value("value", std::string());
  o.dtype = dtype_field(j, "dtype", where);
  const std::string layout = string_field(j, "layout", where);
  if (layout == "row") o.layout = Layout::RowMajor;
  else if (layout == "col") o.layout = Layout::ColumnMajor;
  else throw std::invalid_argument(where + ".layout: expected \"row\" or \"col\"");
  o.ld = int_field(j, "ld", where);
  o.batch_stride = j.contains("batch_stride") ? int_field(j, "batch_stride", where) : 0;
  return o;
}

template <typename Enum, size_t N>
Enum enum_from(const std::string& name, const std::array<Enum, N>& all,
               std::string_view (*namer)(Enum), const std::string& where) {
  for (Enum e : all) {
    if (namer(e) == name) return e;
  }
  throw std::invalid_argument(where + ": unknown name '" + name + "'");
}

constexpr std::array<EpilogueStep::Kind, 5> kKinds{
    EpilogueStep::Kind::Scale, EpilogueStep::Kind::Bias, EpilogueStep::Kind::Activation,
    EpilogueStep::Kind::Residual, EpilogueStep::Kind::Multiply};
constexpr std::array<MatchStatus, 3> kStatuses{MatchStatus::Accepted, MatchStatus::Declined,
                                               MatchStatus::Pending};
constexpr std::array<Classification, 3> kClassifications{Classification::Reuse,
                                                         Classification::Adapt, Classification::New};

}  // namespace

std::string_view match_status_name(MatchStatus s) {
  switch (s) {
    case MatchStatus::Accepted: return "accepted";
    case MatchStatus::Declined: return "declined";
    case MatchStatus::Pending: return "pending";
  }
  return "unknown";
}

std::string_view classification_name(Classification c) {
  switch (c) {
    case Classification::Reuse: return "REUSE";
    case Classification::Adapt: return "ADAPT";
    case Classification::New: return "NEW";
  }
  return "unknown";
}

json gemm_problem_to_json(const GemmProblem& p) {
  json epilogue = json::array();
  for (const auto& step : p.epilogue) {
    json s = {{"kind", epilogue_kind_name(step.kind)}};
    if (step.kind == EpilogueStep::Kind::Activation) {
      s["activation"] = activation_name(step.activation);
      s["p0"] = number(step.p0);
      s["p1"] = number(step.p1);
    }
    if (step.kind == EpilogueStep::Kind::Scale || step.kind == EpilogueStep::Kind::Residual)
      s["value"] = number(step.value);
    if (!step.operand.empty()) {
      s["operand"] = step.operand;
      s["operand_dtype"] = graph::dtype_name(step.operand_dtype);
    }
    epilogue.push_back(std::move(s));
  }
  return {{"fusion", p.fusion_name()},
          {"shape", p.shape_string()},
          {"m", p.m},
          {"n", p.n},
          {"k", p.k},
          {"batch", p.batch},
          {"alpha", number(p.alpha)},
          {"accumulate", graph::dtype_name(p.accumulate)},
          {"a", operand_to_json(p.a)},
          {"b", operand_to_json(p.b)},
          {"d", operand_to_json(p.d)},
          {"epilogue", std::move(epilogue)}};
}

GemmProblem gemm_problem_from_json(const json& j) {
  const std::string where = "gemm";
  GemmProblem p;
  p.m = int_field(j, "m", where);
  p.n = int_field(j, "n", where);
  p.k = int_field(j, "k", where);
  p.batch = j.contains("batch") ? int_field(j, "batch", where) : 1;
  p.alpha = number_field(j, "alpha", where, 1.0);
  if (j.contains("accumulate")) p.accumulate = dtype_field(j, "accumulate", where);
  p.a = operand_from_json(field(j, "a", where), where + ".a");
  p.b = operand_from_json(field(j, "b", where), where + ".b");
  p.d = operand_from_json(field(j, "d", where), where + ".d");
  if (j.contains("epilogue")) {
    const json& steps = j.at("epilogue");
    if (!steps.is_array()) throw std::invalid_argument(where + ".epilogue: expected an array");
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::string at = where + ".epilogue[" + std::to_string(i) + "]";
      EpilogueStep step;
      step.kind = enum_from(string_field(steps[i], "kind", at), kKinds, epilogue_kind_name, at);
      if (step.kind == EpilogueStep::Kind::Activation) {
        auto act = parse_activation(string_field(steps[i], "activation", at));
        if (!act) throw std::invalid_argument(at + ".activation: unknown activation");
        step.activation = *act;
      }
      step.value = number_field(steps[i], "value", at, 1.0);
      step.p0 = number_field(steps[i], "p0", at, 0.0);
      step.p1 = number_field(steps[i], "p1", at, 0.0);
      step.operand = steps[i].value("operand", std::string());
      step.operand_dtype = dtype_field(steps[i], "operand_dtype", at);
      p.epilogue.push_back(std::move(step));
    }
  }
  return p;
}

json match_to_json(const Match& m) {
  json gemms = json::array();
  for (const auto& g : m.gemms) gemms.push_back(gemm_problem_to_json(g));
  return {{"rule", m.rule},
          {"pattern", m.pattern},
          {"status", match_status_name(m.status)},
          {"reason", m.reason},
          {"classification", classification_name(m.classification)},
          {"nodes", m.nodes},
          {"roles", m.roles},
          {"dtype", graph::dtype_name(m.dtype)},
          {"gemms", std::move(gemms)},
          {"extra", m.extra},
          {"est_before_us", number(m.est_before_us)},
          {"est_after_us", number(m.est_after_us)},
          {"est_saved_us", number(m.est_saved_us())}};
}

Match match_from_json(const json& j) {
  const std::string where = "match";
  Match m;
  m.rule = string_field(j, "rule", where);
  m.pattern = string_field(j, "pattern", where);
  m.status = enum_from(string_field(j, "status", where), kStatuses, match_status_name,
                       where + ".status");
  m.reason = j.value("reason", std::string());
  if (j.contains("classification"))
    m.classification = enum_from(string_field(j, "classification", where), kClassifications,
                                 classification_name, where + ".classification");
  if (j.contains("nodes")) m.nodes = j.at("nodes").get<std::vector<graph::NodeId>>();
  if (j.contains("roles")) m.roles = j.at("roles").get<std::map<std::string, graph::ValueId>>();
  m.dtype = dtype_field(j, "dtype", where);
  if (j.contains("gemms")) {
    for (const auto& g : j.at("gemms")) m.gemms.push_back(gemm_problem_from_json(g));
  }
  if (j.contains("extra")) m.extra = j.at("extra");
  m.est_before_us = number_field(j, "est_before_us", where, 0.0);
  m.est_after_us = number_field(j, "est_after_us", where, 0.0);
  return m;
}

}  // namespace fact::discover
