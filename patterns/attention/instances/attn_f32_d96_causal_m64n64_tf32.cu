// Instantiation: type choices only (logic in patterns/attention/attention_entry.cuh).
#include "patterns/attention/attention_entry.cuh"

using Cfg = fact::attention::F32Config</*head_dim=*/96, /*block_m=*/64, /*block_n=*/64, /*causal=*/true, /*products=*/1>;
FACT_ATTENTION_INSTANCE(attn_f32_d96_causal_m64n64_tf32, "attn_f32_d96_causal_m64n64_tf32", Cfg)
