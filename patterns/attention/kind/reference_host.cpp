#include "patterns/attention/kind/reference_host.hpp"

#include "fact/problem/abi_elements.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace fact::attention {

int reference_attention_host(const FactAttentionArgs& a) {
  if (a.header.abi_version != FACT_ABI_VERSION || a.header.kind != fact_kind_id(FACT_ATTENTION_KIND_NAME) ||
      a.header.size != sizeof(FactAttentionArgs)) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (a.batch <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.seq_q <= 0 || a.seq_k <= 0 || a.head_dim <= 0 ||
      a.v_head_dim <= 0 || a.heads % a.kv_heads != 0 || a.window < 0 ||
      (a.window > 0 && a.causal == FACT_ATTN_MASK_NONE)) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (a.causal != FACT_ATTN_MASK_NONE && a.causal != FACT_ATTN_MASK_CAUSAL_TOP_LEFT &&
      a.causal != FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (!known_abi_dtype(a.dtype) || !std::isfinite(a.scale)) return FACT_ERR_INVALID_ARGS;
  if (a.key_mask != nullptr && (a.causal != FACT_ATTN_MASK_NONE || a.key_mask_batch_stride < 0 ||
                                a.key_mask_seq_stride < 0 || (a.key_mask_keep != 0 && a.key_mask_keep != 1))) {
    return FACT_ERR_INVALID_ARGS;
  }
  const auto* key_mask = static_cast<const uint8_t*>(a.key_mask);
  // Whether the key mask (if any) lets batch entry b see key j.
  auto key_visible = [&](int64_t b, int64_t j) {
    if (key_mask == nullptr) return true;
    const bool set = key_mask[b * a.key_mask_batch_stride + j * a.key_mask_seq_stride] != 0;
    return set == (a.key_mask_keep == 1);
  };
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.o == nullptr) return FACT_ERR_INVALID_ARGS;
  const int64_t strides[] = {a.q_batch_stride, a.q_seq_stride, a.q_head_stride, a.k_batch_stride,
                             a.k_seq_stride,   a.k_head_stride, a.v_batch_stride, a.v_seq_stride,
                             a.v_head_stride,  a.o_batch_stride, a.o_seq_stride, a.o_head_stride};
  for (int64_t s : strides) {
    if (s < 0) return FACT_ERR_INVALID_ARGS;
  }
  const int64_t group = a.heads / a.kv_heads;
  const int64_t offset = a.causal == FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? int64_t(a.seq_k) - a.seq_q : 0;
  std::vector<double> q(a.head_dim), scores(a.seq_k), out(a.v_head_dim);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < a.seq_q; ++i) {
        const int64_t q_row = b * a.q_batch_stride + i * a.q_seq_stride + h * a.q_head_stride;
        for (int64_t d = 0; d < a.head_dim; ++d) q[d] = load_abi_element(a.q, q_row + d, a.dtype);
        // Keys first .. visible-1 are visible (all of them without a mask; a sliding window
        // keeps the `window` newest up to the diagonal).
        int64_t visible = a.seq_k, first = 0;
        if (a.causal != FACT_ATTN_MASK_NONE) visible = std::max<int64_t>(0, std::min<int64_t>(a.seq_k, i + offset + 1));
        if (a.window > 0) first = std::max<int64_t>(0, i + offset - a.window + 1);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = first; j < visible; ++j) {
          if (!key_visible(b, j)) continue;
          const int64_t k_row = b * a.k_batch_stride + j * a.k_seq_stride + kh * a.k_head_stride;
          double s = 0.0;
          for (int64_t d = 0; d < a.head_dim; ++d) s += q[d] * load_abi_element(a.k, k_row + d, a.dtype);
          scores[j] = s * double(a.scale);
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0.0;
        std::fill(out.begin(), out.end(), 0.0);
        for (int64_t j = first; j < visible; ++j) {
          if (!key_visible(b, j)) continue;
          const double p = std::exp(scores[j] - max_score);
          sum += p;
          const int64_t v_row = b * a.v_batch_stride + j * a.v_seq_stride + kh * a.v_head_stride;
          for (int64_t d = 0; d < a.v_head_dim; ++d) out[d] += p * load_abi_element(a.v, v_row + d, a.dtype);
        }
        const int64_t o_row = b * a.o_batch_stride + i * a.o_seq_stride + h * a.o_head_stride;
        for (int64_t d = 0; d < a.v_head_dim; ++d) store_abi_element(a.o, o_row + d, a.dtype, sum > 0 ? out[d] / sum : 0.0);
        if (a.lse != nullptr) {
          a.lse[b * a.lse_batch_stride + h * a.lse_head_stride + i] =
              static_cast<float>(sum > 0 ? max_score + std::log(sum) : -std::numeric_limits<double>::infinity());
        }
      }
    }
  }
  return FACT_OK;
}

}  // namespace fact::attention
