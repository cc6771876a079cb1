// Reports of a tuning run: a Markdown table (every configuration with status, time, TFLOP/s
// and speed against the baseline, excluded ones with their reason), the same as CSV and JSON,
// and, for the `fact tune` and `fact bench` commands, a scatter plot of every configuration's time
// with the winner starred, drawn by bench/plot_tune.py when python3 with matplotlib is available.
// The engine's plan (make_plan) starts no script: `fact optimize` draws the same scatter in its
// report stage (python/fact/plots.py).
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fact/realize/tuner.hpp"

namespace fact::realize {

struct TuneReportFiles {
  std::filesystem::path markdown, csv, json;
  std::optional<std::filesystem::path> plot;  // absent when it could not be drawn
  std::string plot_note;                      // why not, when absent
};

// The baseline that ratios are computed against: the fused cuBLASLt one when it ran fine,
// else the first one that ran fine; nullptr when none did.
const BaselineMeasurement* reference_baseline(const TuneResult& result);

// The Markdown table (ok rows fastest first, then the excluded ones).
std::string format_tune_table(const TuneResult& result);

// How write_tune_report treats the scatter plot: draw it (bench/plot_tune.py, a child process)
// or leave it to the caller's report (the note says so).
enum class TunePlot { draw, left_to_report };

// Writes tune-<problem>.{md,csv,json} (and .png when asked and possible) into `dir`.
TuneReportFiles write_tune_report(const TuneResult& result, const std::filesystem::path& dir,
                                  TunePlot plot = TunePlot::draw);

// Runs `<python> <FACT source>/bench/<script> args...` (util::python_interpreter(): $FACT_PYTHON,
// else FACT's environment; $FACT_SOURCE_DIR overrides the source folder). Returns nullopt on success, else why not
// (no python, no matplotlib, script failed).
std::optional<std::string> run_plot_script(const std::string& script, const std::vector<std::string>& args);

}  // namespace fact::realize
