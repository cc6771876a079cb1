// The attention runtime's own GPU kernels: random inputs, output poisoning and counting,
// checksums, a spin kernel, the float64 attention reference and the comparison against it.
// Plain structs only, so that the .cu file needs none of the engine's headers. Every launch
// function checks the launch and throws std::runtime_error; results land in device memory and
// are read after a synchronize.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace fact::attention::device {

enum class Element : int { BF16 = 0, F16 = 1 };

// Bit patterns written into outputs before a kernel runs (quiet NaNs with a payload arithmetic
// does not produce), as the GEMM runtime uses.
inline constexpr uint16_t kPoisonBF16 = 0x7FC5u;
inline constexpr uint16_t kPoisonF16 = 0x7E5Au;

// A [batch, heads, seq, dim] view: element strides and the element where it starts.
struct View {
  int64_t batch_stride = 0, head_stride = 0, seq_stride = 0;
  int64_t offset = 0;
};

struct Problem {
  int64_t batch = 1, heads = 1, kv_heads = 1, seq = 0, kv_seq = 0, head_dim = 0, v_head_dim = 0;
  int mask = 0;  // FactAttentionMask
  double scale = 1.0;
};

// data[i] = uniform in [-scale, scale) from a counter-based hash of (seed, i).
void fill_uniform(void* data, Element type, int64_t count, uint64_t seed, float scale, cudaStream_t stream);
// data[i] = the poison pattern.
void fill_poison(void* data, Element type, int64_t count, cudaStream_t stream);
// *counter += elements of data that do not hold the poison pattern.
void count_not_poison(const void* data, Element type, int64_t count, unsigned long long* counter,
                      cudaStream_t stream);
// *sum += a position-dependent hash of every byte (any changed byte changes it).
void checksum(const void* data, size_t bytes, unsigned long long* sum, cudaStream_t stream);
// A one-thread kernel that busy-waits `nanoseconds` (global timer).
void spin(int64_t nanoseconds, cudaStream_t stream);

// ref[b][h][i][e] (dense float64) = softmax_j(scale · q[b,h,i,:]·k[b,h/g,j,:] + mask) v[b,h/g,j,e];
// rows with no visible key get 0. q, k, v are base pointers of `type` elements.
void reference(const Problem& p, Element type, const void* q, View qv, const void* k, View kv, const void* v,
               View vv, double* ref, cudaStream_t stream);

// Reductions of one comparison (zero them first).
struct Sums {
  double sum_sq_diff = 0;    // Σ (out − ref)² over written, finite elements
  double sum_sq_ref = 0;     // Σ ref²
  double max_abs_diff = 0;   // max |out − ref| over written, finite elements
  unsigned long long unwritten = 0;  // view elements still holding the poison
  unsigned long long nonfinite = 0;  // view elements that are NaN/Inf (not the poison)
  unsigned long long written = 0;    // view elements that do not hold the poison
};
// Compares the view `ov` of `o` with ref (dense [B][H][T][Dv]).
void compare(const Problem& p, Element type, const void* o, View ov, const double* ref, Sums* sums,
             cudaStream_t stream);

}  // namespace fact::attention::device
