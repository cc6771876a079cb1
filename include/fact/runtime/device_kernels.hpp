// The runner's own GPU kernels: random inputs, output poisoning, checksums, and the error
// reduction (kinds keep their float64 references in their pattern folders). Plain structs only, so that the
// .cu files need none of the engine's headers. Every launch function checks the launch and
// throws CudaError; results land in device memory and are read after a synchronize.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "fact/runtime/element_type.hpp"
#include "fact/runtime/strided_view.hpp"

namespace fact::runtime {

// data[i] = uniform in [-scale, scale) from Philox4x32-10 keyed by `seed` at counter i / 4
// (floating types only; std::invalid_argument otherwise).
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


// Compares every element of `out` with ref (dense float64, row-major over out's shape),
// accumulating into *sums (device memory, zeroed first): poisoned elements count as unwritten,
// non-finite ones (floating types) as nonfinite, the rest into the error sums and `written`.
void launch_compare_strided(const StridedView& out, const double* ref, ErrorSums* sums,
                            cudaStream_t stream);

// A kernel that does nothing: measures launch overhead.
void launch_empty_kernel(cudaStream_t stream);
// A one-thread kernel that busy-waits `nanoseconds` (by the global timer): delays what is
// queued behind it on `stream`.
void launch_spin_kernel(int64_t nanoseconds, cudaStream_t stream);

}  // namespace fact::runtime
