// Owning wrappers for device memory, streams and events. Constructors throw CudaError;
// destructors never throw (a failed free during error unwinding is ignored).
#pragma once
#include <cstddef>
#include <utility>

#include <cuda_runtime_api.h>

namespace fact::runtime {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // bytes == 0: no allocation, data() == nullptr
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaStream {
 public:
  CudaStream();  // a non-blocking stream (does not synchronize with the legacy default stream)
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent();
  ~CudaEvent();
  CudaEvent(CudaEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A kernel's workspace of `bytes`, every byte 0xFF and the fill finished before it returns (the
// runners' streams are non-blocking, so it must not be left queued on the legacy stream): a
// kernel that relies on a zeroed workspace fails verification.
DeviceBuffer dirty_workspace(size_t bytes);

// Milliseconds between two recorded, completed events.
float elapsed_ms(const CudaEvent& start, const CudaEvent& stop);

// Number of visible CUDA devices; 0 when there is no driver or no device (never throws).
int cuda_device_count() noexcept;

}  // namespace fact::runtime
