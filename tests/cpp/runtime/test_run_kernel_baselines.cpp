// `fact run-kernel`'s baseline names are the problem kind's (ProblemKind::baselines()): an
// unknown name, or a baseline-only run of a kind that registers none, is an error before any
// device is touched (so these run without a GPU).
#include <gtest/gtest.h>

#include "fact/runtime/run_kernel.hpp"

namespace fact::runtime {
namespace {

RunKernelOptions baseline_only(const std::string& problem, std::vector<std::string> baselines) {
  RunKernelOptions o;
  o.kind = problem.find("m=") == 0 ? "gemm" : "attention";
  o.baseline_only = true;
  o.problem = problem;
  o.problem_words = {{"dtype", "bf16"}};
  o.precision = core::PrecisionMode::Native;
  o.baselines = std::move(baselines);
  return o;
}

TEST(RunKernelBaselines, UnknownNameIsAnErrorNamingTheKindsBaselines) {
  const RunReport r = run_kernel(baseline_only("m=64,n=64,k=64", {"cublas", "torch"}));
  EXPECT_EQ(r.status, RunStatus::Error);
  EXPECT_NE(r.error.find("unknown baseline 'torch' for kind 'gemm' (expected cublas, cublaslt)"), std::string::npos)
      << r.error;
}

TEST(RunKernelBaselines, AKindWithoutBaselinesCannotRunThemAlone) {
  const RunReport r = run_kernel(baseline_only("b=1,h=2,s=64,d=64", {}));
  EXPECT_EQ(r.status, RunStatus::Error);
  EXPECT_NE(r.error.find("registers no baselines"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace fact::runtime
