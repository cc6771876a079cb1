// A fake problem kind for testing the verifier on the host: y[i] = scale · x[i] over n float32
// elements, y strided (stride 2: the odd elements are gaps no call may write). Its kernels are
// plain functions of the FACT C ABI's shape, each misbehaving in one way (fake_kernels.hpp).
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "fact/runtime/verify_case.hpp"

namespace fact::runtime::test {

inline constexpr uint32_t kFakeKindId = fact_kind_id("fake_scale");

struct FakeArgs {
  FactCallHeader header;
  const float* x;
  float* y;
  int64_t n;
  int64_t y_stride;
  float scale;
};

class FakeComputation final : public Computation {
 public:
  FakeComputation(int64_t n, float scale) : n_(n), scale_(scale) {}
  ArgBytes arguments(const BufferSet& buffers) const override {
    ArgBytes bytes(sizeof(FakeArgs));
    FakeArgs args{};
    args.header = {FACT_ABI_VERSION, kFakeKindId, uint32_t(sizeof(FakeArgs)), 0};
    args.x = static_cast<const float*>(buffers[0]);
    args.y = static_cast<float*>(buffers[1]);
    args.n = n_;
    args.y_stride = 2;
    args.scale = scale_;
    std::memcpy(bytes.data(), &args, sizeof args);
    return bytes;
  }
  void reference(VerifyBackend&, const BufferSet& buffers, const std::vector<double*>& refs) const override {
    const float* x = static_cast<const float*>(buffers[0]);
    for (int64_t i = 0; i < n_; ++i) refs[0][i] = double(scale_) * double(x[i]);
  }
  std::string reference_key() const override { return std::to_string(scale_); }

 private:
  int64_t n_;
  float scale_;
};

class FakeCase final : public VerifyCase {
 public:
  explicit FakeCase(int64_t n = 64, bool deterministic = true) : n_(n), deterministic_(deterministic) {}
  std::vector<BufferSpec> buffers() const override {
    BufferSpec x{"x", false, size_t(n_) * 4, ElementType::F32, 0, {}, {}};
    BufferSpec y{"y", true, size_t(2 * n_ - 1) * 4, ElementType::F32, 0, {n_}, {2}, gaps_writable};
    return {x, y};
  }
  bool gaps_writable = false;  // y's gaps may be written (as a result with padded rows)
  void fill_inputs(VerifyBackend& backend, const BufferSet& buffers, uint64_t seed, int) override {
    backend.fill_uniform(buffers[0], ElementType::F32, n_, seed, 1.0f);
  }
  std::shared_ptr<const Computation> computation() const override {
    return std::make_shared<FakeComputation>(n_, 1.5f);
  }
  std::optional<VariedCheck> varied() const override {
    return VariedCheck{"scale", std::make_shared<FakeComputation>(n_, -0.75f)};
  }
  double tolerance() const override { return 1e-6; }
  double flops() const override { return double(n_); }
  bool deterministic() const override { return deterministic_; }

 private:
  int64_t n_;
  bool deterministic_;
};

}  // namespace fact::runtime::test
