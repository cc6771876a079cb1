// Instantiation: type choices only (logic in patterns/attention/attention_entry.cuh).
#include "patterns/attention/attention_entry.cuh"

using Cfg = fact::attention::F32Config</*head_dim=*/128, /*block_m=*/128, /*block_n=*/64, /*causal=*/true, /*products=*/3>;
FACT_ATTENTION_INSTANCE(attn_f32_d128_causal_m128n64_3xtf32, "attn_f32_d128_causal_m128n64_3xtf32", Cfg)
