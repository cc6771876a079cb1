#include <gtest/gtest.h>

#include "fact/core/dtype.hpp"
#include "fact/core/fact_subgraph_abi.h"
#include "fact/core/status_names.hpp"

namespace fact::core {
namespace {

TEST(DType, EverySpellingParses) {
  for (const char* text : {"bfloat16", "torch.bfloat16", "bf16"}) EXPECT_EQ(parse_dtype(text), DType::BFloat16) << text;
  for (const char* text : {"float16", "fp16", "f16", "half", "torch.half"}) EXPECT_EQ(parse_dtype(text), DType::Float16) << text;
  for (const char* text : {"float32", "fp32", "f32", "float"}) EXPECT_EQ(parse_dtype(text), DType::Float32) << text;
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::Unknown);
  EXPECT_EQ(parse_dtype(""), DType::Unknown);
}

TEST(DType, NamesAndLabelsRoundTrip) {
  for (const auto& entry : dtype_table()) {
    if (entry.dtype == DType::Unknown) continue;
    EXPECT_EQ(parse_dtype(dtype_name(entry.dtype)), entry.dtype) << entry.name;
    EXPECT_EQ(parse_dtype(dtype_label(entry.dtype)), entry.dtype) << entry.label;
  }
  EXPECT_EQ(dtype_label(DType::Float16), "fp16");
  EXPECT_EQ(dtype_name(DType::BFloat16), "bfloat16");
}

TEST(DType, AbiValuesAreTheHeaders) {
  EXPECT_EQ(to_fact_dtype(DType::Float32), FACT_DTYPE_F32);
  EXPECT_EQ(to_fact_dtype(DType::Float16), FACT_DTYPE_F16);
  EXPECT_EQ(to_fact_dtype(DType::BFloat16), FACT_DTYPE_BF16);
  EXPECT_EQ(to_fact_dtype(DType::Float64), FACT_DTYPE_F64);
  EXPECT_EQ(to_fact_dtype(DType::Int32), FACT_DTYPE_NONE);
  EXPECT_EQ(dtype_info(DType::Int64).subgraph_abi, FACT_SUBGRAPH_DTYPE_I64);
  EXPECT_EQ(dtype_info(DType::Bool).subgraph_abi, FACT_SUBGRAPH_DTYPE_BOOL);
  for (int32_t abi : {FACT_DTYPE_F32, FACT_DTYPE_F16, FACT_DTYPE_BF16, FACT_DTYPE_F64}) {
    EXPECT_EQ(to_fact_dtype(from_fact_dtype(abi)), abi);
  }
  EXPECT_EQ(from_fact_dtype(FACT_DTYPE_NONE), DType::Unknown);
  EXPECT_EQ(from_fact_dtype(77), DType::Unknown);
  EXPECT_EQ(dtype_bytes(DType::BFloat16), 2);
}

TEST(StatusNames, OneNamePerStatus) {
  EXPECT_EQ(status_name(FACT_OK), "FACT_OK");
  EXPECT_EQ(status_name(FACT_ERR_CANNOT_IMPLEMENT), "FACT_ERR_CANNOT_IMPLEMENT");
  EXPECT_EQ(status_name(FACT_ERR_INTERNAL), "FACT_ERR_INTERNAL");
  EXPECT_EQ(status_name(42), "FACT_STATUS_42");
  EXPECT_TRUE(known_status_name(42).empty());
}

}  // namespace
}  // namespace fact::core
