// Reports of a tuning run: a Markdown table (every configuration with status, time, TFLOP/s
// and speed against the baseline, excluded ones with their reason), the same as CSV and JSON.
// The engine writes data only and starts no script: the scatter plot of every configuration's
// time is drawn by the Python package (`python -m fact.plots tune-<problem>.json`, the command the
// Markdown names), and `fact optimize` draws the same scatter in its report (python/fact/plots.py).
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fact/realize/tuner.hpp"

namespace fact::realize {

struct TuneReportFiles {
  std::filesystem::path markdown, csv, json;
  std::string plot_command;  // the command that draws the scatter plot; empty when there is nothing to plot
  std::string plot_note;     // what the Markdown says about the plot (the command, or why there is none)
};

// The baseline that ratios are computed against: the fused cuBLASLt one when it ran fine,
// else the first one that ran fine; nullptr when none did.
const BaselineMeasurement* reference_baseline(const TuneResult& result);

// The Markdown table (ok rows fastest first, then the excluded ones).
std::string format_tune_table(const TuneResult& result);

// Writes tune-<problem>.{md,csv,json} into `dir`.
TuneReportFiles write_tune_report(const TuneResult& result, const std::filesystem::path& dir);

// The command that draws a tuning run's scatter plot beside its JSON (tune-<problem>.png):
// "python -m fact.plots <json>".
std::string tune_plot_command(const std::filesystem::path& json);

}  // namespace fact::realize
