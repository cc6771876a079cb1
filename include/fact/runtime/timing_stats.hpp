// Summary statistics of repeated timings (milliseconds), independent of how they were taken.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace fact::runtime {

struct TimingStats {
  double median = 0, min = 0, p10 = 0, p90 = 0, max = 0, mean = 0;
  int64_t runs = 0;
  bool operator==(const TimingStats&) const = default;
};

// Percentile `q` in [0, 100] of `sorted` (ascending, non-empty) with linear interpolation
// between closest ranks (numpy's default). Throws std::invalid_argument on empty input or q
// outside [0, 100].
double percentile(const std::vector<double>& sorted, double q);

// Summarizes `samples` (any order). Throws std::invalid_argument when empty or when a sample
// is negative or not finite.
TimingStats summarize(std::vector<double> samples);

// TFLOP/s of `flops` floating-point operations done in `ms` milliseconds (0 when ms <= 0).
double tflops_per_s(double flops, double ms);

// {"median": .., "min": .., "p10": .., "p90": .., "max": .., "mean": .., "runs": ..}
nlohmann::json to_json(const TimingStats& stats);
// Inverse of to_json; throws nlohmann::json::exception when a key is missing.
TimingStats timing_stats_from_json(const nlohmann::json& j);

}  // namespace fact::runtime
