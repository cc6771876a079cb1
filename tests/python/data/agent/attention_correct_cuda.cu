// Causal attention softmax(q kᵀ / sqrt(d)) v on the GPU, for the subgraph ABI (float32): one
// thread per query row, float64 inside (a plain kernel: the gates' GPU path is under test, not
// its speed). WITH_CAUSAL_MASK=0 builds the wrong variant (no mask) the gates must reject.
#include <cmath>
#include "fact/runtime/fact_subgraph_abi.h"

#ifndef WITH_CAUSAL_MASK
#define WITH_CAUSAL_MASK 1
#endif

struct View4 {
  float* data;
  long long s0, s1, s2, s3;
  __device__ float& at(long long b, long long h, long long i, long long d) const {
    return data[b * s0 + h * s1 + i * s2 + d * s3];
  }
};

static View4 view_of(const FactTensor& t) {
  return {(float*)t.data, t.stride[0], t.stride[1], t.stride[2], t.stride[3]};
}

__global__ void attend(View4 q, View4 k, View4 v, View4 o, long long B, long long H, long long T,
                       long long D) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= B * H * T) return;
  const long long i = row % T, h = (row / T) % H, b = row / (T * H);
  const double scale = 1.0 / sqrt((double)D);
  const long long last = WITH_CAUSAL_MASK ? i : T - 1;
  double m = -INFINITY;
  for (long long j = 0; j <= last; ++j) {
    double s = 0.0;
    for (long long d = 0; d < D; ++d) s += (double)q.at(b, h, i, d) * k.at(b, h, j, d);
    m = fmax(m, s * scale);
  }
  double sum = 0.0;
  for (long long j = 0; j <= last; ++j) {
    double s = 0.0;
    for (long long d = 0; d < D; ++d) s += (double)q.at(b, h, i, d) * k.at(b, h, j, d);
    sum += exp(s * scale - m);
  }
  for (long long d = 0; d < D; ++d) {
    double acc = 0.0;
    for (long long j = 0; j <= last; ++j) {
      double s = 0.0;
      for (long long e = 0; e < D; ++e) s += (double)q.at(b, h, i, e) * k.at(b, h, j, e);
      acc += exp(s * scale - m) * v.at(b, h, j, d);
    }
    o.at(b, h, i, d) = (float)(acc / sum);
  }
}

extern "C" int fact_entry(const FactCallHeader* h, void* workspace, size_t* workspace_size, void* stream) {
  (void)workspace;
  if (workspace_size) { *workspace_size = 0; return FACT_OK; }
  if (!h || h->abi_version != FACT_ABI_VERSION || h->kind != fact_kind_id("subgraph") || h->size != sizeof(FactSubgraphArgs))
    return FACT_ERR_INVALID_ARGS;
  const FactSubgraphArgs* a = (const FactSubgraphArgs*)h;
  if (a->num_operands != 3 || a->num_results != 1) return FACT_ERR_INVALID_ARGS;
  const FactTensor &q = a->operands[0], &k = a->operands[1], &v = a->operands[2], &o = a->results[0];
  if (q.dtype != FACT_DTYPE_F32 || q.rank != 4) return FACT_ERR_CANNOT_IMPLEMENT;
  const long long B = q.shape[0], H = q.shape[1], T = q.shape[2], D = q.shape[3];
  const long long rows = B * H * T;
  attend<<<(unsigned)((rows + 127) / 128), 128, 0, (cudaStream_t)stream>>>(view_of(q), view_of(k), view_of(v), view_of(o),
                                                                          B, H, T, D);
  return cudaGetLastError() == cudaSuccess ? FACT_OK : FACT_ERR_LAUNCH;
}
