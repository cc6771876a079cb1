#include "patterns/attention/runtime/attention_device.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

namespace fact::attention::device {

namespace {

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("launching ") + what + " failed: " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
  }
}

__device__ __forceinline__ double load(const void* base, int64_t i, Element type) {
  if (type == Element::F32) return double(static_cast<const float*>(base)[i]);
  if (type == Element::BF16) return double(__bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]));
  return double(__half2float(static_cast<const __half*>(base)[i]));
}

// One block per (b, h, i) query row.
__global__ void reference_kernel(Problem p, Element type, const void* q, View qv, const void* k, View kv, const void* v,
                                 View vv, double* ref) {
  extern __shared__ double shared[];
  double* qrow = shared;                   // head_dim
  double* scores = shared + p.head_dim;    // kv_seq
  __shared__ double reduce[32];
  const int64_t row = blockIdx.x;
  const int64_t i = row % p.seq;
  const int64_t h = (row / p.seq) % p.heads;
  const int64_t b = row / (p.seq * p.heads);
  const int64_t kh = h / (p.heads / p.kv_heads);
  const int64_t q_row = qv.offset + b * qv.batch_stride + h * qv.head_stride + i * qv.seq_stride;
  for (int64_t e = threadIdx.x; e < p.head_dim; e += blockDim.x) qrow[e] = load(q, q_row + e, type);
  __syncthreads();
  int64_t visible = p.kv_seq;
  if (p.mask == 1) visible = i + 1;
  if (p.mask == 2) visible = i + 1 + p.kv_seq - p.seq;
  visible = visible < 0 ? 0 : (visible > p.kv_seq ? p.kv_seq : visible);
  int64_t first = 0;  // a sliding window: the `window` newest visible keys only
  if (p.window > 0 && p.mask != 0) {
    const int64_t off = p.mask == 2 ? p.kv_seq - p.seq : 0;
    first = i + off - p.window + 1;
    first = first < 0 ? 0 : first;
  }
  double local_max = -1.0 / 0.0;
  for (int64_t j = first + threadIdx.x; j < visible; j += blockDim.x) {
    if (p.key_mask != nullptr &&
        (p.key_mask[b * p.key_mask_batch_stride + j * p.key_mask_seq_stride] != 0) != p.key_mask_keep) {
      scores[j] = -1.0 / 0.0;  // hidden: exp() makes it 0 below
      continue;
    }
    const int64_t k_row = kv.offset + b * kv.batch_stride + kh * kv.head_stride + j * kv.seq_stride;
    double dot = 0;
    for (int64_t e = 0; e < p.head_dim; ++e) dot += qrow[e] * load(k, k_row + e, type);
    scores[j] = dot * p.scale;
    local_max = fmax(local_max, scores[j]);
  }
  // Block max.
  for (int o = 16; o > 0; o /= 2) local_max = fmax(local_max, __shfl_xor_sync(0xffffffffu, local_max, o));
  if (threadIdx.x % 32 == 0) reduce[threadIdx.x / 32] = local_max;
  __syncthreads();
  double m = -1.0 / 0.0;
  for (int w = 0; w < (blockDim.x + 31) / 32; ++w) m = fmax(m, reduce[w]);
  __syncthreads();
  double local_sum = 0;
  for (int64_t j = first + threadIdx.x; j < visible; j += blockDim.x) {
    scores[j] = exp(scores[j] - m);
    local_sum += scores[j];
  }
  for (int o = 16; o > 0; o /= 2) local_sum += __shfl_xor_sync(0xffffffffu, local_sum, o);
  if (threadIdx.x % 32 == 0) reduce[threadIdx.x / 32] = local_sum;
  __syncthreads();
  double sum = 0;
  for (int w = 0; w < (blockDim.x + 31) / 32; ++w) sum += reduce[w];
  const int64_t out_row = ((b * p.heads + h) * p.seq + i) * p.v_head_dim;
  for (int64_t e = threadIdx.x; e < p.v_head_dim; e += blockDim.x) {
    double acc = 0;
    for (int64_t j = first; j < visible; ++j) {
      acc += scores[j] * load(v, vv.offset + b * vv.batch_stride + kh * vv.head_stride + j * vv.seq_stride + e, type);
    }
    ref[out_row + e] = visible > first && sum > 0 && m > -1.0 / 0.0 ? acc / sum : 0.0;
  }
}

}  // namespace

void reference(const Problem& p, Element type, const void* q, View qv, const void* k, View kv, const void* v, View vv,
               double* ref, cudaStream_t stream) {
  const int64_t rows = p.batch * p.heads * p.seq;
  const size_t smem = size_t(p.head_dim + p.kv_seq) * sizeof(double);
  if (smem > 48 * 1024) {
    if (cudaFuncSetAttribute(reference_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
      check_launch("the reference's shared memory");
    }
  }
  if (rows > 0x7fffffff) throw std::runtime_error("reference: too many query rows for one grid");
  reference_kernel<<<unsigned(rows), 128, smem, stream>>>(p, type, q, qv, k, kv, v, vv, ref);
  check_launch("reference");
}

}  // namespace fact::attention::device
