// FACT speed test: causal attention, correct, but it sleeps 250 ms per call: slower than PyTorch
// on any machine, so the registry must refuse it (it passes every other gate).
#include <chrono>
#include <thread>
#include <cmath>
#include <vector>
#include "fact/runtime/fact_subgraph_abi.h"

extern "C" int fact_entry(const FactCallHeader* h, void* workspace, size_t* workspace_size, void* stream) {
  (void)workspace; (void)stream;
  if (workspace_size) { *workspace_size = 0; return FACT_OK; }
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  if (!h || h->abi_version != FACT_ABI_VERSION || h->kind != fact_kind_id("subgraph") || h->size != sizeof(FactSubgraphArgs))
    return FACT_ERR_INVALID_ARGS;
  const FactSubgraphArgs* a = (const FactSubgraphArgs*)h;
  if (a->num_operands != 3 || a->num_results != 1) return FACT_ERR_INVALID_ARGS;
  const FactTensor &q = a->operands[0], &k = a->operands[1], &v = a->operands[2], &o = a->results[0];
  if (q.dtype != FACT_DTYPE_F32 || q.rank != 4) return FACT_ERR_CANNOT_IMPLEMENT;
  const int64_t B = q.shape[0], H = q.shape[1], T = q.shape[2], D = q.shape[3];
  const double scale = 1.0 / std::sqrt((double)D);
  auto at = [](const FactTensor& t, int64_t b, int64_t h, int64_t i, int64_t d) -> float& {
    return ((float*)t.data)[b * t.stride[0] + h * t.stride[1] + i * t.stride[2] + d * t.stride[3]];
  };
  std::vector<double> p(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hh = 0; hh < H; ++hh)
      for (int64_t i = 0; i < T; ++i) {
        double m = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < D; ++d) s += (double)at(q, b, hh, i, d) * at(k, b, hh, j, d);
          p[j] = s * scale;
          if (p[j] > m) m = p[j];
        }
        for (int64_t j = 0; j <= i; ++j) { p[j] = std::exp(p[j] - m); sum += p[j]; }
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j <= i; ++j) acc += p[j] * at(v, b, hh, j, d);
          at(o, b, hh, i, d) = (float)(acc / sum);
        }
      }
  return FACT_OK;
}
