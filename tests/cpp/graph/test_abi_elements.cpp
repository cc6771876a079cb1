// Host element access of the ABI dtypes (fact/problem/abi_elements.hpp), shared by the kinds'
// float64 host references.
#include <cmath>
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include "fact/problem/abi_elements.hpp"
#include "fact/core/fact_abi.h"

namespace fact {
namespace {

uint16_t stored(int32_t dtype, double value) {
  uint16_t bits = 0;
  store_abi_element(&bits, 0, dtype, value);
  return bits;
}

TEST(AbiElements, SixteenBitStoresRoundOnceFromTheDouble) {
  // 1 + 2^-8 + 2^-30 lies just above the midpoint between the bf16 neighbours 1 and 1 + 2^-7;
  // rounded through float it would become the midpoint and tie to 1.
  EXPECT_EQ(stored(FACT_DTYPE_BF16, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3F81u);
  EXPECT_EQ(stored(FACT_DTYPE_BF16, 1.0 + std::ldexp(1.0, -8)), 0x3F80u);  // a tie: to even
  // The same for f16 (spacing 2^-10 at 1).
  EXPECT_EQ(stored(FACT_DTYPE_F16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3C01u);
  EXPECT_EQ(stored(FACT_DTYPE_F16, 1.0 + std::ldexp(1.0, -11)), 0x3C00u);
  EXPECT_EQ(stored(FACT_DTYPE_F16, 1e6), 0x7C00u);
  EXPECT_EQ(stored(FACT_DTYPE_BF16, -0.0), 0x8000u);
}

TEST(AbiElements, LoadsWhatWasStored) {
  for (const int32_t dtype : {FACT_DTYPE_F16, FACT_DTYPE_BF16, FACT_DTYPE_F32, FACT_DTYPE_F64}) {
    double buffer[1] = {0};
    store_abi_element(buffer, 0, dtype, -1.5);
    EXPECT_EQ(load_abi_element(buffer, 0, dtype), -1.5) << dtype;
  }
  double unknown = 0;
  EXPECT_TRUE(std::isnan(load_abi_element(&unknown, 0, 99)));
  EXPECT_FALSE(known_abi_dtype(99));
  EXPECT_TRUE(known_abi_dtype(FACT_DTYPE_BF16));
}

}  // namespace
}  // namespace fact
