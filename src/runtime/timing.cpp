#include "fact/runtime/timing.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "fact/runtime/cuda_check.hpp"

namespace fact::runtime {

static size_t l2_flush_bytes() {
  int device = 0;
  FACT_CUDA_CHECK(cudaGetDevice(&device));
  int l2 = 0;
  FACT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const size_t floor = size_t{64} << 20;  // in case the attribute reads 0
  return std::max(floor, size_t(2) * static_cast<size_t>(l2));
}

L2Flusher::L2Flusher() : buffer_(l2_flush_bytes()) {}

void L2Flusher::flush(cudaStream_t stream) {
  generation_ = (generation_ + 1) & 0xff;
  FACT_CUDA_CHECK(cudaMemsetAsync(buffer_.data(), generation_, buffer_.bytes(), stream));
}

TimingStats time_launches(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                          const TimingOptions& options, L2Flusher* flusher) {
  return time_interleaved({launch}, stream, options, flusher).front();
}

std::vector<TimingStats> time_interleaved(const std::vector<std::function<void(cudaStream_t)>>& launches,
                                          cudaStream_t stream, const TimingOptions& options,
                                          L2Flusher* flusher) {
  const bool flush = options.flush_l2 && flusher != nullptr;
  for (int i = 0; i < options.warmup_runs; ++i) {
    for (const auto& launch : launches) {
      if (flush) flusher->flush(stream);
      launch(stream);
    }
  }
  FACT_CUDA_CHECK(cudaStreamSynchronize(stream));

  constexpr int kBatch = 10;
  std::vector<CudaEvent> starts(kBatch), stops(kBatch);
  std::vector<std::vector<double>> samples(launches.size());
  std::vector<double> measured_ms(launches.size(), 0.0);
  std::vector<bool> done(launches.size(), false);
  const auto wall_start = std::chrono::steady_clock::now();
  const int min_runs = std::max(1, options.min_runs);
  const int wall_floor = std::min(min_runs, 10);
  size_t remaining = launches.size();
  while (remaining > 0) {
    for (size_t l = 0; l < launches.size(); ++l) {
      if (done[l]) continue;
      for (int i = 0; i < kBatch; ++i) {
        if (flush) flusher->flush(stream);
        FACT_CUDA_CHECK(cudaEventRecord(starts[i].get(), stream));
        launches[l](stream);
        FACT_CUDA_CHECK(cudaEventRecord(stops[i].get(), stream));
      }
      FACT_CUDA_CHECK(cudaEventSynchronize(stops[kBatch - 1].get()));
      for (int i = 0; i < kBatch; ++i) {
        const double ms = elapsed_ms(starts[i], stops[i]);
        samples[l].push_back(ms);
        measured_ms[l] += ms;
      }
    }
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    for (size_t l = 0; l < launches.size(); ++l) {
      if (done[l]) continue;
      const int runs = static_cast<int>(samples[l].size());
      if (runs >= options.max_runs || (runs >= min_runs && measured_ms[l] >= options.min_time_s * 1e3) ||
          (runs >= wall_floor && wall_s >= options.max_wall_s)) {
        done[l] = true;
        --remaining;
      }
    }
  }
  std::vector<TimingStats> stats;
  for (auto& s : samples) stats.push_back(summarize(std::move(s)));
  return stats;
}

nlohmann::json describe(const TimingOptions& options, const L2Flusher* flusher) {
  return {{"method", "cuda_events"},
          {"warmup_runs", options.warmup_runs},
          {"min_runs", options.min_runs},
          {"min_time_s", options.min_time_s},
          {"max_runs", options.max_runs},
          {"l2_flush_bytes", (options.flush_l2 && flusher) ? flusher->bytes() : 0}};
}

}  // namespace fact::runtime
