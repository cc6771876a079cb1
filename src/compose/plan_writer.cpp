#include "fact/compose/plan_writer.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "fact/build_info.hpp"
#include "fact/problem/operand_transform.hpp"
#include "fact/problem/problem.hpp"
#include "fact/core/fact_abi.h"

namespace fact::compose {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string input_kind(graph::ValueKind kind) {
  switch (kind) {
    case graph::ValueKind::Parameter: return "parameter";
    case graph::ValueKind::Buffer: return "buffer";
    case graph::ValueKind::Constant: return "constant";
    case graph::ValueKind::Input:
    case graph::ValueKind::Intermediate: return "activation";
  }
  return "activation";
}

// The values the captured nodes `nodes` produce.
std::set<graph::ValueId> produced_by(const graph::Graph& captured, const std::vector<graph::NodeId>& nodes) {
  std::set<graph::ValueId> produced;
  for (const auto& id : nodes) {
    if (const graph::Node* node = captured.node(id)) produced.insert(node->outputs.begin(), node->outputs.end());
  }
  return produced;
}

// The values the captured nodes of a match read from outside them, in first-read order.
json replacement_inputs(const graph::Graph& captured, const std::vector<graph::NodeId>& nodes) {
  const std::set<graph::NodeId> region(nodes.begin(), nodes.end());
  std::set<graph::ValueId> produced, seen;
  for (const auto& id : nodes) {
    if (const graph::Node* node = captured.node(id)) produced.insert(node->outputs.begin(), node->outputs.end());
  }
  json inputs = json::array();
  auto add = [&](const graph::ValueId& value) {
    if (produced.count(value) || !seen.insert(value).second || !captured.has_value(value)) return;
    const graph::Value& v = captured.value(value);
    json entry = {{"value", value}, {"kind", input_kind(v.kind)}};
    if (!v.target.empty()) entry["target"] = v.target;
    inputs.push_back(std::move(entry));
  };
  for (const auto& node : captured.nodes()) {
    if (!region.count(node.id)) continue;
    for (const auto& arg : node.args) {
      if (arg.kind == graph::Arg::Kind::Tensor) add(arg.tensor);
      if (arg.kind == graph::Arg::Kind::TensorList) {
        for (const auto& entry : arg.tensors) {
          if (entry) add(*entry);
        }
      }
    }
    for (const auto& [name, arg] : node.kwargs) {
      if (arg.kind == graph::Arg::Kind::Tensor) add(arg.tensor);
    }
  }
  return inputs;
}

std::string library_path(const fs::path& library, const fs::path& plan_dir) {
  if (library.empty()) return "";
  if (!plan_dir.empty()) {
    std::error_code ec;
    const fs::path relative = fs::relative(library, plan_dir, ec);
    if (!ec && !relative.empty() && relative.native().rfind("..", 0) != 0) return relative.string();
  }
  return fs::absolute(library).string();
}

size_t first_position(const graph::Graph& captured, const discover::Match& m) {
  size_t best = captured.nodes().size();
  for (size_t i = 0; i < captured.nodes().size(); ++i) {
    if (std::find(m.nodes.begin(), m.nodes.end(), captured.nodes()[i].id) != m.nodes.end()) {
      best = std::min(best, i);
      break;
    }
  }
  return best;
}

std::string status_text(discover::MatchStatus s) { return std::string(discover::match_status_name(s)); }

}  // namespace

bool selected(const discover::Match& match, const std::optional<std::vector<std::string>>& patterns) {
  if (!patterns) return true;
  return std::find(patterns->begin(), patterns->end(), match.rule) != patterns->end() ||
         std::find(patterns->begin(), patterns->end(), match.pattern) != patterns->end();
}

json make_plan(const graph::Graph& captured, const discover::Discovery& discovery,
               const realize::RealizeResult& realized, const PlanContext& context) {
  std::map<std::pair<size_t, size_t>, const realize::RealizedCall*> call_of;
  for (const auto& call : realized.calls) call_of[{call.match, call.call}] = &call;

  json kernels = json::object();
  for (const auto& k : realized.kernels) {
    json entry = {{"name", k.kernel.spec.name()},
                  {"kind", k.kernel.spec.kind()},
                  {"pattern", k.kernel.spec.pattern()},
                  {"entry", k.kernel.entry_symbol},
                  {"library", library_path(k.library, context.plan_dir)},
                  {"status", k.status}};
    if (!k.reason.empty()) entry["reason"] = k.reason;
    kernels[k.kernel.key] = std::move(entry);
  }

  std::vector<size_t> order(discovery.matches.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return first_position(captured, discovery.matches[a]) < first_position(captured, discovery.matches[b]);
  });

  json replacements = json::array();
  size_t planned = 0;
  for (size_t index : order) {
    const discover::Match& m = discovery.matches[index];
    const std::string label = std::to_string(index + 1);  // the discovery table's number
    json r = {{"id", index},
              {"label", label},
              {"rule", m.rule},
              {"pattern", m.pattern},
              {"status", status_text(m.status)},
              {"reason", m.reason},
              {"classification", discover::classification_name(m.classification)},
              {"nodes", m.nodes},
              {"inputs", replacement_inputs(captured, m.nodes)},
              {"outputs", m.outputs},
              {"est_before_us", m.est_before_us},
              {"est_after_us", m.est_after_us},
              {"calls", json::array()}};
    // What the pattern wants a reader to know about how the match runs (e.g. "K padded
    // 5921→5924").
    if (m.extra.contains("note") && m.extra["note"].is_string()) r["note"] = m.extra["note"];
    if (m.status == discover::MatchStatus::Accepted && !selected(m, context.patterns)) {
      r["status"] = "declined";
      r["reason"] = "not selected (patterns given)";
    }
    const bool plan_calls = r["status"] == "accepted";
    std::string failure;
    // Derived operands (operand_transform.hpp): checked against the captured graph, their
    // sources listed among the inputs.
    std::map<graph::ValueId, const DerivedOperand*> derived_of;
    if (!m.derived.empty()) {
      json derived = json::array();
      for (const auto& d : m.derived) {
        derived_of[d.value] = &d;
        derived.push_back(derived_to_json(d));
        if (!plan_calls) continue;
        try {
          check_derived(d, captured);
        } catch (const std::exception& e) {
          if (failure.empty()) failure = e.what();
        }
        for (const auto& source : d.from) {
          const bool listed = std::any_of(r["inputs"].begin(), r["inputs"].end(),
                                          [&](const json& in) { return in.at("value") == source; });
          if (listed || !captured.has_value(source)) continue;
          const graph::Value& v = captured.value(source);
          json entry = {{"value", source}, {"kind", input_kind(v.kind)}};
          if (!v.target.empty()) entry["target"] = v.target;
          r["inputs"].push_back(std::move(entry));
        }
      }
      r["derived"] = std::move(derived);
    }
    for (size_t c = 0; c < m.problems.size(); ++c) {
      const Problem& problem = m.problems[c];
      json call = {{"kind", problem.kind},
                   {"label", m.problems.size() > 1 ? label + static_cast<char>('a' + c) : label},
                   {"problem", problem_to_json(problem)}};
      try {
        const ProblemKind& kind = kind_of(problem);
        call["summary"] = problem_summary(problem);
        call["flops"] = kind.flops(problem.desc);
        call["min_bytes"] = kind.min_bytes(problem.desc);
        call["tolerance"] = kind.tolerance(problem.desc, context.precision);
        if (plan_calls) {
          const auto found = call_of.find({index, c});
          const realize::RealizedCall* realized_call = found == call_of.end() ? nullptr : found->second;
          if (realized_call == nullptr) {
            if (failure.empty()) failure = "call " + call["label"].get<std::string>() + ": not realized";
          } else if (!realized_call->error.empty()) {
            if (failure.empty()) failure = "call " + call["label"].get<std::string>() + ": " + realized_call->error;
          } else {
            call["kernel"] = realized_call->kernel_key;
            const realize::RealizedKernel* kernel = realized.kernel(realized_call->kernel_key);
            if (kernel) call["config"] = kernel->kernel.spec.name();
            call["config_source"] = realized_call->config_source;
            if (!realized_call->tuning_key.empty()) call["tuning_key"] = realized_call->tuning_key;
            if (!realized_call->kernel_class.empty()) call["kernel_class"] = realized_call->kernel_class;
            if (!realized_call->tuned.is_null()) call["tuned"] = realized_call->tuned;
          }
          nlohmann::json image = kind.pack(problem.desc, captured).to_json();
          // Each operand's shape and strides as the captured graph has them, for the executor's
          // checks (a call's own intermediate results have none).
          for (auto& operand : image.at("operands")) {
            const std::string value = operand.at("value").get<std::string>();
            if (const auto found = derived_of.find(value); found != derived_of.end()) {
              operand["shape"] = found->second->shape;
              operand["stride"] = found->second->stride();
              continue;
            }
            if (!captured.has_value(value)) continue;
            operand["shape"] = captured.value(value).desc.shape;
            operand["stride"] = captured.value(value).desc.stride;
            // A graph value the call reads that no replaced node reads nor produces (a norm
            // folded into its projections: the GEMM reads the pre-norm x) is an input too.
            const bool listed = std::any_of(r["inputs"].begin(), r["inputs"].end(),
                                            [&](const json& in) { return in.at("value") == value; });
            if (!listed && !produced_by(captured, m.nodes).count(value)) {
              const graph::Value& v = captured.value(value);
              json entry = {{"value", value}, {"kind", input_kind(v.kind)}};
              if (!v.target.empty()) entry["target"] = v.target;
              r["inputs"].push_back(std::move(entry));
            }
          }
          call.update(image);
        }
      } catch (const std::exception& e) {
        if (failure.empty()) failure = "call " + call["label"].get<std::string>() + ": " + e.what();
      }
      r["calls"].push_back(std::move(call));
    }
    if (plan_calls) {
      if (failure.empty()) {
        r["status"] = "planned";
        ++planned;
      } else {
        r["status"] = "failed";
        r["reason"] = failure;
      }
    }
    replacements.push_back(std::move(r));
  }

  json notes = context.notes;
  return {{"schema", kPlanSchema},
          {"abi_version", FACT_ABI_VERSION},
          {"fact_version", build_info::kVersion},
          {"precision", context.precision},
          {"device", context.device},
          {"inputs", context.inputs},
          {"status", "planned"},
          {"reason", planned == 0 ? "no replacement could be planned (see replacements)" : ""},
          {"capture", context.capture},
          {"patterns", context.patterns ? json(*context.patterns) : json(nullptr)},
          {"kernels", std::move(kernels)},
          {"replacements", std::move(replacements)},
          {"notes", std::move(notes)}};
}

}  // namespace fact::compose
