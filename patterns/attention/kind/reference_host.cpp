#include "patterns/attention/kind/reference_host.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace fact::attention {

namespace {

double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double value;
  if (exponent == 0) {
    value = std::ldexp(double(mantissa), -24);
  } else if (exponent == 31) {
    value = mantissa ? std::nan("") : INFINITY;
  } else {
    value = std::ldexp(double(mantissa | 1024), exponent - 25);
  }
  return sign ? -value : value;
}

// Round to nearest even from double directly (no double rounding through float).
uint16_t double_to_half(double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0u;
  const double a = std::fabs(d);
  if (std::isnan(d)) return static_cast<uint16_t>(sign | 0x7E00u);
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a < std::ldexp(1.0, -14)) {  // subnormal: multiples of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0, 24))));
  }
  int exponent = 0;
  const double fraction = std::frexp(a, &exponent);  // a = fraction * 2^exponent, fraction in [0.5, 1)
  // 11 significant bits: mantissa in [1024, 2048).
  double scaled = std::nearbyint(std::ldexp(fraction, 11));
  if (scaled >= 2048.0) {
    scaled /= 2.0;
    ++exponent;
  }
  const int biased = exponent - 1 + 15;
  if (biased >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
  return static_cast<uint16_t>(sign | (biased << 10) | (static_cast<uint16_t>(scaled) & 1023u));
}

uint16_t double_to_bf16(double d) {
  if (std::isnan(d)) return 0x7FC0u;
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0u;
  const double a = std::fabs(d);
  if (a == 0.0) return sign;
  if (a >= std::ldexp(255.0 / 128.0 + 1.0 / 256.0, 127)) return static_cast<uint16_t>(sign | 0x7F80u);
  int exponent = 0;
  const double fraction = std::frexp(a, &exponent);
  if (exponent < -125) {  // subnormal bf16: multiples of 2^-133
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 133))));
  }
  double scaled = std::nearbyint(std::ldexp(fraction, 8));  // 8 significant bits
  if (scaled >= 256.0) {
    scaled /= 2.0;
    ++exponent;
  }
  const int biased = exponent - 1 + 127;
  if (biased >= 255) return static_cast<uint16_t>(sign | 0x7F80u);
  return static_cast<uint16_t>(sign | (biased << 7) | (static_cast<uint16_t>(scaled) & 127u));
}

double load(const void* base, int64_t index, int32_t type) {
  switch (type) {
    case FACT_DTYPE_F32: return static_cast<const float*>(base)[index];
    case FACT_DTYPE_F64: return static_cast<const double*>(base)[index];
    case FACT_DTYPE_F16: return half_to_double(static_cast<const uint16_t*>(base)[index]);
    case FACT_DTYPE_BF16: {
      const uint32_t bits = uint32_t(static_cast<const uint16_t*>(base)[index]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return std::nan("");
  }
}

void store(void* base, int64_t index, int32_t type, double value) {
  switch (type) {
    case FACT_DTYPE_F32: static_cast<float*>(base)[index] = static_cast<float>(value); break;
    case FACT_DTYPE_F64: static_cast<double*>(base)[index] = value; break;
    case FACT_DTYPE_F16: static_cast<uint16_t*>(base)[index] = double_to_half(value); break;
    case FACT_DTYPE_BF16: static_cast<uint16_t*>(base)[index] = double_to_bf16(value); break;
    default: break;
  }
}

bool known_dtype(int32_t t) {
  return t == FACT_DTYPE_F32 || t == FACT_DTYPE_F64 || t == FACT_DTYPE_F16 || t == FACT_DTYPE_BF16;
}

}  // namespace

int reference_attention_host(const FactAttentionArgs& a) {
  if (a.header.abi_version != FACT_ABI_VERSION || a.header.kind != fact_kind_id(FACT_ATTENTION_KIND_NAME) ||
      a.header.size != sizeof(FactAttentionArgs)) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (a.batch <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.seq_q <= 0 || a.seq_k <= 0 || a.head_dim <= 0 ||
      a.v_head_dim <= 0 || a.heads % a.kv_heads != 0 || a.reserved != 0) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (a.causal != FACT_ATTN_MASK_NONE && a.causal != FACT_ATTN_MASK_CAUSAL_TOP_LEFT &&
      a.causal != FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (!known_dtype(a.dtype) || !std::isfinite(a.scale)) return FACT_ERR_INVALID_ARGS;
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
        for (int64_t d = 0; d < a.head_dim; ++d) q[d] = load(a.q, q_row + d, a.dtype);
        // Keys 0 .. visible-1 are visible (all of them without a mask).
        int64_t visible = a.seq_k;
        if (a.causal != FACT_ATTN_MASK_NONE) visible = std::max<int64_t>(0, std::min<int64_t>(a.seq_k, i + offset + 1));
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          const int64_t k_row = b * a.k_batch_stride + j * a.k_seq_stride + kh * a.k_head_stride;
          double s = 0.0;
          for (int64_t d = 0; d < a.head_dim; ++d) s += q[d] * load(a.k, k_row + d, a.dtype);
          scores[j] = s * double(a.scale);
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0.0;
        std::fill(out.begin(), out.end(), 0.0);
        for (int64_t j = 0; j < visible; ++j) {
          const double p = std::exp(scores[j] - max_score);
          sum += p;
          const int64_t v_row = b * a.v_batch_stride + j * a.v_seq_stride + kh * a.v_head_stride;
          for (int64_t d = 0; d < a.v_head_dim; ++d) out[d] += p * load(a.v, v_row + d, a.dtype);
        }
        const int64_t o_row = b * a.o_batch_stride + i * a.o_seq_stride + h * a.o_head_stride;
        for (int64_t d = 0; d < a.v_head_dim; ++d) store(a.o, o_row + d, a.dtype, sum > 0 ? out[d] / sum : 0.0);
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
