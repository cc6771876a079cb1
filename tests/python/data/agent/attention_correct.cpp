// Causal attention softmax(q kᵀ / sqrt(d)) v on the host, for the subgraph ABI (float32).
// Fast enough for the registry (at least as fast as PyTorch's SDPA at the tests' small shapes):
// the dot products keep four independent sums (no chain of dependent adds), and each output
// row accumulates over the keys with one independent sum per column; rows of unit stride (the
// usual case) take a copy of the loops the compiler can vectorize.
#include <cmath>
#include <vector>
#include "fact/runtime/fact_subgraph_abi.h"

namespace {

float* row(const FactTensor& t, int64_t b, int64_t h, int64_t i) {
  return (float*)t.data + b * t.stride[0] + h * t.stride[1] + i * t.stride[2];
}

template <bool kUnit>
void attend(const FactTensor& q, const FactTensor& k, const FactTensor& v, const FactTensor& o) {
  const int64_t B = q.shape[0], H = q.shape[1], T = q.shape[2], D = q.shape[3];
  const int64_t qs = kUnit ? 1 : q.stride[3], ks = kUnit ? 1 : k.stride[3];
  const int64_t vs = kUnit ? 1 : v.stride[3], os = kUnit ? 1 : o.stride[3];
  const float scale = 1.0f / std::sqrt((float)D);
  std::vector<float> p(T), acc(D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hh = 0; hh < H; ++hh)
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = row(q, b, hh, i);
        float m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* kj = row(k, b, hh, j);
          float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          int64_t d = 0;
          for (; d + 4 <= D; d += 4)
            for (int u = 0; u < 4; ++u) s[u] += qi[(d + u) * qs] * kj[(d + u) * ks];
          for (; d < D; ++d) s[0] += qi[d * qs] * kj[d * ks];
          p[j] = ((s[0] + s[1]) + (s[2] + s[3])) * scale;
          if (p[j] > m) m = p[j];
        }
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) { p[j] = std::exp(p[j] - m); sum += p[j]; }
        for (int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
        for (int64_t j = 0; j <= i; ++j) {
          const float* vj = row(v, b, hh, j);
          const float w = p[j];
          for (int64_t d = 0; d < D; ++d) acc[d] += w * vj[d * vs];
        }
        float* oi = row(o, b, hh, i);
        const float inv = 1.0f / sum;
        for (int64_t d = 0; d < D; ++d) oi[d * os] = acc[d] * inv;
      }
}

}  // namespace

extern "C" int fact_entry(const FactCallHeader* h, void* workspace, size_t* workspace_size, void* stream) {
  (void)workspace; (void)stream;
  if (workspace_size) { *workspace_size = 0; return FACT_OK; }
  if (!h || h->abi_version != FACT_ABI_VERSION || h->kind != fact_kind_id("subgraph") || h->size != sizeof(FactSubgraphArgs))
    return FACT_ERR_INVALID_ARGS;
  const FactSubgraphArgs* a = (const FactSubgraphArgs*)h;
  if (a->num_operands != 3 || a->num_results != 1) return FACT_ERR_INVALID_ARGS;
  const FactTensor &q = a->operands[0], &k = a->operands[1], &v = a->operands[2], &o = a->results[0];
  if (q.dtype != FACT_DTYPE_F32 || q.rank != 4) return FACT_ERR_CANNOT_IMPLEMENT;
  if (q.stride[3] == 1 && k.stride[3] == 1 && v.stride[3] == 1 && o.stride[3] == 1)
    attend<true>(q, k, v, o);
  else
    attend<false>(q, k, v, o);
  return FACT_OK;
}
