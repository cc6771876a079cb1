#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "fact/runtime/timing_stats.hpp"

namespace fact::runtime {
namespace {

TEST(TimingStats, PercentileInterpolatesBetweenRanks) {
  const std::vector<double> sorted = {1.0, 2.0, 3.0, 4.0, 5.0};
  EXPECT_DOUBLE_EQ(percentile(sorted, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(sorted, 50), 3.0);
  EXPECT_DOUBLE_EQ(percentile(sorted, 100), 5.0);
  EXPECT_DOUBLE_EQ(percentile(sorted, 10), 1.4);
  EXPECT_DOUBLE_EQ(percentile(sorted, 90), 4.6);
  EXPECT_DOUBLE_EQ(percentile({7.0}, 37), 7.0);
  EXPECT_THROW(percentile({}, 50), std::invalid_argument);
  EXPECT_THROW(percentile(sorted, 101), std::invalid_argument);
}

TEST(TimingStats, SummarizeSortsAndCounts) {
  const TimingStats s = summarize({4.0, 1.0, 3.0, 2.0});
  EXPECT_EQ(s.runs, 4);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 4.0);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.p10, 1.3);
  EXPECT_DOUBLE_EQ(s.p90, 3.7);
}

TEST(TimingStats, SummarizeRejectsBadSamples) {
  EXPECT_THROW(summarize({}), std::invalid_argument);
  EXPECT_THROW(summarize({1.0, -0.5}), std::invalid_argument);
  EXPECT_THROW(summarize({1.0, std::numeric_limits<double>::quiet_NaN()}), std::invalid_argument);
  EXPECT_THROW(summarize({std::numeric_limits<double>::infinity()}), std::invalid_argument);
}

TEST(TimingStats, TflopsFromMilliseconds) {
  // 2·4096³ FLOPs in 1 ms = 137.4 TFLOP/s.
  EXPECT_NEAR(tflops_per_s(2.0 * 4096.0 * 4096.0 * 4096.0, 1.0), 137.438953472, 1e-9);
  EXPECT_EQ(tflops_per_s(1e12, 0.0), 0.0);
}

TEST(TimingStats, JsonRoundTrip) {
  const TimingStats s = summarize({0.5, 0.7, 0.6, 0.9, 0.55});
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j.at("runs").get<int>(), 5);
  EXPECT_DOUBLE_EQ(j.at("median").get<double>(), 0.6);
  EXPECT_EQ(timing_stats_from_json(j), s);
  nlohmann::json missing = j;
  missing.erase("p90");
  EXPECT_THROW(timing_stats_from_json(missing), nlohmann::json::exception);
}

}  // namespace
}  // namespace fact::runtime
