#include "fact/realize/tune_report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "fact/util/atomic_file.hpp"

namespace fact::realize {
namespace fs = std::filesystem;

namespace {

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string scientific(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.2e", value);
  return buffer;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    quoted += c;
    if (c == '"') quoted += '"';
  }
  return quoted + "\"";
}

std::string markdown_cell(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::string escaped;
  for (char c : text) {
    if (c == '|') escaped += '\\';
    escaped += c;
  }
  if (escaped.size() > 160) escaped = escaped.substr(0, 160) + "...";
  return escaped;
}

// Ok rows fastest first, then the rest in space order.
std::vector<const CandidateOutcome*> report_order(const TuneResult& result) {
  std::vector<const CandidateOutcome*> rows;
  for (const auto& c : result.candidates) rows.push_back(&c);
  std::stable_sort(rows.begin(), rows.end(), [](const CandidateOutcome* a, const CandidateOutcome* b) {
    bool a_ok = a->status == CandidateStatus::Ok && a->ms, b_ok = b->status == CandidateStatus::Ok && b->ms;
    if (a_ok != b_ok) return a_ok;
    if (a_ok) return a->ms->median < b->ms->median;
    return false;
  });
  return rows;
}

}  // namespace

const BaselineMeasurement* reference_baseline(const TuneResult& result) {
  const BaselineMeasurement* chosen = nullptr;
  for (const auto& b : result.baselines) {
    if (b.status != "ok" || !b.ms) continue;
    if (!chosen || (b.fused && !chosen->fused)) chosen = &b;
  }
  return chosen;
}

std::string format_tune_table(const TuneResult& result) {
  const BaselineMeasurement* baseline = reference_baseline(result);
  std::ostringstream table;
  table << "| config | status | ms (median) | TFLOP/s | vs " << (baseline ? baseline->name : "baseline")
        << " | rel_err | reason |\n|---|---|---|---|---|---|---|\n";
  for (const CandidateOutcome* c : report_order(result)) {
    table << "| " << (c->best ? "**" + c->config + "** ★" : c->config) << " | " << candidate_status_name(c->status)
          << " | " << (c->ms ? fixed(c->ms->median, 4) : "") << " | " << (c->tflops ? fixed(*c->tflops, 1) : "")
          << " | " << (c->ms && baseline ? fixed(*baseline->ms / c->ms->median, 2) + "x" : "") << " | "
          << (c->rel_err ? scientific(*c->rel_err) : "") << " | " << markdown_cell(c->reason) << " |\n";
  }
  return table.str();
}

TuneReportFiles write_tune_report(const TuneResult& result, const fs::path& dir) {
  fs::create_directories(dir);
  std::string stem = "tune-" + result.problem_name();
  TuneReportFiles files;
  files.markdown = dir / (stem + ".md");
  files.csv = dir / (stem + ".csv");
  files.json = dir / (stem + ".json");

  std::ostringstream md;
  md << "# Tuning " << result.problem_name() << "\n\n"
     << "- problem: " << problem_summary(result.problem) << ", precision "
     << core::precision_name(result.precision) << "\n"
     << "- key: `" << result.key.id() << "`\n"
     << "- origin: " << result.origin << " (" << result.candidates.size() << " configuration(s), "
     << fixed(result.seconds, 1) << " s)\n"
     << "- device: " << result.device.value("name", std::string("unknown")) << "\n";
  if (result.best) {
    md << "- best: " << result.best->config << " — " << (result.best->ms ? fixed(result.best->ms->median, 4) : "?")
       << " ms";
    auto in_table = std::find_if(result.candidates.begin(), result.candidates.end(),
                                 [](const CandidateOutcome& c) { return c.best; });
    if (!result.baselines.empty() && in_table != result.candidates.end() && in_table->ms && result.best->ms &&
        in_table->ms->median != result.best->ms->median) {
      md << " in the run with the baselines (" << fixed(in_table->ms->median, 4) << " ms in the sweep)";
    }
    md << "\n";
  } else {
    md << "- best: none (no configuration verified)\n";
  }
  for (const auto& b : result.baselines) {
    md << "- baseline " << b.name << ": " << b.status;
    if (b.ms) md << ", " << fixed(*b.ms, 4) << " ms";
    if (b.rel_err) md << ", rel_err " << scientific(*b.rel_err);
    if (!b.computes.empty()) md << ", computes " << b.computes << (b.fused ? " (fused)" : "");
    if (!b.error.empty()) md << " (" << b.error << ")";
    md << "\n";
  }
  for (const auto& note : result.notes) md << "- note: " << note << "\n";
  md << "\n" << format_tune_table(result);

  std::ostringstream csv;
  csv << "index,config,status,ms_median,ms_p10,ms_p90,tflops,rel_err,best,compile_seconds,reason\n";
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const auto& c = result.candidates[i];
    csv << i << "," << csv_field(c.config) << "," << candidate_status_name(c.status) << ","
        << (c.ms ? fixed(c.ms->median, 6) : "") << "," << (c.ms ? fixed(c.ms->p10, 6) : "") << ","
        << (c.ms ? fixed(c.ms->p90, 6) : "") << "," << (c.tflops ? fixed(*c.tflops, 3) : "") << ","
        << (c.rel_err ? scientific(*c.rel_err) : "") << "," << (c.best ? 1 : 0) << "," << fixed(c.compile_seconds, 2)
        << "," << csv_field(c.reason) << "\n";
  }
  util::write_file_atomically(files.csv, csv.str());
  util::write_file_atomically(files.json, result.to_json().dump(2) + "\n");

  bool plottable = std::any_of(result.candidates.begin(), result.candidates.end(),
                               [](const CandidateOutcome& c) { return c.ms.has_value(); });
  if (result.origin == "database" || result.origin == "bucket") {
    files.plot_note = "stored choice reused: no sweep to plot (the sweep's own report has the data)";
  } else if (!plottable) {
    files.plot_note = "no configuration was timed: nothing to plot";
  } else {
    files.plot_command = tune_plot_command(files.json);
    files.plot_note = "`" + files.plot_command + "` draws every configuration's time (" +
                      fs::path(files.json).replace_extension(".png").filename().string() + ")";
  }
  md << "\nPlot: " << files.plot_note << "\n";
  util::write_file_atomically(files.markdown, md.str());
  return files;
}

std::string tune_plot_command(const fs::path& json) { return "python -m fact.plots " + json.string(); }

}  // namespace fact::realize
