#include "fact/runtime/device_buffer.hpp"

#include "fact/runtime/cuda_check.hpp"

namespace fact::runtime {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) FACT_CUDA_CHECK(cudaMalloc(&data_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceBuffer dirty_workspace(size_t bytes) {
  DeviceBuffer workspace(bytes);
  if (bytes > 0) {
    FACT_CUDA_CHECK(cudaMemset(workspace.data(), 0xFF, bytes));
    FACT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return workspace;
}

CudaStream::CudaStream() {
  FACT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaStream::synchronize() const { FACT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

CudaEvent::CudaEvent() { FACT_CUDA_CHECK(cudaEventCreate(&event_)); }

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

float elapsed_ms(const CudaEvent& start, const CudaEvent& stop) {
  float ms = 0.0f;
  FACT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace fact::runtime
