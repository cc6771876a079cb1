// Host access to one element of an ABI tensor (FactDType: f32, f64, f16, bf16), for the kinds'
// float64 host references (patterns/*/kind/reference_host.cpp).
#pragma once
#include <cstdint>

namespace fact {

// The element at `index` of `base` as a double; NaN for an unknown dtype.
double load_abi_element(const void* base, int64_t index, int32_t dtype);
// Stores `value` rounded once, to nearest even, into the element at `index` (f16 and bf16 are
// rounded from the double directly, never through float); an unknown dtype stores nothing.
void store_abi_element(void* base, int64_t index, int32_t dtype, double value);
// True for the dtypes above.
bool known_abi_dtype(int32_t dtype);

}  // namespace fact
