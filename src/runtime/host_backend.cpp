#include "fact/runtime/host_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <stdexcept>
#include <thread>

namespace fact::runtime {

namespace {

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// float → bf16 / fp16 bits, rounding to nearest even (finite values in range only: the fills'
// magnitudes are small).
uint16_t to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

uint16_t to_fp16(float v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const float a = std::fabs(v);
  if (a < 6.103515625e-05f) {  // subnormal: units of 2^-24
    return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f)));
  }
  int exponent;
  const float mantissa = std::frexp(a, &exponent);  // a = mantissa · 2^exponent, mantissa in [0.5, 1)
  uint32_t m = uint32_t(std::nearbyint((mantissa * 2.0f - 1.0f) * 1024.0f));
  int e = exponent - 1 + 15;
  if (m == 1024) {
    m = 0;
    ++e;
  }
  return uint16_t(sign | uint16_t(e << 10) | uint16_t(m));
}

}  // namespace

Allocation HostBackend::allocate(size_t bytes) {
  // 256-byte aligned like cudaMalloc, so that a kernel's alignment assumptions hold on both.
  void* data = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (data == nullptr) throw std::bad_alloc();
  return Allocation(data, [](void* p) { std::free(p); });
}

int HostBackend::call_on(StreamId stream, const std::function<int(void* stream)>& call) {
  if (stream == StreamId::Primary) return call(nullptr);
  int status = 0;
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      status = call(nullptr);
    } catch (...) {
      error = std::current_exception();
    }
  });
  worker.join();
  if (error) std::rethrow_exception(error);
  return status;
}

void HostBackend::synchronize_all(int64_t settle_ns) {
  if (settle_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(settle_ns));
}

void HostBackend::upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void HostBackend::download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

void HostBackend::fill_bytes(void* data, uint8_t value, size_t bytes, StreamId) { std::memset(data, value, bytes); }

void HostBackend::fill_poison(void* data, ElementType type, int64_t count, StreamId) {
  const uint64_t bits = poison_bits(type);
  const size_t width = size_t(element_bytes(type));
  for (int64_t i = 0; i < count; ++i) std::memcpy(static_cast<char*>(data) + i * width, &bits, width);
}

void HostBackend::fill_uniform(void* data, ElementType type, int64_t count, uint64_t seed, float scale) {
  if (type != ElementType::F32 && type != ElementType::BF16 && type != ElementType::F16) {
    throw std::invalid_argument("fill_uniform: float32, bf16 or fp16 elements only");
  }
  std::mt19937_64 numbers(seed);
  for (int64_t i = 0; i < count; ++i) {
    const float unit = (float(numbers() >> 40) + 0.5f) * (1.0f / 16777216.0f);
    const float v = (2.0f * unit - 1.0f) * scale;
    if (type == ElementType::F32) {
      static_cast<float*>(data)[i] = v;
    } else {
      const uint16_t bits = type == ElementType::BF16 ? to_bf16(v) : to_fp16(v);
      std::memcpy(static_cast<char*>(data) + 2 * i, &bits, 2);
    }
  }
}

int64_t HostBackend::count_not_poison(const void* data, ElementType type, int64_t count) {
  const size_t width = size_t(element_bytes(type));
  int64_t n = 0;
  for (int64_t i = 0; i < count; ++i) n += holds_poison(static_cast<const char*>(data) + i * width, type) ? 0 : 1;
  return n;
}

// The CUDA checksum's hash (device_fill.cu): per 4-byte word, then the tail bytes.
uint64_t HostBackend::checksum(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t sum = 0;
  const size_t words = bytes / 4;
  for (size_t i = 0; i < words; ++i) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    sum += mix64((uint64_t(w) << 32) ^ (i * 0x9E3779B97F4A7C15ull));
  }
  for (size_t i = words * 4; i < bytes; ++i) sum += mix64((uint64_t(p[i]) << 40) ^ (i + 0x5555ull));
  return sum;
}

ErrorSums HostBackend::compare(const StridedView& out, const double* ref) {
  if (out.rank < 0 || out.rank > kMaxViewRank) throw std::invalid_argument("compare: rank above 8");
  int64_t total = 1;
  for (int d = 0; d < out.rank; ++d) total *= out.shape[d];
  ErrorSums sums;
  const size_t width = size_t(element_bytes(out.type));
  for (int64_t idx = 0; idx < total; ++idx) {
    int64_t rest = idx, offset = 0;
    for (int d = out.rank - 1; d >= 0; --d) {
      offset += (rest % out.shape[d]) * out.stride[d];
      rest /= out.shape[d];
    }
    const double r = ref[idx];
    if (!std::isfinite(r)) {
      ++sums.ref_nonfinite;
      continue;
    }
    sums.sum_sq_ref += r * r;
    const char* element = static_cast<const char*>(out.data) + offset * int64_t(width);
    if (holds_poison(element, out.type)) {
      ++sums.unwritten;
      continue;
    }
    ++sums.written;
    const double o = element_to_double(element, out.type);
    if (!std::isfinite(o)) {
      ++sums.nonfinite;
      continue;
    }
    const double diff = o - r;
    sums.sum_sq_diff += diff * diff;
    sums.max_abs_diff = std::max(sums.max_abs_diff, std::fabs(diff));
  }
  return sums;
}

std::vector<TimingStats> HostBackend::time(const std::vector<std::function<void(void* stream)>>& launches,
                                           const TimingOptions& options) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < options.warmup_runs; ++i) {
    for (const auto& launch : launches) launch(nullptr);
  }
  constexpr int kBatch = 10;
  std::vector<std::vector<double>> samples(launches.size());
  std::vector<double> measured_ms(launches.size(), 0.0);
  std::vector<bool> done(launches.size(), false);
  const auto wall_start = clock::now();
  const int min_runs = std::max(1, options.min_runs);
  const int wall_floor = std::min(min_runs, 10);
  size_t remaining = launches.size();
  while (remaining > 0) {
    for (size_t l = 0; l < launches.size(); ++l) {
      if (done[l]) continue;
      for (int i = 0; i < kBatch; ++i) {
        const auto start = clock::now();
        launches[l](nullptr);
        const double ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
        samples[l].push_back(ms);
        measured_ms[l] += ms;
      }
    }
    const double wall_s = std::chrono::duration<double>(clock::now() - wall_start).count();
    for (size_t l = 0; l < launches.size(); ++l) {
      const int runs = int(samples[l].size());
      if (!done[l] && (runs >= options.max_runs || (runs >= min_runs && measured_ms[l] >= options.min_time_s * 1e3) ||
                       (runs >= wall_floor && wall_s >= options.max_wall_s))) {
        done[l] = true;
        --remaining;
      }
    }
  }
  std::vector<TimingStats> stats;
  for (auto& s : samples) stats.push_back(summarize(std::move(s)));
  return stats;
}

nlohmann::json HostBackend::describe_timing(const TimingOptions& options) {
  return {{"method", "steady_clock"},
          {"warmup_runs", options.warmup_runs},
          {"min_runs", options.min_runs},
          {"min_time_s", options.min_time_s},
          {"max_runs", options.max_runs},
          {"l2_flush_bytes", 0}};
}

}  // namespace fact::runtime
