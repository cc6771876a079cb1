#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fact/core/precision.hpp"

namespace fact::core {
namespace {

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

TEST(Precision, JsonSpellsTheName) {
  const nlohmann::json j = PrecisionMode::Tf32;
  EXPECT_EQ(j, "tf32");
  EXPECT_EQ(nlohmann::json("native").get<PrecisionMode>(), PrecisionMode::Native);
  EXPECT_THROW(nlohmann::json("fast").get<PrecisionMode>(), std::invalid_argument);
}

TEST(Precision, DefaultModeFollowsTheDtype) {
  EXPECT_EQ(default_precision(DType::BFloat16), PrecisionMode::Native);
  EXPECT_EQ(default_precision(DType::Float16), PrecisionMode::Native);
  EXPECT_EQ(default_precision(DType::Float32), PrecisionMode::Strict);
}

TEST(Precision, ThreeTf32HasOneSpellingAndReadsTheOldOne) {
  EXPECT_EQ(precision_info(PrecisionMode::Strict).float32_math, "3xtf32");
  EXPECT_TRUE(is_three_tf32("3xtf32"));
  EXPECT_TRUE(is_three_tf32("tf32x3"));  // files written before the spelling was settled
  EXPECT_FALSE(is_three_tf32("tf32"));
}

// The GEMM kind's precision_mismatch is tested with the GEMM runtime
// (patterns/gemm/tests/test_runtime_gemm_case.cpp).

}  // namespace
}  // namespace fact::core
