// The verifier's backend in host memory (verify_backend.hpp): for kernel libraries built for
// the host (the agent's CPU path, `"device": "host"` in fact_kernel_info) and for testing the
// verification sequence without a GPU. Calls are synchronous; the secondary "stream" is a second
// thread (a kernel relying on thread-local state, or leaving work on a thread of its own, is
// caught there); timing uses the steady clock.
#pragma once
#include "fact/runtime/timing.hpp"
#include "fact/runtime/verify_backend.hpp"

namespace fact::runtime {

class HostBackend final : public VerifyBackend {
 public:
  std::string name() const override { return "host"; }
  Allocation allocate(size_t bytes) override;
  void* stream_handle(StreamId) const override { return nullptr; }
  int call_on(StreamId stream, const std::function<int(void* stream)>& call) override;
  void delay(StreamId, int64_t) override {}
  void synchronize(StreamId) override {}
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
};

}  // namespace fact::runtime
