// Timing of GPU work with CUDA events: warm-up, then many runs, each preceded by an L2 flush,
// summarized as median and spread (timing_stats.hpp).
#pragma once
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/timing_stats.hpp"

namespace fact::runtime {

struct TimingOptions {
  int warmup_runs = 5;
  int min_runs = 30;          // at least this many timed runs ...
  double min_time_s = 0.5;    // ... and at least this much measured time,
  int max_runs = 5000;        // unless this many runs were taken
  double max_wall_s = 20.0;   // or this much wall time passed (after min(min_runs, 10) runs)
  bool flush_l2 = true;       // write a buffer of 2× L2 before every run
};

// A device buffer twice the L2 size of the current device; flush() overwrites it so the next
// kernel starts with no operand in L2.
class L2Flusher {
 public:
  L2Flusher();  // throws CudaError
  void flush(cudaStream_t stream);
  size_t bytes() const { return buffer_.bytes(); }

 private:
  DeviceBuffer buffer_;
  int generation_ = 0;
};

// Times `launch` (which queues one run on the stream it is given and throws on failure) on
// `stream`: options.warmup_runs untimed runs, then timed runs in batches, each run bracketed by
// its own pair of events with the L2 flush queued before the start event. Throws CudaError.
TimingStats time_launches(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                          const TimingOptions& options, L2Flusher* flusher);

// Times several launches on `stream` interleaved, so that drifting clocks and temperature reach
// all of them alike: options.warmup_runs untimed runs of each, then rounds in which every launch
// not yet done takes a batch of 10 runs (each bracketed by its own events, the L2 flush queued
// before the start event), until each has min_runs runs and min_time_s of measured time, or
// max_runs runs, or max_wall_s passed (after min(min_runs, 10) runs each). One TimingStats per
// launch, in order. Throws CudaError (and what a launch throws).
std::vector<TimingStats> time_interleaved(const std::vector<std::function<void(cudaStream_t)>>& launches,
                                          cudaStream_t stream, const TimingOptions& options,
                                          L2Flusher* flusher);

// {"method": "cuda_events", "warmup_runs": .., "min_runs": .., "min_time_s": ..,
//  "l2_flush_bytes": ..} — recorded in reports so results say how they were taken.
nlohmann::json describe(const TimingOptions& options, const L2Flusher* flusher);

}  // namespace fact::runtime
