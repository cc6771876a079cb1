// The runner's own GPU kernels: random inputs, output poisoning, checksums, and the error
// reduction (kinds keep their float64 references in their pattern folders). Plain structs only, so that the
// .cu files need none of the engine's headers. Every launch function checks the launch and
// throws CudaError; results land in device memory and are read after a synchronize.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace fact::runtime {

enum class ElementType : int { F32 = 0, BF16 = 1, F16 = 2 };
int element_bytes(ElementType type);

// Bit patterns written into outputs before a kernel runs: quiet NaNs with a payload that
// arithmetic does not produce (canonical NaNs are 0x7FC00000 / 0x7FFFFFFF), so an element that
// still holds it was not written.
inline constexpr uint32_t kPoisonF32 = 0x7FC5A5A5u;
inline constexpr uint16_t kPoisonBF16 = 0x7FC5u;
inline constexpr uint16_t kPoisonF16 = 0x7E5Au;

// data[i] = uniform in [-scale, scale) from Philox4x32-10 keyed by `seed` at counter i / 4.
void launch_fill_uniform(void* data, ElementType type, int64_t count, uint64_t seed, float scale,
                         cudaStream_t stream);
// data[i] = the poison pattern of `type`.
void launch_fill_poison(void* data, ElementType type, int64_t count, cudaStream_t stream);
// *counter += number of elements of `data` that do not hold the poison pattern.
void launch_count_not_poison(const void* data, ElementType type, int64_t count,
                             unsigned long long* counter, cudaStream_t stream);
// *sum += a position-dependent 64-bit hash of the bytes of `data` (order-independent sum, so
// it can be accumulated in parallel; any changed byte changes it with high probability).
void launch_checksum(const void* data, size_t bytes, unsigned long long* sum, cudaStream_t stream);
// The checksum of `data` now: zeroes `*scratch` (device memory), sums into it and reads it back,
// all ordered on `stream` and finished on return (the harnesses' streams are non-blocking: a
// memset or copy on the legacy stream would race the kernel).
uint64_t checksum_of(const void* data, size_t bytes, unsigned long long* scratch, cudaStream_t stream);


// Reductions of one comparison, accumulated by launch_compare (zero them first).
struct ErrorSums {
  double sum_sq_diff = 0;   // Σ (out − ref)² over finite, written elements
  double sum_sq_ref = 0;    // Σ ref² over all elements
  double max_abs_diff = 0;  // max |out − ref| over finite, written elements
  unsigned long long unwritten = 0;      // out still holds the poison pattern
  unsigned long long nonfinite = 0;      // out is NaN/Inf (not the poison)
  unsigned long long ref_nonfinite = 0;  // the reference itself is NaN/Inf
};
// (Each kind's comparison of its output with its float64 reference, accumulating ErrorSums,
// lives in its pattern folder: patterns/gemm/runtime/reference_gemm.hpp.)

// A kernel that does nothing: measures launch overhead.
void launch_empty_kernel(cudaStream_t stream);
// A one-thread kernel that busy-waits `nanoseconds` (by the global timer): delays what is
// queued behind it on `stream`.
void launch_spin_kernel(int64_t nanoseconds, cudaStream_t stream);

}  // namespace fact::runtime
