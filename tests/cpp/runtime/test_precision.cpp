#include <gtest/gtest.h>

#include "fact/runtime/precision.hpp"

namespace fact::runtime {
namespace {

using graph::DType;
using realize::KernelSpec;
using realize::MathMode;

KernelSpec spec_of(DType operands, MathMode math, DType out = DType::Float32) {
  KernelSpec spec;
  spec.a_dtype = spec.b_dtype = operands;
  spec.d_dtype = out;
  spec.math = math;
  return spec;
}

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

TEST(Precision, StrictAcceptsOnlyFloat32AccurateMath) {
  EXPECT_FALSE(precision_mismatch(spec_of(DType::Float32, MathMode::Tf32x3), PrecisionMode::Strict));
  EXPECT_FALSE(precision_mismatch(spec_of(DType::Float32, MathMode::Simt), PrecisionMode::Strict));
  const auto tf32 = precision_mismatch(spec_of(DType::Float32, MathMode::Tf32), PrecisionMode::Strict);
  ASSERT_TRUE(tf32);
  EXPECT_NE(tf32->find("tf32"), std::string::npos);
  EXPECT_TRUE(precision_mismatch(spec_of(DType::BFloat16, MathMode::Native), PrecisionMode::Strict));
}

TEST(Precision, Tf32AcceptsTf32AndStricter) {
  for (MathMode m : {MathMode::Tf32, MathMode::Tf32x3, MathMode::Simt}) {
    EXPECT_FALSE(precision_mismatch(spec_of(DType::Float32, m), PrecisionMode::Tf32));
  }
  EXPECT_TRUE(precision_mismatch(spec_of(DType::Float32, MathMode::Native), PrecisionMode::Tf32));
  EXPECT_TRUE(precision_mismatch(spec_of(DType::Float16, MathMode::Native), PrecisionMode::Tf32));
}

TEST(Precision, NativeIsForHalfOperands) {
  EXPECT_FALSE(precision_mismatch(spec_of(DType::BFloat16, MathMode::Native, DType::BFloat16),
                                  PrecisionMode::Native));
  EXPECT_FALSE(precision_mismatch(spec_of(DType::Float16, MathMode::Native), PrecisionMode::Native));
  EXPECT_TRUE(precision_mismatch(spec_of(DType::Float32, MathMode::Tf32), PrecisionMode::Native));
  EXPECT_TRUE(precision_mismatch(spec_of(DType::BFloat16, MathMode::Tf32), PrecisionMode::Native));
}

TEST(Precision, HalfAccumulationIsRejectedEverywhere) {
  KernelSpec spec = spec_of(DType::Float16, MathMode::Native, DType::Float16);
  spec.accumulate = DType::Float16;
  const auto why = precision_mismatch(spec, PrecisionMode::Native);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("accumulat"), std::string::npos);
}

}  // namespace
}  // namespace fact::runtime
