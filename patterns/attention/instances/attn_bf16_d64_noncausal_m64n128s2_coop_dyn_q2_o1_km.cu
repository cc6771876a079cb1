// Instantiation: type choices only (logic in patterns/attention/attention_entry.cuh).
#include "patterns/attention/attention_entry.cuh"

using Cfg = fact::attention::Config<cutlass::bfloat16_t, /*head_dim=*/64, /*block_m=*/64, /*block_n=*/128, /*stages=*/2,
                                    /*causal=*/false, /*dynamic_schedule=*/true, /*persistent=*/true,
                                    /*q_stages=*/2, /*l2_percent=*/40,
                                    /*tile_order=*/1, /*o_alias_q=*/false, /*tile_head_dim=*/0,
                                    /*key_mask=*/true>;
FACT_ATTENTION_INSTANCE(attn_bf16_d64_noncausal_m64n128s2_coop_dyn_q2_o1_km, "attn_bf16_d64_noncausal_m64n128s2_coop_dyn_q2_o1_km", Cfg)
