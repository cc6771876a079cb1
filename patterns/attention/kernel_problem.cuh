// What the shared C entry (attention_entry.cuh) fills for either attention kernel from the ABI's
// FactAttentionArgs and hands to its make_params: sizes, typed pointers, element strides, the
// mask's diagonal offset and window, the scale and the LSE output. One struct for both kernels
// (fmha_sm90.cuh, fmha_f32_sm90.cuh), so the entry's can_implement serves both.
#pragma once

#include <cstdint>

namespace fact::attention {

template <class Element>
struct KernelProblem {
  int batch, heads, kv_heads, seq_q, seq_k;
  Element const *q, *k, *v;
  Element* o;
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // batch, seq, head (elements)
  int diag_offset;  // causal: key j is visible to query i iff j <= i + diag_offset
  int window;       // causal sliding window (0: none)
  float scale;
  float* lse;  // NULL: not written
  int64_t lse_batch_stride, lse_head_stride;
  // Boolean key mask (the bf16 kernel's; NULL: none): key j of batch b is visible iff
  // (key_mask[b * key_mask_stride[0] + j * key_mask_stride[1]] != 0) == key_mask_keep.
  uint8_t const* key_mask;
  int64_t key_mask_stride[2];
  bool key_mask_keep;
  int* tile_counter;  // dynamic schedule's workspace (the bf16 kernel's; unused by the float32 one)
  int64_t l2_bytes;   // the device's L2 (the bf16 kernel's sections; unused by the float32 one)
};

}  // namespace fact::attention
