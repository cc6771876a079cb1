// Instantiation: type choices only (logic in patterns/attention/attention_entry.cuh).
#define FACT_ATTN_Q_FIRST 1  // experiment: Q before the tile's first K (L2 share 41: a distinct Config type)
#include "patterns/attention/attention_entry.cuh"

using Cfg = fact::attention::Config<cutlass::bfloat16_t, /*head_dim=*/96, /*block_m=*/128, /*block_n=*/128, /*stages=*/2,
                                    /*causal=*/true, /*pingpong=*/false, /*dynamic_schedule=*/true, /*persistent=*/true,
                                    /*defer_pv_wait=*/false, /*q_stages=*/2, /*l2_percent=*/41,
                                    /*tile_order=*/1, /*o_alias_q=*/false, /*tile_head_dim=*/128>;
FACT_ATTENTION_INSTANCE(attn_bf16_d96_causal_m128n128s2_coop_dyn_q2_o1_t128_qf, "attn_bf16_d96_causal_m128n128s2_coop_dyn_q2_o1_t128_qf", Cfg)
