// The runner's own GPU kernels against host computations. Skipped without a CUDA device.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/device_kernels.hpp"
#include "fact/runtime/gemm_case.hpp"
#include "fact/runtime/gemm_harness.hpp"
#include "runtime_test_support.hpp"

namespace fact::runtime {
namespace {

using discover::Activation;
using discover::GemmProblem;
using discover::Layout;
using graph::DType;
using Kind = discover::EpilogueStep::Kind;

template <typename T>
std::vector<T> download(const DeviceBuffer& buffer) {
  std::vector<T> host(buffer.bytes() / sizeof(T));
  FACT_CUDA_CHECK(cudaMemcpy(host.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer buffer(host.size() * sizeof(T));
  FACT_CUDA_CHECK(cudaMemcpy(buffer.data(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

double bf16_to_double(uint16_t bits) {
  const uint32_t word = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

TEST(GpuKernels, UniformFillIsInRangeSeededAndNeverZeroFilled) {
  FACT_REQUIRE_GPU();
  const int64_t count = 100003;
  DeviceBuffer a(count * 4), b(count * 4), c(count * 4);
  launch_fill_uniform(a.data(), ElementType::F32, count, 42, 0.5f, nullptr);
  launch_fill_uniform(b.data(), ElementType::F32, count, 42, 0.5f, nullptr);
  launch_fill_uniform(c.data(), ElementType::F32, count, 43, 0.5f, nullptr);
  FACT_CUDA_CHECK(cudaDeviceSynchronize());
  const auto ha = download<float>(a), hb = download<float>(b), hc = download<float>(c);
  double sum = 0, sum_sq = 0;
  int64_t zeros = 0, same_as_other_seed = 0;
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_GE(ha[i], -0.5f);
    ASSERT_LT(ha[i], 0.5f);
    sum += ha[i];
    sum_sq += double(ha[i]) * ha[i];
    zeros += ha[i] == 0.0f;
    same_as_other_seed += ha[i] == hc[i];
  }
  EXPECT_EQ(ha, hb);                         // same seed, same values
  EXPECT_LT(same_as_other_seed, count / 1000);  // another seed, other values
  EXPECT_EQ(zeros, 0);
  EXPECT_NEAR(sum / count, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / count, 0.25 / 3.0, 0.005);  // variance of U(-0.5, 0.5)

  DeviceBuffer h(count * 2);
  launch_fill_uniform(h.data(), ElementType::BF16, count, 42, 1.0f, nullptr);
  FACT_CUDA_CHECK(cudaDeviceSynchronize());
  const auto hh = download<uint16_t>(h);
  for (int64_t i = 0; i < count; ++i) {
    const double v = bf16_to_double(hh[i]);
    ASSERT_LE(std::abs(v), 1.0);
    ASSERT_NEAR(v, 2.0 * ha[i], 2.0 * std::abs(ha[i]) / 128.0 + 1e-7);  // same draw, bf16-rounded
  }
}

TEST(GpuKernels, PoisonIsCountedAndChecksumsSeeEveryByte) {
  FACT_REQUIRE_GPU();
  DeviceBuffer buffer(4099 * 2);
  DeviceBuffer counter(sizeof(unsigned long long));
  auto* count = counter.as<unsigned long long>();
  launch_fill_poison(buffer.data(), ElementType::BF16, 4099, nullptr);
  FACT_CUDA_CHECK(cudaMemset(count, 0, sizeof(unsigned long long)));
  launch_count_not_poison(buffer.data(), ElementType::BF16, 4099, count, nullptr);
  unsigned long long host = 99;
  FACT_CUDA_CHECK(cudaMemcpy(&host, count, sizeof host, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host, 0u);
  const uint16_t one = 0x3F80;  // bf16 1.0
  FACT_CUDA_CHECK(cudaMemcpy(buffer.as<uint16_t>() + 4098, &one, 2, cudaMemcpyHostToDevice));
  FACT_CUDA_CHECK(cudaMemset(count, 0, sizeof(unsigned long long)));
  launch_count_not_poison(buffer.data(), ElementType::BF16, 4099, count, nullptr);
  FACT_CUDA_CHECK(cudaMemcpy(&host, count, sizeof host, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host, 1u);

  auto checksum = [&](const DeviceBuffer& b) {
    FACT_CUDA_CHECK(cudaMemset(count, 0, sizeof(unsigned long long)));
    launch_checksum(b.data(), b.bytes(), count, nullptr);
    unsigned long long sum = 0;
    FACT_CUDA_CHECK(cudaMemcpy(&sum, count, sizeof sum, cudaMemcpyDeviceToHost));
    return sum;
  };
  DeviceBuffer bytes(1027);  // not a multiple of 4: the tail counts too
  FACT_CUDA_CHECK(cudaMemset(bytes.data(), 7, 1027));
  const auto before = checksum(bytes);
  EXPECT_EQ(checksum(bytes), before);
  for (size_t offset : {size_t{0}, size_t{513}, size_t{1026}}) {
    FACT_CUDA_CHECK(cudaMemset(bytes.as<char>() + offset, 8, 1));
    EXPECT_NE(checksum(bytes), before) << offset;
    FACT_CUDA_CHECK(cudaMemset(bytes.as<char>() + offset, 7, 1));
  }
  // Swapping two words changes it too (the hash depends on position).
  FACT_CUDA_CHECK(cudaMemset(bytes.as<char>() + 0, 1, 4));
  const auto swapped_a = checksum(bytes);
  FACT_CUDA_CHECK(cudaMemset(bytes.as<char>() + 0, 7, 4));
  FACT_CUDA_CHECK(cudaMemset(bytes.as<char>() + 8, 1, 4));
  EXPECT_NE(checksum(bytes), swapped_a);
}

double host_activation(Activation a, double x, double p0, double p1) {
  switch (a) {
    case Activation::Identity: return x;
    case Activation::ReLU: return std::max(x, 0.0);
    case Activation::GeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::SiLU: return x / (1 + std::exp(-x));
    case Activation::Sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::LeakyReLU: return x >= 0 ? x : p0 * x;
    case Activation::HardTanh: return std::min(std::max(x, p0), p1);
  }
  return x;
}

struct ReferenceCase {
  Layout a, b, d;
  Activation act;
};

class GpuReference : public ::testing::TestWithParam<ReferenceCase> {};

// The float64 reference kernel against a host triple loop, with every step kind.
TEST_P(GpuReference, MatchesHostComputation) {
  FACT_REQUIRE_GPU();
  const ReferenceCase rc = GetParam();
  realize::KernelSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = DType::Float32;
  spec.a_layout = rc.a;
  spec.b_layout = rc.b;
  spec.d_layout = rc.d;
  spec.batched = true;
  realize::EpilogueOpSpec bias{Kind::Bias, Activation::Identity, DType::BFloat16};
  realize::EpilogueOpSpec act{Kind::Activation, rc.act, DType::Unknown};
  realize::EpilogueOpSpec residual{Kind::Residual, Activation::Identity, DType::Float32};
  spec.epilogue = {bias, act, residual};
  const GemmCase c = make_gemm_case(spec, parse_problem_size("m=67,n=45,k=83,batch=2,beta=-0.5,alpha=0.75"),
                                    PrecisionMode::Strict);
  const GemmProblem& p = c.problem;

  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  const auto a = random(p.m * p.k * p.batch), b = random(p.k * p.n * p.batch);
  const auto cm = random(p.m * p.n * p.batch);
  std::vector<uint16_t> bias_bits(p.n);
  for (uint16_t& bits : bias_bits) bits = static_cast<uint16_t>(0x3F00 + rng() % 0x100);  // 0.5..1
  DeviceBuffer da = upload(a), db = upload(b), dc = upload(cm), dbias = upload(bias_bits);
  DeviceBuffer out(p.m * p.n * p.batch * sizeof(double));
  launch_reference_gemm(reference_params(p, da.data(), db.data(), dc.data(), dbias.data(), out.as<double>()),
                        nullptr);
  FACT_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download<double>(out);

  auto at = [](const std::vector<float>& v, const discover::GemmOperand& o, int64_t l, int64_t r,
               int64_t col) {
    return double(v[l * o.batch_stride + (o.layout == Layout::RowMajor ? r * o.ld + col : col * o.ld + r)]);
  };
  const double p0 = p.epilogue[1].p0, p1 = p.epilogue[1].p1;
  double worst = 0;
  for (int64_t l = 0; l < p.batch; ++l)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < p.k; ++kk) acc += at(a, p.a, l, i, kk) * at(b, p.b, l, kk, j);
        double x = p.alpha * acc + bf16_to_double(bias_bits[j]);
        x = host_activation(rc.act, x, p0, p1);
        x += -0.5 * at(cm, p.d, l, i, j);
        worst = std::max(worst, std::abs(got[(l * p.m + i) * p.n + j] - x));
      }
  EXPECT_LT(worst, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    LayoutsAndActivations, GpuReference,
    ::testing::Values(ReferenceCase{Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, Activation::GeluErf},
                      ReferenceCase{Layout::ColumnMajor, Layout::RowMajor, Layout::RowMajor, Activation::GeluTanh},
                      ReferenceCase{Layout::RowMajor, Layout::RowMajor, Layout::ColumnMajor, Activation::SiLU},
                      ReferenceCase{Layout::ColumnMajor, Layout::ColumnMajor, Layout::ColumnMajor, Activation::Sigmoid},
                      ReferenceCase{Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, Activation::LeakyReLU},
                      ReferenceCase{Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, Activation::HardTanh},
                      ReferenceCase{Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, Activation::ReLU}));

TEST(GpuKernels, CompareCountsUnwrittenNonFiniteAndError) {
  FACT_REQUIRE_GPU();
  const int64_t m = 33, n = 17, batch = 2, total = m * n * batch;
  std::vector<double> ref(total);
  std::vector<float> out(total);
  for (int64_t i = 0; i < total; ++i) {
    ref[i] = std::sin(double(i));
    out[i] = static_cast<float>(ref[i]);
  }
  out[5] = static_cast<float>(ref[5] + 0.5);
  uint32_t poison = kPoisonF32;
  std::memcpy(&out[7], &poison, 4);
  out[9] = std::numeric_limits<float>::quiet_NaN();
  out[11] = std::numeric_limits<float>::infinity();
  DeviceBuffer dref = upload(ref), dout = upload(out), sums(sizeof(ErrorSums));
  FACT_CUDA_CHECK(cudaMemset(sums.data(), 0, sizeof(ErrorSums)));
  MatrixView view{dout.data(), ElementType::F32, n, 1, m * n};
  launch_compare(view, dref.as<double>(), m, n, batch, sums.as<ErrorSums>(), nullptr);
  ErrorSums host{};
  FACT_CUDA_CHECK(cudaMemcpy(&host, sums.data(), sizeof host, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host.unwritten, 1u);
  EXPECT_EQ(host.nonfinite, 2u);
  EXPECT_EQ(host.ref_nonfinite, 0u);
  EXPECT_NEAR(host.max_abs_diff, 0.5, 1e-6);
  double ref_sq = 0;
  for (double r : ref) ref_sq += r * r;
  EXPECT_NEAR(host.sum_sq_ref, ref_sq, 1e-9 * ref_sq);
  EXPECT_NEAR(host.sum_sq_diff, 0.25, 1e-5);
}

}  // namespace
}  // namespace fact::runtime
