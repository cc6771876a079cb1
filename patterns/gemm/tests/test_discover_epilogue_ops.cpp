// Discovery of the activations the GEMM epilogue's op table (patterns/gemm/epilogue/ops.def)
// lists aten targets for: each target after a linear becomes the GEMM's activation step, and an
// op whose further arguments differ from the table's constants stays outside the GEMM.
#include <gtest/gtest.h>

#include <algorithm>

#include "fact/discover/discover.hpp"
#include "fact/util/words.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using graph::DType;
using graph::GraphBuilder;
using testing::describe;
using testing::gemms;
using testing::linear;
using testing::unary;

TEST(EpilogueOpTableDiscover, EveryAtenTargetOfAnActivationIsFused) {
  int checked = 0;
  for (const ActivationOp& op : kActivationOps) {
    for (const std::string& target : util::split_words(op.aten_targets)) {
      if (target.back() == '_') continue;  // in-place forms: the capture functionalizes them
      SCOPED_TRACE(target);
      GraphBuilder b(DType::BFloat16, "cuda:0");
      auto x = b.input("x", {4, 16, 256});
      auto w = b.parameter("w", {512, 256});
      auto bias = b.parameter("bias", {512});
      auto out = unary(b, target + ".default", linear(b, x, w, bias));
      const Discovery d = discover(b.finish({out}));
      ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
      EXPECT_EQ(d.matches[0].rule, "gemm_bias_" + std::string(op.name));
      ASSERT_EQ(gemms(d.matches[0]).size(), 1u);
      EXPECT_EQ(gemms(d.matches[0])[0].epilogue.back().activation, op.activation);
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);
}

}  // namespace
}  // namespace fact::discover
