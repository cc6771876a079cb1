// Instantiation: type choices only (logic in patterns/attention/attention_entry.cuh).
#include "patterns/attention/attention_entry.cuh"

using Cfg = fact::attention::F32Config</*head_dim=*/80, /*block_m=*/64, /*block_n=*/64, /*causal=*/true, /*products=*/3>;
FACT_ATTENTION_INSTANCE(attn_f32_d80_causal_m64n64_3xtf32, "attn_f32_d80_causal_m64n64_3xtf32", Cfg)
