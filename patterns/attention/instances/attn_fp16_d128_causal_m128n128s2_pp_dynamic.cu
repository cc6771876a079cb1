// Instantiation: type choices only (logic in patterns/attention/attention_entry.cuh).
#include "patterns/attention/attention_entry.cuh"

using Cfg = fact::attention::Config<cutlass::half_t, /*head_dim=*/128, /*block_m=*/128, /*block_n=*/128, /*stages=*/2,
                                    /*causal=*/true, /*pingpong=*/true, /*dynamic_schedule=*/true, /*persistent=*/true>;
FACT_ATTENTION_INSTANCE(attn_fp16_d128_causal_m128n128s2_pp_dynamic, "attn_fp16_d128_causal_m128n128s2_pp_dynamic", Cfg)
