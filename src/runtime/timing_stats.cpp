#include "fact/runtime/timing_stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace fact::runtime {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("percentile of no samples");
  if (!(q >= 0.0 && q <= 100.0)) throw std::invalid_argument("percentile outside [0, 100]");
  const double rank = q / 100.0 * double(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - double(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

TimingStats summarize(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("no timing samples to summarize");
  for (double s : samples) {
    if (!std::isfinite(s) || s < 0.0) {
      throw std::invalid_argument("timing sample is negative or not finite");
    }
  }
  std::sort(samples.begin(), samples.end());
  TimingStats stats;
  stats.runs = static_cast<int64_t>(samples.size());
  stats.min = samples.front();
  stats.max = samples.back();
  stats.median = percentile(samples, 50.0);
  stats.p10 = percentile(samples, 10.0);
  stats.p90 = percentile(samples, 90.0);
  stats.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / double(samples.size());
  return stats;
}

double tflops_per_s(double flops, double ms) {
  if (!(ms > 0.0)) return 0.0;
  return flops / (ms * 1e-3) / 1e12;
}

nlohmann::json to_json(const TimingStats& s) {
  return {{"median", s.median}, {"min", s.min}, {"p10", s.p10}, {"p90", s.p90},
          {"max", s.max},       {"mean", s.mean}, {"runs", s.runs}};
}

TimingStats timing_stats_from_json(const nlohmann::json& j) {
  TimingStats s;
  s.median = j.at("median").get<double>();
  s.min = j.at("min").get<double>();
  s.p10 = j.at("p10").get<double>();
  s.p90 = j.at("p90").get<double>();
  s.max = j.at("max").get<double>();
  s.mean = j.at("mean").get<double>();
  s.runs = j.at("runs").get<int64_t>();
  return s;
}

}  // namespace fact::runtime
