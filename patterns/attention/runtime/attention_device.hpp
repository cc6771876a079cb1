// The attention runtime's own GPU kernel: the float64 attention reference. Random inputs,
// poisoning, the comparison against the reference, counting and checksums are the one
// verifier's (fact/runtime/verifier.hpp, device_kernels.hpp), shared with every kind. Plain structs only, so
// that the .cu file needs none of the engine's headers. Every launch function checks the launch
// and throws std::runtime_error; results land in device memory and are read after a synchronize.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "fact/runtime/device_kernels.hpp"

namespace fact::attention::device {

// Q, K, V and O's element type: the runner's (its fills, poison, counts and element_bytes).
using Element = runtime::ElementType;

// A [batch, heads, seq, dim] view: element strides and the element where it starts.
struct View {
  int64_t batch_stride = 0, head_stride = 0, seq_stride = 0;
  int64_t offset = 0;
};

struct Problem {
  int64_t batch = 1, heads = 1, kv_heads = 1, seq = 0, kv_seq = 0, head_dim = 0, v_head_dim = 0;
  int mask = 0;  // FactAttentionMask
  double scale = 1.0;
  int64_t window = 0;  // causal sliding window (FactAttentionArgs.window); 0: none
  // A boolean key mask (FactAttentionArgs.key_mask; NULL: none): key j of batch b is visible iff
  // (key_mask[b * key_mask_batch_stride + j * key_mask_seq_stride] != 0) == key_mask_keep.
  const uint8_t* key_mask = nullptr;
  int64_t key_mask_batch_stride = 0, key_mask_seq_stride = 0;
  bool key_mask_keep = true;
};

// ref[b][h][i][e] (dense float64) = softmax_j(scale · q[b,h,i,:]·k[b,h/g,j,:] + mask) v[b,h/g,j,e]
// over the keys the mask, the sliding window and the key mask leave visible; rows with no visible
// key get 0.
// q, k, v are base pointers of `type` elements.
void reference(const Problem& p, Element type, const void* q, View qv, const void* k, View kv, const void* v,
               View vv, double* ref, cudaStream_t stream);

}  // namespace fact::attention::device
