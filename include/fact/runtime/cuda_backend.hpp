// The verifier's backend on the current CUDA device (verify_backend.hpp): device memory, two
// non-blocking streams, the runner's kernels (device_kernels.hpp) for fills, poison counts,
// checksums and comparisons, and the CUDA-event timer with its L2 flush (timing.hpp).
#pragma once
#include <memory>
#include <optional>

#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/timing.hpp"
#include "fact/runtime/verify_backend.hpp"

namespace fact::runtime {

class CudaBackend final : public VerifyBackend {
 public:
  // `flush_l2`: allocate the L2 flusher for timing (2× the L2 size). Throws CudaError.
  explicit CudaBackend(bool flush_l2 = true);

  std::string name() const override { return "cuda"; }
  Allocation allocate(size_t bytes) override;
  void* stream_handle(StreamId stream) const override;
  int call_on(StreamId stream, const std::function<int(void* stream)>& call) override;
  void delay(StreamId stream, int64_t nanoseconds) override;
  void synchronize(StreamId stream) override;
  void synchronize_all(int64_t settle_ns) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void fill_bytes(void* data, uint8_t value, size_t bytes, StreamId stream) override;
  void fill_poison(void* data, ElementType type, int64_t count, StreamId stream) override;
  void fill_uniform(void* data, ElementType type, int64_t count, uint64_t seed, float scale) override;
  int64_t count_not_poison(const void* data, ElementType type, int64_t count) override;
  uint64_t checksum(const void* data, size_t bytes) override;
  ErrorSums compare(const StridedView& out, const double* ref) override;
  std::vector<TimingStats> time(const std::vector<std::function<void(void* stream)>>& launches,
                                const TimingOptions& options) override;
  nlohmann::json describe_timing(const TimingOptions& options) override;

  cudaStream_t primary() const { return primary_.get(); }
  cudaStream_t secondary() const { return secondary_.get(); }

 private:
  cudaStream_t stream(StreamId id) const { return id == StreamId::Secondary ? secondary_.get() : primary_.get(); }

  CudaStream primary_, secondary_;
  DeviceBuffer scratch_;  // ErrorSums, then a counter
  std::optional<L2Flusher> flusher_;
};

}  // namespace fact::runtime
