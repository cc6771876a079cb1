// Deep-K GEMMs (few output tiles, long K) through the tuner's path: the registered space of the
// problem's class, cut with spread_selection as `fact tune --max-candidates` does, keeps split-K
// and stream-K candidates.
#include <algorithm>

#include <gtest/gtest.h>

#include "fact/realize/realizer_source.hpp"
#include "fact/realize/tuner.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {
namespace {

std::vector<GemmSpec> cut_space(int64_t m, int64_t n, int64_t k, const char* dtype, const char* precision,
                                size_t max_candidates) {
  realize::RealizerSource source;
  const Problem problem = to_problem(make_gemm_problem({m, n, k, 1}, parse_operand_dtype(dtype), "", "tn"));
  const realize::ParamSpace space =
      source.candidates(source.problem_class(problem, core::parse_precision(precision)), problem, "default");
  std::vector<GemmSpec> cut;
  for (const auto& spec : realize::spread_selection(
           space.candidates, max_candidates,
           [&](const realize::KernelSpec& s) { return source.family(s); })) {
    cut.push_back(GemmSpec::of(spec));
  }
  return cut;
}

bool has_split_of_at_least(const std::vector<GemmSpec>& specs, int splits) {
  return std::any_of(specs.begin(), specs.end(), [&](const GemmSpec& s) {
    return s.scheduler == TileScheduler::StreamK && s.split_k >= splits;
  });
}

bool has_stream_k(const std::vector<GemmSpec>& specs) {
  return std::any_of(specs.begin(), specs.end(), [](const GemmSpec& s) {
    return s.scheduler == TileScheduler::StreamK && s.split_k == 1;
  });
}

TEST(DeepKSpaceCut, FourCandidatesKeepDeepSplitKAndStreamK) {
  for (auto [dtype, precision] : {std::pair{"bf16", "native"}, std::pair{"fp32", "tf32"}}) {
    auto cut = cut_space(256, 256, 524288, dtype, precision, 4);
    ASSERT_EQ(cut.size(), 4u) << dtype;
    EXPECT_TRUE(has_split_of_at_least(cut, 16)) << dtype;
    EXPECT_TRUE(has_stream_k(cut)) << dtype;
    EXPECT_TRUE(std::any_of(cut.begin(), cut.end(),
                            [](const GemmSpec& s) { return s.scheduler == TileScheduler::Persistent; }))
        << dtype;
    auto two = cut_space(256, 256, 524288, dtype, precision, 2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_TRUE(has_split_of_at_least(two, 16)) << dtype;
    EXPECT_TRUE(has_stream_k(two)) << dtype;
  }
}

TEST(DeepKSpaceCut, ShallowKKeepsItsDataParallelLead) {
  auto cut = cut_space(256, 256, 4096, "bf16", "native", 4);
  ASSERT_EQ(cut.size(), 4u);
  EXPECT_FALSE(has_split_of_at_least(cut, 8));
  EXPECT_EQ(cut.front().scheduler, TileScheduler::Persistent);
}

}  // namespace
}  // namespace fact::gemm
