#include "fact/discover/match.hpp"

#include <array>
#include <stdexcept>

#include "fact/util/json_fields.hpp"

namespace fact::discover {

namespace {

using nlohmann::json;
using util::dtype_field;
using util::number;
using util::number_field;
using util::string_field;

template <typename Enum, size_t N>
Enum enum_from(const std::string& name, const std::array<Enum, N>& all,
               std::string_view (*namer)(Enum), const std::string& where) {
  for (Enum e : all) {
    if (namer(e) == name) return e;
  }
  throw std::invalid_argument(where + ": unknown name '" + name + "'");
}

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

json match_to_json(const Match& m) {
  json problems = json::array();
  for (const auto& p : m.problems) problems.push_back(problem_to_json(p));
  json out = {{"rule", m.rule},
          {"pattern", m.pattern},
          {"status", match_status_name(m.status)},
          {"reason", m.reason},
          {"classification", classification_name(m.classification)},
          {"classification_reason", m.classification_reason},
          {"registry_entry", m.registry_entry},
          {"nodes", m.nodes},
          {"roles", m.roles},
          {"outputs", m.outputs},
          {"dtype", graph::dtype_name(m.dtype)},
          {"problems", std::move(problems)},
          {"extra", m.extra},
          {"est_before_us", number(m.est_before_us)},
          {"est_after_us", number(m.est_after_us)},
          {"est_saved_us", number(m.est_saved_us())}};
  if (!m.derived.empty()) {
    json derived = json::array();
    for (const auto& d : m.derived) derived.push_back(derived_to_json(d));
    out["derived"] = std::move(derived);
  }
  return out;
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
  m.classification_reason = j.value("classification_reason", std::string());
  m.registry_entry = j.value("registry_entry", std::string());
  if (j.contains("nodes")) m.nodes = j.at("nodes").get<std::vector<graph::NodeId>>();
  if (j.contains("roles")) m.roles = j.at("roles").get<std::map<std::string, graph::ValueId>>();
  if (j.contains("outputs")) m.outputs = j.at("outputs").get<std::vector<graph::ValueId>>();
  m.dtype = dtype_field(j, "dtype", where);
  if (j.contains("problems")) {
    const json& problems = j.at("problems");
    if (!problems.is_array()) throw std::invalid_argument(where + ".problems: expected an array");
    for (const auto& p : problems) m.problems.push_back(problem_from_json(p));
  }
  if (j.contains("derived")) {
    const json& derived = j.at("derived");
    if (!derived.is_array()) throw std::invalid_argument(where + ".derived: expected an array");
    for (const auto& d : derived) m.derived.push_back(derived_from_json(d));
  }
  if (j.contains("extra")) m.extra = j.at("extra");
  m.est_before_us = number_field(j, "est_before_us", where, 0.0);
  m.est_after_us = number_field(j, "est_after_us", where, 0.0);
  return m;
}

}  // namespace fact::discover
