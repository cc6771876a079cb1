// Instantiation: type choices only (logic in patterns/attention/attention_entry.cuh).
#include "patterns/attention/attention_entry.cuh"

using Cfg = fact::attention::Config<cutlass::bfloat16_t, /*head_dim=*/96, /*block_m=*/128, /*block_n=*/64, /*stages=*/4,
                                    /*causal=*/true, /*dynamic_schedule=*/true, /*persistent=*/true,
                                    /*q_stages=*/2, /*l2_percent=*/40,
                                    /*tile_order=*/1, /*o_alias_q=*/true, /*tile_head_dim=*/128>;
FACT_ATTENTION_INSTANCE(attn_bf16_d96_causal_m128n64s4_coop_dyn_q2_o1_oq_t128, "attn_bf16_d96_causal_m128n64s4_coop_dyn_q2_o1_oq_t128", Cfg)
