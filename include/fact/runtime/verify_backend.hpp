// Where the verifier (verifier.hpp) runs a kernel: memory, the two streams, and the
// element-wise operations of the checks, behind one interface so that the sequence is the same
// on a GPU (cuda_backend.hpp: device memory, CUDA streams and kernels) and on the host
// (host_backend.hpp: host memory, a second thread as the "other stream", plain loops; the
// agent's CPU kernels and the CPU tests of the sequence run there).
//
// Every operation is ordered on the stream it is given and has finished when a function that
// returns a value returns. Failures throw (CudaError on a GPU, std::runtime_error on the host).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/runtime/strided_view.hpp"
#include "fact/runtime/timing_stats.hpp"

namespace fact::runtime {

struct TimingOptions;

// Which of the backend's two streams: the primary one, or the secondary one (a second
// non-blocking CUDA stream; on the host a second thread).
enum class StreamId { Primary, Secondary };

// Memory owned by a backend; freed when the last copy is destroyed.
using Allocation = std::shared_ptr<void>;

class VerifyBackend {
 public:
  virtual ~VerifyBackend() = default;
  // "cuda" or "host": the `device` a kernel library must be built for ("cuda" / "host").
  virtual std::string name() const = 0;

  // `bytes` (> 0) of memory the kernel can address.
  virtual Allocation allocate(size_t bytes) = 0;
  // The stream handle a kernel is called with (a cudaStream_t; nullptr on the host).
  virtual void* stream_handle(StreamId stream) const = 0;
  // Calls `call(stream_handle(stream))` the way a caller on that stream would: on the host the
  // secondary stream is another thread (joined before returning). Returns what `call` returns.
  virtual int call_on(StreamId stream, const std::function<int(void* stream)>& call) = 0;
  // Delays what is queued on `stream` after this by about `nanoseconds` (a spin kernel on a GPU;
  // nothing on the host, where calls are synchronous).
  virtual void delay(StreamId stream, int64_t nanoseconds) = 0;
  // Waits for `stream`; throws for an error the stream's work raised (e.g. an illegal address).
  virtual void synchronize(StreamId stream) = 0;
  // Waits for all work of the process on the device, then `settle_ns` more on the host (work a
  // kernel left on another thread gets the time to show).
  virtual void synchronize_all(int64_t settle_ns) = 0;

  // Host bytes into / out of backend memory, ordered on the primary stream and finished.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Every byte of [data, data + bytes) set to `value` (ordered on `stream`).
  virtual void fill_bytes(void* data, uint8_t value, size_t bytes, StreamId stream) = 0;
  // `count` elements at `data` set to the poison pattern of `type` (ordered on `stream`).
  virtual void fill_poison(void* data, ElementType type, int64_t count, StreamId stream) = 0;
  // data[i] uniform in [-scale, scale), a stream of numbers keyed by `seed` (float32, bf16,
  // fp16; on a GPU launch_fill_uniform's Philox4x32-10, on the host a 64-bit Mersenne twister).
  virtual void fill_uniform(void* data, ElementType type, int64_t count, uint64_t seed, float scale) = 0;
  // How many of `count` elements at `data` do not hold the poison pattern of `type`.
  virtual int64_t count_not_poison(const void* data, ElementType type, int64_t count) = 0;
  // A position-dependent 64-bit hash of the bytes (any changed byte changes it).
  virtual uint64_t checksum(const void* data, size_t bytes) = 0;
  // The comparison of `out` with `ref` (dense float64 in backend memory, row-major over out's
  // shape): launch_compare_strided's sums.
  virtual ErrorSums compare(const StridedView& out, const double* ref) = 0;

  // Times each of `launches` (each queues one call on the stream it is given and throws on
  // failure), interleaved: warm-up runs of each, then rounds in which every launch not yet done
  // takes a batch of runs, until each has options.min_runs runs and options.min_time_s of
  // measured time (or max_runs, or max_wall_s). One TimingStats per launch, in order.
  virtual std::vector<TimingStats> time(const std::vector<std::function<void(void* stream)>>& launches,
                                        const TimingOptions& options) = 0;
  // How time() measures, for reports ({"method", "warmup_runs", ..., "l2_flush_bytes"}).
  virtual nlohmann::json describe_timing(const TimingOptions& options) = 0;
};

}  // namespace fact::runtime
