// The softplus activation (one ops.def entry and one formula): PyTorch's semantics (beta 1,
// threshold 20) in the float64 reference, its names and ABI id, packing, and discovery from
// aten.softplus after a linear (only with PyTorch's default beta and threshold).
#include <gtest/gtest.h>

#include <cmath>

#include "fact/discover/discover.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/kind/reference_host.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::gemm {
namespace {

double softplus_by_hand(double x) { return x > 20.0 ? x : std::log(1.0 + std::exp(x)); }

TEST(EpilogueSoftplus, ReferenceIsPyTorchsSoftplus) {
  const ActivationOp* op = find_activation_op("softplus");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->abi_id, FACT_ACT_SOFTPLUS);
  EXPECT_EQ(FACT_ACT_SOFTPLUS, 9);
  for (double x : {-30.0, -5.0, -1e-3, 0.0, 0.5, 3.0, 19.999, 20.0, 20.001, 50.0}) {
    SCOPED_TRACE(x);
    EXPECT_NEAR(op->reference(x, 0.0, 0.0), softplus_by_hand(x), 1e-15 * std::max(1.0, std::fabs(x)));
    EXPECT_EQ(ops::activate<double>(FACT_ACT_SOFTPLUS, x, 0.0, 0.0), op->reference(x, 0.0, 0.0));
  }
  EXPECT_EQ(op->reference(20.5, 0.0, 0.0), 20.5);  // above the threshold: x itself
  EXPECT_GT(op->reference(-40.0, 0.0, 0.0), 0.0);   // log1p keeps the tail
}

TEST(EpilogueSoftplus, JsonCliAndPacking) {
  const GemmProblem p = make_gemm_problem(parse_gemm_sizes("m=64,n=128,k=32"), graph::DType::BFloat16,
                                          "bias,softplus", "tn");
  ASSERT_EQ(p.epilogue.size(), 2u);
  EXPECT_EQ(p.epilogue[1].kind, EpilogueStep::Kind::Activation);
  EXPECT_EQ(p.epilogue[1].activation, Activation::Softplus);
  EXPECT_EQ(p.fusion_name(), "gemm_bias_softplus");
  const nlohmann::json j = gemm_problem_to_json(p);
  EXPECT_EQ(j["epilogue"][1]["activation"], "softplus");
  EXPECT_EQ(gemm_problem_from_json(j).epilogue[1].activation, Activation::Softplus);
  const FactGemmArgs args = gemm_args(p);
  EXPECT_EQ(args.steps[1].kind, FACT_STEP_ACTIVATION);
  EXPECT_EQ(args.steps[1].activation, FACT_ACT_SOFTPLUS);
}

TEST(EpilogueSoftplus, HostReferenceGemm) {
  GemmProblem p = make_gemm_problem(parse_gemm_sizes("m=3,n=4,k=2"), graph::DType::Float32, "softplus", "tn");
  std::vector<float> a = {1, 2, -3, 4, 10, 12}, b = {1, 0, 0, 1, -1, 1, 0.5f, 0.5f}, d(12);
  FactGemmArgs args = gemm_args(p);
  args.a = a.data();
  args.b = b.data();
  args.d = d.data();
  ASSERT_EQ(reference_gemm_host(args), FACT_OK);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      const double x = double(a[i * 2]) * b[j * 2] + double(a[i * 2 + 1]) * b[j * 2 + 1];
      EXPECT_FLOAT_EQ(d[i * 4 + j], float(softplus_by_hand(x))) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace fact::gemm

namespace fact::discover {
namespace {

using graph::C;
using graph::DType;
using graph::GraphBuilder;
using testing::gemms;
using testing::linear;
using testing::unary;

Discovery linear_then(const std::string& target, std::vector<graph::Arg> extra) {
  GraphBuilder b(DType::BFloat16, "cuda:0");
  auto x = b.input("x", {4, 16, 256});
  auto w = b.parameter("w", {512, 256});
  auto bias = b.parameter("bias", {512});
  return discover(b.finish({unary(b, target, linear(b, x, w, bias), extra)}));
}

TEST(EpilogueSoftplus, DiscoveredFromAtenSoftplusWithPyTorchsDefaults) {
  for (const auto& extra : std::vector<std::vector<graph::Arg>>{{}, {C(1.0)}, {C(1.0), C(20.0)}}) {
    const Discovery d = linear_then("aten.softplus.default", extra);
    ASSERT_EQ(d.matches.size(), 1u) << testing::describe(d.matches);
    EXPECT_EQ(d.matches[0].rule, "gemm_bias_softplus");
    EXPECT_EQ(gemms(d.matches[0])[0].epilogue.back().activation, gemm::Activation::Softplus);
  }
}

TEST(EpilogueSoftplus, OtherBetaOrThresholdStaysOutside) {
  for (const auto& extra : std::vector<std::vector<graph::Arg>>{{C(2.0)}, {C(1.0), C(10.0)}}) {
    const Discovery d = linear_then("aten.softplus.default", extra);
    for (const Match& m : d.matches) EXPECT_NE(m.rule, "gemm_bias_softplus") << testing::describe(d.matches);
  }
}

}  // namespace
}  // namespace fact::discover
