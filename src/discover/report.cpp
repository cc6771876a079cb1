#include "fact/discover/report.hpp"

#include <sstream>
#include <stdexcept>

#include "fact/util/table.hpp"

namespace fact::discover {

namespace {

using util::format_fixed;
using util::Table;

std::string nodes_cell(const Match& m) {
  if (m.nodes.empty()) return "-";
  if (m.nodes.size() == 1) return m.nodes.front();
  return m.nodes.front() + ".." + m.nodes.back() + " (" + std::to_string(m.nodes.size()) + ")";
}

std::string dtype_cell(const Match& m) {
  std::string cell(graph::dtype_label(m.dtype));
  const std::string math = m.extra.value("math", std::string());
  if (core::is_three_tf32(math)) cell += " (3xTF32)";
  if (math == "tf32") cell += " (TF32)";
  return cell;
}

std::string shape_cell(const Match& m) {
  if (m.problems.size() == 1) return kind_of(m.problems.front()).shape(m.problems.front().desc);
  if (m.problems.size() > 1) return std::to_string(m.problems.size()) + " kernels";
  return "-";
}

// Estimated savings below this print as 0.0 µs.
constexpr double kNoSavingUs = 0.05;

bool accepted_without_saving(const Match& m) {
  return m.status == MatchStatus::Accepted && m.est_saved_us() < kNoSavingUs;
}

std::string status_cell(const Match& m) {
  switch (m.status) {
    case MatchStatus::Accepted: return accepted_without_saving(m) ? "accepted (no est. saving: note)" : "accepted";
    case MatchStatus::Pending:
      // A pending or declined match the registry holds a kernel for is realized by that kernel.
      return m.registry_entry.empty() ? "pending: " + m.reason : "registry kernel (no template)";
    case MatchStatus::Declined:
      return m.registry_entry.empty() ? "declined (below)" : "registry kernel (template declined, below)";
  }
  return "";
}

struct Totals {
  double before = 0.0, after = 0.0;
  int accepted = 0;
};

Totals accepted_totals(const Discovery& d) {
  Totals t;
  for (const auto& m : d.matches) {
    if (m.status != MatchStatus::Accepted) continue;
    t.before += m.est_before_us;
    t.after += m.est_after_us;
    ++t.accepted;
  }
  return t;
}

}  // namespace

std::string classification_legend(const DiscoverOptions& options) {
  std::ostringstream out;
  if (options.registry.empty()) {
    out << "REUSE = a tuned configuration for this exact problem is in the tuning database (built as is); "
        << "ADAPT = a FACT template covers it, built for this shape and epilogue (default configuration, "
        << "tuned on a GPU); NEW = no template yet (reported, left to PyTorch).";
  } else {
    out << "REUSE = an entry of the pattern registry covers it as is (a kernel verified on this exact "
        << "subgraph and shape, or a template with a tuned configuration for every call); ADAPT = an entry covers "
        << "it with new parameters (a template without stored tuning, or a kernel verified on other shapes: the "
        << "gates run again); NEW = nothing in the registry realizes it (left to PyTorch, or to an agent: fact "
        << "optimize --agent, fact mcp). Registry " << options.registry << " on " << options.arch << ".";
  }
  return out.str();
}

std::string discovery_legend(const DiscoverOptions& options) {
  std::ostringstream out;
  out << "before/after/saved µs: PyTorch's time for the covered nodes, FACT's kernel(s), their "
      << "difference; roofline estimates from the device profile (" << options.device.name
      << "), not measurements.\n"
      << "class: " << classification_legend(options)
      << (options.registry.empty() ? "" : " Why, per match: below.") << "\n";
  return out.str();
}

std::string discovery_markdown(const Discovery& d) {
  std::ostringstream out;
  if (d.matches.empty()) return "No matches.\n";
  out << "| # | match | pattern | nodes covered | shape | dtype | before µs | after µs | saved µs | class | status |\n"
      << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < d.matches.size(); ++i) {
    const Match& m = d.matches[i];
    const bool declined = m.status == MatchStatus::Declined;
    std::string status = accepted_without_saving(m) ? "accepted (no est. saving: see *How to read*)"
                         : m.status == MatchStatus::Accepted ? "accepted"
                         : !m.registry_entry.empty() ? "registry kernel"
                         : std::string(match_status_name(m.status)) + " (see *Left to PyTorch*)";
    out << "| " << (i + 1) << " | " << m.rule << " | " << m.pattern << " | " << nodes_cell(m) << " | "
        << shape_cell(m) << " | " << dtype_cell(m) << " | " << format_fixed(m.est_before_us, 1) << " | "
        << (declined ? "-" : format_fixed(m.est_after_us, 1)) << " | "
        << (declined ? "-" : format_fixed(m.est_saved_us(), 1)) << " | " << classification_name(m.classification)
        << " | " << status << " |\n";
    if (m.problems.size() > 1) {
      for (size_t k = 0; k < m.problems.size(); ++k) {
        const ProblemKind& kind = kind_of(m.problems[k]);
        out << "| " << (i + 1) << static_cast<char>('a' + k) << " | " << kind.fusion(m.problems[k].desc)
            << " | | | " << kind.shape(m.problems[k].desc) << " | | | | | | |\n";
      }
    }
  }
  const Totals t = accepted_totals(d);
  out << "\nAccepted: " << t.accepted << " of " << d.matches.size() << " matches, est. "
      << format_fixed(t.before, 1) << " µs → " << format_fixed(t.after, 1) << " µs (saved "
      << format_fixed(t.before - t.after, 1) << " µs";
  if (t.after > 0) out << ", " << format_fixed(t.before / t.after, 2) << "x on the covered nodes";
  out << ").\n";
  bool first_note = true;
  for (size_t i = 0; i < d.matches.size(); ++i) {
    const Match& m = d.matches[i];
    if (m.status != MatchStatus::Accepted || !m.extra.contains("note") || !m.extra["note"].is_string()) continue;
    out << (first_note ? "\n" : "") << "- #" << (i + 1) << " " << m.rule << ": "
        << m.extra["note"].get<std::string>() << "\n";
    first_note = false;
  }
  return out.str();
}

std::string discovery_table(const Discovery& d, const graph::Graph& captured,
                            const DiscoverOptions& options) {
  std::ostringstream out;
  out << "FACT discover: " << captured.source.value("module", std::string("graph")) << " ("
      << captured.source.value("capture", std::string("?")) << "), " << captured.nodes().size()
      << " captured nodes -> " << d.canonical.nodes().size() << " canonical; precision "
      << core::precision_name(options.precision) << "; device " << options.device.name << "\n\n";
  if (d.matches.empty()) {
    out << "no matches\n";
    return out.str();
  }
  Table table({{"#", Table::Align::Right},
               {"match"},
               {"pattern"},
               {"nodes covered"},
               {"shape"},
               {"dtype"},
               {"before µs", Table::Align::Right},
               {"after µs", Table::Align::Right},
               {"saved µs", Table::Align::Right},
               {"class"},
               {"status"}});
  for (size_t i = 0; i < d.matches.size(); ++i) {
    const Match& m = d.matches[i];
    const bool declined = m.status == MatchStatus::Declined;
    table.add_row({std::to_string(i + 1), m.rule, m.pattern, nodes_cell(m), shape_cell(m),
                   dtype_cell(m), format_fixed(m.est_before_us, 1),
                   declined ? "-" : format_fixed(m.est_after_us, 1),
                   declined ? "-" : format_fixed(m.est_saved_us(), 1),
                   std::string(classification_name(m.classification)), status_cell(m)});
    if (m.problems.size() > 1) {
      for (size_t k = 0; k < m.problems.size(); ++k) {
        const std::string label = std::to_string(i + 1) + static_cast<char>('a' + k);
        const ProblemKind& kind = kind_of(m.problems[k]);
        table.add_row({label, "  " + kind.fusion(m.problems[k].desc), "", "",
                       kind.shape(m.problems[k].desc)});
      }
    }
  }
  out << table.render();
  const Totals t = accepted_totals(d);
  out << "\naccepted: " << t.accepted << " of " << d.matches.size() << " matches, est. "
      << format_fixed(t.before, 1) << " µs -> " << format_fixed(t.after, 1) << " µs (saved "
      << format_fixed(t.before - t.after, 1) << " µs";
  if (t.after > 0) out << ", " << format_fixed(t.before / t.after, 2) << "x on the covered nodes";
  out << ")\n";
  out << discovery_legend(options);
  std::string ties;
  for (size_t i = 0; i < d.matches.size(); ++i) {
    if (accepted_without_saving(d.matches[i])) ties += (ties.empty() ? "#" : ", #") + std::to_string(i + 1);
  }
  if (!ties.empty()) {
    out << "note: " << ties << " save(s) no time by the estimate: FACT's kernel and PyTorch's reach the same "
        << "roofline (nothing is fused that PyTorch does not fuse already). Accepted so that a measurement "
        << "decides: on a GPU, tuning times FACT's kernel against cuBLAS/cuBLASLt in the same run, and the "
        << "composed module falls back to torch.compile of the original unless it is faster.\n";
  }
  for (size_t i = 0; i < d.matches.size(); ++i) {
    const Match& m = d.matches[i];
    if (m.status != MatchStatus::Accepted || !m.extra.contains("note") || !m.extra["note"].is_string()) continue;
    out << "note #" << (i + 1) << " " << m.rule << ": " << m.extra["note"].get<std::string>() << "\n";
  }
  for (size_t i = 0; i < d.matches.size(); ++i) {
    const Match& m = d.matches[i];
    if (m.status != MatchStatus::Declined) continue;
    out << "declined #" << (i + 1) << " " << m.rule << " [" << nodes_cell(m) << "]: " << m.reason
        << "\n";
  }
  if (!options.registry.empty()) {
    for (size_t i = 0; i < d.matches.size(); ++i) {
      const Match& m = d.matches[i];
      if (m.classification_reason.empty()) continue;
      out << "#" << (i + 1) << " " << classification_name(m.classification) << " " << m.rule << ": "
          << m.classification_reason << "\n";
    }
  }
  return out.str();
}

nlohmann::json discovery_to_json(const Discovery& d, const graph::Graph& captured,
                                 const DiscoverOptions& options) {
  nlohmann::json matches = nlohmann::json::array();
  for (const auto& m : d.matches) matches.push_back(match_to_json(m));
  const Totals t = accepted_totals(d);
  return {{"schema", "fact.discovery/1"},
          {"source", captured.source},
          {"precision", options.precision},
          {"device", device_profile_to_json(options.device)},
          {"captured_nodes", captured.nodes().size()},
          {"canonical_nodes", d.canonical.nodes().size()},
          {"matches", std::move(matches)},
          {"totals", {{"accepted", t.accepted},
                      {"est_before_us", t.before},
                      {"est_after_us", t.after},
                      {"est_saved_us", t.before - t.after}}}};
}

}  // namespace fact::discover
