// Random inputs, poisoning, checksums, the strided comparison and the empty kernel (see
// device_kernels.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <curand_philox4x32_x.h>

#include <algorithm>
#include <stdexcept>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_kernels.hpp"

namespace fact::runtime {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t work_items) {
  const int64_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65536));
}

__device__ inline void store_element(void* data, ElementType type, int64_t i, float v) {
  switch (type) {
    case ElementType::F32: static_cast<float*>(data)[i] = v; break;
    case ElementType::BF16: static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(v); break;
    case ElementType::F16: static_cast<__half*>(data)[i] = __float2half_rn(v); break;
  }
}

__device__ inline bool element_holds_poison(const void* data, ElementType type, int64_t i) {
  switch (element_bytes(type)) {
    case 8: return static_cast<const uint64_t*>(data)[i] == poison_bits(type);
    case 4: return static_cast<const uint32_t*>(data)[i] == static_cast<uint32_t>(poison_bits(type));
    case 2: return static_cast<const uint16_t*>(data)[i] == static_cast<uint16_t>(poison_bits(type));
    default: return static_cast<const uint8_t*>(data)[i] == static_cast<uint8_t>(poison_bits(type));
  }
}

__device__ inline double load_double(const void* data, ElementType type, int64_t i) {
  switch (type) {
    case ElementType::F32: return static_cast<const float*>(data)[i];
    case ElementType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    case ElementType::F16: return __half2float(static_cast<const __half*>(data)[i]);
    case ElementType::F64: return static_cast<const double*>(data)[i];
    case ElementType::I64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case ElementType::I32: return static_cast<const int32_t*>(data)[i];
    case ElementType::U8: return static_cast<const uint8_t*>(data)[i];
  }
  return 0.0;
}

__global__ void fill_uniform_kernel(void* data, ElementType type, int64_t count, uint64_t seed,
                                    float scale) {
  const uint2 key = make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const int64_t groups = (count + 3) / 4;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups;
       g += int64_t(gridDim.x) * blockDim.x) {
    const uint4 counter = make_uint4(static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32),
                                     0x46414354u, 0u);
    const uint4 bits = curand_Philox4x32_10(counter, key);
    const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = g * 4 + lane;
      if (i >= count) break;
      const float unit = (static_cast<float>(words[lane] >> 8) + 0.5f) * (1.0f / 16777216.0f);
      store_element(data, type, i, (2.0f * unit - 1.0f) * scale);
    }
  }
}

__global__ void fill_poison_kernel(void* data, ElementType type, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    switch (element_bytes(type)) {
      case 8: static_cast<uint64_t*>(data)[i] = poison_bits(type); break;
      case 4: static_cast<uint32_t*>(data)[i] = static_cast<uint32_t>(poison_bits(type)); break;
      case 2: static_cast<uint16_t*>(data)[i] = static_cast<uint16_t>(poison_bits(type)); break;
      default: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(poison_bits(type)); break;
    }
  }
}

__device__ inline unsigned long long warp_sum(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void count_not_poison_kernel(const void* data, ElementType type, int64_t count,
                                        unsigned long long* counter) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    local += element_holds_poison(data, type, i) ? 0ull : 1ull;
  }
  local = warp_sum(local);
  if ((threadIdx.x & 31) == 0 && local != 0) atomicAdd(counter, local);
}

__device__ inline unsigned long long mix64(unsigned long long x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

__global__ void checksum_kernel(const unsigned char* data, size_t bytes, unsigned long long* sum) {
  const size_t words = bytes / 4;
  const uint32_t* word_data = reinterpret_cast<const uint32_t*>(data);
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    local += mix64((static_cast<unsigned long long>(word_data[i]) << 32) ^ (i * 0x9E3779B97F4A7C15ull));
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (size_t i = words * 4; i < bytes; ++i) {
      local += mix64((static_cast<unsigned long long>(data[i]) << 40) ^ (i + 0x5555ull));
    }
  }
  local = warp_sum(local);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, local);
}

__device__ inline double warp_sum_double(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline double warp_max_double(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

// One grid-stride pass over the view's elements in row-major order; per-warp partial sums
// go to the totals with one atomic each.
__global__ void compare_strided_kernel(const StridedView out, const double* ref, int64_t total,
                                       ErrorSums* sums) {
  double sq_diff = 0, sq_ref = 0, max_abs = 0;
  unsigned long long unwritten = 0, nonfinite = 0, ref_nonfinite = 0, written = 0;
  const bool floating = is_floating(out.type);
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = idx, offset = 0;
    for (int d = out.rank - 1; d >= 0; --d) {
      offset += (rest % out.shape[d]) * out.stride[d];
      rest /= out.shape[d];
    }
    const double r = ref[idx];
    if (!isfinite(r)) {
      ++ref_nonfinite;
      continue;
    }
    sq_ref += r * r;
    if (element_holds_poison(out.data, out.type, offset)) {
      ++unwritten;
      continue;
    }
    ++written;
    const double o = load_double(out.data, out.type, offset);
    if (floating && !isfinite(o)) {
      ++nonfinite;
      continue;
    }
    const double d = o - r;
    sq_diff += d * d;
    max_abs = fmax(max_abs, fabs(d));
  }
  sq_diff = warp_sum_double(sq_diff);
  sq_ref = warp_sum_double(sq_ref);
  max_abs = warp_max_double(max_abs);
  unwritten = warp_sum(unwritten);
  nonfinite = warp_sum(nonfinite);
  ref_nonfinite = warp_sum(ref_nonfinite);
  written = warp_sum(written);
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums->sum_sq_diff, sq_diff);
    atomicAdd(&sums->sum_sq_ref, sq_ref);
    // Non-negative doubles order like their bit patterns.
    atomicMax(reinterpret_cast<unsigned long long*>(&sums->max_abs_diff),
              static_cast<unsigned long long>(__double_as_longlong(max_abs)));
    atomicAdd(&sums->unwritten, unwritten);
    atomicAdd(&sums->nonfinite, nonfinite);
    atomicAdd(&sums->ref_nonfinite, ref_nonfinite);
    atomicAdd(&sums->written, written);
  }
}

__global__ void empty_kernel() {}

__global__ void spin_kernel(int64_t nanoseconds) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (static_cast<int64_t>(now - start) < nanoseconds);
}

void check_launch(const char* what) {
  check_cuda(cudaGetLastError(), what, __FILE__, __LINE__);
}

}  // namespace

void launch_fill_uniform(void* data, ElementType type, int64_t count, uint64_t seed, float scale,
                         cudaStream_t stream) {
  if (count <= 0) return;
  if (type != ElementType::F32 && type != ElementType::BF16 && type != ElementType::F16) {
    throw std::invalid_argument("launch_fill_uniform: float32, bf16 or fp16 elements only");
  }
  fill_uniform_kernel<<<grid_for((count + 3) / 4), kThreads, 0, stream>>>(data, type, count, seed,
                                                                          scale);
  check_launch("fill_uniform_kernel");
}

void launch_fill_poison(void* data, ElementType type, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  fill_poison_kernel<<<grid_for(count), kThreads, 0, stream>>>(data, type, count);
  check_launch("fill_poison_kernel");
}

void launch_count_not_poison(const void* data, ElementType type, int64_t count,
                             unsigned long long* counter, cudaStream_t stream) {
  if (count <= 0) return;
  count_not_poison_kernel<<<grid_for(count), kThreads, 0, stream>>>(data, type, count, counter);
  check_launch("count_not_poison_kernel");
}

uint64_t checksum_of(const void* data, size_t bytes, unsigned long long* scratch, cudaStream_t stream) {
  FACT_CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(unsigned long long), stream));
  launch_checksum(data, bytes, scratch, stream);
  unsigned long long sum = 0;
  FACT_CUDA_CHECK(cudaMemcpyAsync(&sum, scratch, sizeof sum, cudaMemcpyDeviceToHost, stream));
  FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return sum;
}

void launch_checksum(const void* data, size_t bytes, unsigned long long* sum, cudaStream_t stream) {
  if (bytes == 0) return;
  checksum_kernel<<<grid_for(static_cast<int64_t>(bytes / 4 + 1)), kThreads, 0, stream>>>(
      static_cast<const unsigned char*>(data), bytes, sum);
  check_launch("checksum_kernel");
}

void launch_compare_strided(const StridedView& out, const double* ref, ErrorSums* sums,
                            cudaStream_t stream) {
  if (out.rank < 0 || out.rank > 8) throw std::invalid_argument("launch_compare_strided: rank above 8");
  int64_t total = 1;
  for (int d = 0; d < out.rank; ++d) total *= out.shape[d];
  if (total <= 0) return;
  compare_strided_kernel<<<std::min(grid_for(total), 8192u), kThreads, 0, stream>>>(out, ref, total, sums);
  check_launch("compare_strided_kernel");
}

void launch_spin_kernel(int64_t nanoseconds, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(nanoseconds);
  check_launch("spin_kernel");
}

void launch_empty_kernel(cudaStream_t stream) {
  empty_kernel<<<1, 32, 0, stream>>>();
  check_launch("empty_kernel");
}

}  // namespace fact::runtime
