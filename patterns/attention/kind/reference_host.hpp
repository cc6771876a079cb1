// The attention kind's float64 host reference: what every attention kernel computes, from the
// same FactAttentionArgs with host pointers. Used by fact::launch on the CPU (through
// fact_reference_call) and by tests. Reads Q, K, V as stored (`dtype`: f32, f64, f16, bf16),
// computes scores, softmax and the weighted sum in double, rounds once to O's type (nearest
// even); a query row that sees no key gets O = 0 (and LSE = -inf), as the kernel does.
#pragma once
#include "patterns/attention/attention_abi.h"

namespace fact::attention {

// FACT_OK, or FACT_ERR_INVALID_ARGS for a malformed struct (header, sizes, GQA group, mask
// kind, dtype, null pointers, negative strides).
int reference_attention_host(const FactAttentionArgs& args);

}  // namespace fact::attention
