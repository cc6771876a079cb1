/* The `attention` kind's argument struct (kernel C ABI v2, docs/abi.md).
 *
 *   O[b, i, h, :] = softmax_j(scale * Q[b, i, h, :] . K[b, j, h / g, :] + mask(i, j)) V[b, j, h / g, :]
 *
 * with g = heads / kv_heads (grouped-query attention; g = 1 is multi-head attention).
 *
 * Every operand is addressed by a base pointer and element strides for batch, sequence and head;
 * the head dimension is contiguous (stride 1). So Q, K and V can be read in place from a fused
 * QKV projection's output ([B, T, 3, H, D], or [B, T, 3*H*D] split in three: seq stride 3*H*D,
 * head stride D, K = Q + H*D, V = Q + 2*H*D) and O written as merged heads [B, T, H, D] (seq
 * stride H*D), the layout the output projection reads. No copies.
 *
 * Masks (`causal`):
 *   FACT_ATTN_MASK_NONE                 every key is visible.
 *   FACT_ATTN_MASK_CAUSAL_TOP_LEFT      query i sees keys j <= i: torch's `is_causal=True` and a
 *                                       tril(ones(L, S)) mask, also when seq_q != seq_k.
 *   FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT  query i sees keys j <= i + seq_k - seq_q (FlashAttention's
 *                                       alignment: the last query sees every key).
 * Both are the same when seq_q == seq_k. A query row that sees no key (only possible bottom-right
 * with seq_q > seq_k) gets O = 0 and LSE = -inf.
 * `window` > 0 (a causal mask only; Mistral's and Phi-3's sliding window): query i sees only the
 * `window` newest of those keys, i + off - window < j <= i + off (off = 0 top-left, seq_k - seq_q
 * bottom-right). 0: no window. This word was `reserved` (always 0) before, so a library built
 * before windows refuses a window with FACT_ERR_INVALID_ARGS instead of ignoring it.
 *
 * Key masks (`key_mask`, may be NULL; with FACT_ATTN_MASK_NONE only): a boolean mask shared by
 * every query and head, such as a padding mask. Key j of batch entry b is visible iff
 * (key_mask[b*key_mask_batch_stride + j*key_mask_seq_stride] != 0) == key_mask_keep, the strides
 * in elements (bytes: one byte per element), 0 to broadcast. key_mask_keep 1: visible where true
 * (SDPA's boolean attn_mask); 0: hidden where true (masked_fill's mask). A row whose keys are all
 * hidden gets O = 0 and LSE = -inf. A kernel is built with or without a key mask (its spec's
 * "key_mask") and answers FACT_ERR_CANNOT_IMPLEMENT for the other. These words follow
 * `sm_count`, so a library built before them sees another `header.size` and refuses the call.
 *
 * `lse` (may be NULL): float32 log-sum-exp of each query row, natural log, including `scale`:
 * lse[b*lse_batch_stride + h*lse_head_stride + i]; the sequence stride is 1.
 *
 * `dtype` (FactDType) is the element type of Q, K, V and O: a kernel is built for one (bf16 or
 * fp16, fact_kernel_info's spec) and answers FACT_ERR_INVALID_ARGS for another; the host reference
 * (patterns/attention/kind/reference_host.hpp) reads and writes any of f32, f64, f16, bf16.
 * Pointers are device pointers (host pointers for the host reference); head dims are fixed by the
 * kernel and checked in can_implement.
 */
#ifndef FACT_ATTENTION_ABI_H
#define FACT_ATTENTION_ABI_H
#include <stddef.h>
#include <stdint.h>

#include "fact/runtime/fact_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FACT_ATTENTION_KIND_NAME "attention"

typedef enum FactAttentionMask {
  FACT_ATTN_MASK_NONE = 0,
  FACT_ATTN_MASK_CAUSAL_TOP_LEFT = 1,
  FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT = 2,
} FactAttentionMask;

typedef struct FactAttentionArgs {
  FactCallHeader header; /* kind = fact_kind_id("attention"), size = sizeof(FactAttentionArgs) */
  int32_t batch;
  int32_t heads;         /* query heads */
  int32_t kv_heads;      /* key/value heads; heads % kv_heads == 0 */
  int32_t seq_q;
  int32_t seq_k;
  int32_t head_dim;      /* of Q and K */
  int32_t v_head_dim;    /* of V and O */
  int32_t causal;        /* FactAttentionMask */
  int32_t dtype;         /* FactDType of Q, K, V and O */
  int32_t window;        /* causal sliding window (0: none); see "Masks" */
  const void* q; int64_t q_batch_stride, q_seq_stride, q_head_stride; /* elements */
  const void* k; int64_t k_batch_stride, k_seq_stride, k_head_stride;
  const void* v; int64_t v_batch_stride, v_seq_stride, v_head_stride;
  void* o;       int64_t o_batch_stride, o_seq_stride, o_head_stride;
  float* lse;    int64_t lse_batch_stride, lse_head_stride;            /* NULL: not written */
  float scale;           /* softmax scale, usually 1/sqrt(head_dim) */
  int32_t sm_count;      /* SMs a persistent kernel may use; 0 = all of the device's */
  const void* key_mask;  /* NULL: none; see "Key masks" */
  int64_t key_mask_batch_stride, key_mask_seq_stride;  /* elements (one byte each) */
  int32_t key_mask_keep; /* 1: visible where true; 0: hidden where true */
  int32_t key_mask_reserved; /* 0 */
} FactAttentionArgs;

#ifdef __cplusplus
}  /* extern "C" */
/* The layout is part of the ABI: mirrors (ctypes in bench_attention.py, the engine's tests) check it. */
static_assert(sizeof(FactAttentionArgs) == 248, "FactAttentionArgs layout changed: update every mirror");
static_assert(offsetof(FactAttentionArgs, key_mask) == 216, "FactAttentionArgs layout changed");
static_assert(offsetof(FactAttentionArgs, key_mask_keep) == 240, "FactAttentionArgs layout changed");
static_assert(offsetof(FactAttentionArgs, dtype) == 48, "FactAttentionArgs layout changed");
static_assert(offsetof(FactAttentionArgs, q) == 56, "FactAttentionArgs layout changed");
static_assert(offsetof(FactAttentionArgs, k) == 88, "FactAttentionArgs layout changed");
static_assert(offsetof(FactAttentionArgs, v) == 120, "FactAttentionArgs layout changed");
static_assert(offsetof(FactAttentionArgs, o) == 152, "FactAttentionArgs layout changed");
static_assert(offsetof(FactAttentionArgs, lse) == 184, "FactAttentionArgs layout changed");
static_assert(offsetof(FactAttentionArgs, scale) == 208, "FactAttentionArgs layout changed");
#endif
#endif /* FACT_ATTENTION_ABI_H */
