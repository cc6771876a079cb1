// The GEMM pattern's benchmark suites (`fact bench gemm`, `fact bench gemm-models`): registered
// under their names, and every case a problem the registered realizers take, with at least one
// configuration of the default space left after pruning (the whole models' GEMM calls include
// GPT-2's unaligned vocabulary, N = 50257, which the padding rule lets every aligned kernel run).
#include <algorithm>

#include <gtest/gtest.h>

#include "fact/realize/bench_suite.hpp"
#include "fact/realize/realizer_source.hpp"

namespace fact::gemm {
namespace {

TEST(GemmBenchSuites, BothSuitesAreRegistered) {
  const std::vector<std::string> names = realize::bench_suite_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "gemm"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "gemm-models"), names.end());
}

TEST(GemmBenchSuites, EveryWholeModelGemmCallHasConfigurationsToTune) {
  const realize::BenchSuite suite = realize::bench_suite("gemm-models");
  EXPECT_EQ(suite.name, "gemm-models");
  ASSERT_EQ(suite.cases.size(), 17u);
  realize::RealizerSource source;
  for (const realize::BenchSuiteCase& c : suite.cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.precision, "native");
    EXPECT_EQ(c.problem.kind, "gemm");
    EXPECT_NE(std::find(c.baselines.begin(), c.baselines.end(), "cublas"), c.baselines.end());
    const realize::KernelSpec problem_class = source.problem_class(c.problem, core::PrecisionMode::Native);
    const realize::ParamSpace space = source.candidates(problem_class, c.problem, "default");
    EXPECT_FALSE(space.candidates.empty()) << "pruned: "
        << (space.pruned.empty() ? std::string("nothing") : space.pruned.front().reason);
  }
}

}  // namespace
}  // namespace fact::gemm
