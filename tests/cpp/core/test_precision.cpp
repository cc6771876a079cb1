#include <gtest/gtest.h>

#include "fact/runtime/precision.hpp"

namespace fact::runtime {
namespace {

using graph::DType;

TEST(Precision, NamesRoundTrip) {
  for (PrecisionMode m : {PrecisionMode::Strict, PrecisionMode::Tf32, PrecisionMode::Native}) {
    EXPECT_EQ(parse_precision(precision_name(m)), m);
  }
  EXPECT_EQ(precision_name(PrecisionMode::Tf32), "tf32");
  EXPECT_THROW(parse_precision("fp32"), std::invalid_argument);
  EXPECT_THROW(parse_precision(""), std::invalid_argument);
}

TEST(Precision, ToleranceIsModeBoundRaisedByHalfOutput) {
  EXPECT_DOUBLE_EQ(tolerance_for(PrecisionMode::Strict, DType::Float32), 1e-5);
  EXPECT_DOUBLE_EQ(tolerance_for(PrecisionMode::Tf32, DType::Float32), 5e-3);
  EXPECT_DOUBLE_EQ(tolerance_for(PrecisionMode::Native, DType::Float32), 1e-4);
  EXPECT_DOUBLE_EQ(tolerance_for(PrecisionMode::Native, DType::BFloat16), 2e-2);
  EXPECT_DOUBLE_EQ(tolerance_for(PrecisionMode::Native, DType::Float16), 2e-2);
  EXPECT_DOUBLE_EQ(tolerance_for(PrecisionMode::Strict, DType::BFloat16), 2e-2);
}

// The GEMM kind's precision_mismatch is tested with the GEMM runtime
// (patterns/gemm/tests/test_runtime_gemm_case.cpp).

}  // namespace
}  // namespace fact::runtime
