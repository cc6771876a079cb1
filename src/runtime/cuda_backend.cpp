#include "fact/runtime/cuda_backend.hpp"

#include <chrono>
#include <thread>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_kernels.hpp"

namespace fact::runtime {

namespace {

struct Scratch {
  ErrorSums sums;
  unsigned long long counter;
};

}  // namespace

CudaBackend::CudaBackend(bool flush_l2) : scratch_(sizeof(Scratch)) {
  if (flush_l2) flusher_.emplace();
}

Allocation CudaBackend::allocate(size_t bytes) {
  void* data = nullptr;
  FACT_CUDA_CHECK(cudaMalloc(&data, bytes));
  return Allocation(data, [](void* p) { cudaFree(p); });
}

void* CudaBackend::stream_handle(StreamId id) const { return stream(id); }

int CudaBackend::call_on(StreamId id, const std::function<int(void* stream)>& call) {
  const int status = call(stream(id));
  // A failed launch inside the call is the call's error, not the next check's.
  FACT_CUDA_CHECK(cudaGetLastError());
  return status;
}

void CudaBackend::delay(StreamId id, int64_t nanoseconds) {
  if (nanoseconds > 0) launch_spin_kernel(nanoseconds, stream(id));
}

void CudaBackend::synchronize(StreamId id) { FACT_CUDA_CHECK(cudaStreamSynchronize(stream(id))); }

void CudaBackend::synchronize_all(int64_t settle_ns) {
  FACT_CUDA_CHECK(cudaDeviceSynchronize());
  if (settle_ns > 0) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(settle_ns));
    FACT_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  FACT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, primary()));
  FACT_CUDA_CHECK(cudaStreamSynchronize(primary()));
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
  FACT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, primary()));
  FACT_CUDA_CHECK(cudaStreamSynchronize(primary()));
}

void CudaBackend::fill_bytes(void* data, uint8_t value, size_t bytes, StreamId id) {
  FACT_CUDA_CHECK(cudaMemsetAsync(data, value, bytes, stream(id)));
}

void CudaBackend::fill_poison(void* data, ElementType type, int64_t count, StreamId id) {
  launch_fill_poison(data, type, count, stream(id));
}

void CudaBackend::fill_uniform(void* data, ElementType type, int64_t count, uint64_t seed, float scale) {
  launch_fill_uniform(data, type, count, seed, scale, primary());
  FACT_CUDA_CHECK(cudaStreamSynchronize(primary()));
}

int64_t CudaBackend::count_not_poison(const void* data, ElementType type, int64_t count) {
  Scratch* scratch = scratch_.as<Scratch>();
  FACT_CUDA_CHECK(cudaMemsetAsync(&scratch->counter, 0, sizeof(unsigned long long), primary()));
  launch_count_not_poison(data, type, count, &scratch->counter, primary());
  unsigned long long counted = 0;
  FACT_CUDA_CHECK(cudaMemcpyAsync(&counted, &scratch->counter, sizeof counted, cudaMemcpyDeviceToHost, primary()));
  FACT_CUDA_CHECK(cudaStreamSynchronize(primary()));
  return int64_t(counted);
}

uint64_t CudaBackend::checksum(const void* data, size_t bytes) {
  return checksum_of(data, bytes, &scratch_.as<Scratch>()->counter, primary());
}

ErrorSums CudaBackend::compare(const StridedView& out, const double* ref) {
  Scratch* scratch = scratch_.as<Scratch>();
  FACT_CUDA_CHECK(cudaMemsetAsync(&scratch->sums, 0, sizeof(ErrorSums), primary()));
  launch_compare_strided(out, ref, &scratch->sums, primary());
  ErrorSums sums;
  FACT_CUDA_CHECK(cudaMemcpyAsync(&sums, &scratch->sums, sizeof sums, cudaMemcpyDeviceToHost, primary()));
  FACT_CUDA_CHECK(cudaStreamSynchronize(primary()));
  return sums;
}

std::vector<TimingStats> CudaBackend::time(const std::vector<std::function<void(void* stream)>>& launches,
                                           const TimingOptions& options) {
  std::vector<std::function<void(cudaStream_t)>> on_stream;
  for (const auto& launch : launches) {
    on_stream.push_back([&launch](cudaStream_t s) { launch(s); });
  }
  return time_interleaved(on_stream, primary(), options, flusher_ ? &*flusher_ : nullptr);
}

nlohmann::json CudaBackend::describe_timing(const TimingOptions& options) {
  return describe(options, flusher_ ? &*flusher_ : nullptr);
}

}  // namespace fact::runtime
