// The runner's own GPU kernels against host computations. Skipped without a CUDA device.
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "tests/cpp/runtime/runtime_test_support.hpp"
#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/device_kernels.hpp"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/kind/reference_host.hpp"
#include "patterns/gemm/runtime/gemm_case.hpp"
#include "patterns/gemm/runtime/gemm_verify_case.hpp"

namespace fact::runtime {
namespace {

using core::PrecisionMode;
using gemm::Activation;
using gemm::GemmProblem;
using gemm::Layout;
using graph::DType;
using Kind = gemm::EpilogueStep::Kind;

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

struct ReferenceCase {
  Layout a, b, d;
  Activation act;
};

class GpuReference : public ::testing::TestWithParam<ReferenceCase> {};

template <typename T>
std::vector<T> random_values(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<T> v(n);
  for (T& x : v) x = dist(rng);
  return v;
}

// The GPU's float64 reference against the kind's host reference (reference_host.cpp, which
// computes from the same FactGemmArgs a kernel gets), with every step kind: two biases, a scale
// and a constant between other steps, two activations with their own parameters, a residual and
// a product with two M×N operands, every operand dtype.
TEST_P(GpuReference, MatchesTheHostReferenceOfTheArgumentImage) {
  FACT_REQUIRE_GPU();
  const ReferenceCase rc = GetParam();
  gemm::GemmSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = DType::Float32;
  spec.a_layout = rc.a;
  spec.b_layout = rc.b;
  spec.d_layout = rc.d;
  spec.batched = true;
  spec.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                   {Kind::Scale, Activation::Identity, DType::Unknown},
                   {Kind::Activation, rc.act, DType::Unknown},
                   {Kind::Residual, Activation::Identity, DType::Float32},
                   {Kind::AddScalar, Activation::Identity, DType::Unknown},
                   {Kind::Activation, Activation::HardTanh, DType::Unknown},
                   {Kind::Multiply, Activation::Identity, DType::Float16},
                   {Kind::Bias, Activation::Identity, DType::Float32}};
  const gemm::GemmCase c = gemm::with_adversarial_constants(gemm::make_gemm_case(
      spec, gemm::make_gemm_problem({67, 45, 83, 2}, DType::Float32, "", "tn"),
      PrecisionMode::Strict));
  const GemmProblem& p = c.problem;
  if (rc.d == Layout::RowMajor) ASSERT_EQ(p.d.ld, p.n);

  std::mt19937 rng(11);
  const auto a = random_values<float>(rng, p.m * p.k * p.batch);
  const auto b = random_values<float>(rng, p.k * p.n * p.batch);
  const auto residual = random_values<float>(rng, p.m * p.n * p.batch);
  std::vector<uint16_t> bias_bits(p.n);  // bf16 in 0.5 .. 1
  for (uint16_t& bits : bias_bits) bits = static_cast<uint16_t>(0x3F00 + rng() % 0x100);
  std::vector<uint16_t> product_bits(p.m * p.n * p.batch);  // fp16 in 0.5 .. 2
  for (uint16_t& bits : product_bits) bits = static_cast<uint16_t>(0x3800 + rng() % 0x800);
  const auto bias2 = random_values<float>(rng, p.n);
  DeviceBuffer da = upload(a), db = upload(b), dres = upload(residual), dbias = upload(bias_bits),
               dprod = upload(product_bits), dbias2 = upload(bias2);
  DeviceBuffer out(p.m * p.n * p.batch * sizeof(double));
  std::array<const void*, FACT_GEMM_MAX_STEPS> device_operands{};
  device_operands[0] = dbias.data();
  device_operands[3] = dres.data();
  device_operands[6] = dprod.data();
  device_operands[7] = dbias2.data();
  gemm::launch_reference_gemm(
      gemm::reference_params(p, da.data(), db.data(), device_operands, out.as<double>()), nullptr);
  FACT_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download<double>(out);

  // The host reference from the call's argument image, written as float64 row-major.
  FactGemmArgs args = gemm::gemm_args(p);
  std::vector<double> expected(p.m * p.n * p.batch);
  args.a = a.data();
  args.b = b.data();
  args.d = expected.data();
  args.d_type = FACT_DTYPE_F64;
  args.ldd = p.n;
  args.stride_d = p.m * p.n;
  args.steps[0].operand = bias_bits.data();
  args.steps[3].operand = residual.data();
  args.steps[6].operand = product_bits.data();
  args.steps[7].operand = bias2.data();
  // The host reference reads M×N operands row-major: give it row-major views when D is not.
  std::vector<float> residual_rows(residual.size());
  std::vector<uint16_t> product_rows(product_bits.size());
  if (rc.d == Layout::ColumnMajor) {
    for (int64_t l = 0; l < p.batch; ++l)
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          const int64_t col = l * p.m * p.n + j * p.m + i, row = l * p.m * p.n + i * p.n + j;
          residual_rows[row] = residual[col];
          product_rows[row] = product_bits[col];
        }
    args.steps[3].operand = residual_rows.data();
    args.steps[6].operand = product_rows.data();
    args.steps[3].ld = args.steps[6].ld = p.n;
  }
  ASSERT_EQ(gemm::reference_gemm_host(args), FACT_OK);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 1e-12 * std::max(1.0, scale));
}

INSTANTIATE_TEST_SUITE_P(
    LayoutsAndActivations, GpuReference,
    ::testing::Values(ReferenceCase{Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, Activation::GeluErf},
                      ReferenceCase{Layout::ColumnMajor, Layout::RowMajor, Layout::RowMajor, Activation::GeluTanh},
                      ReferenceCase{Layout::RowMajor, Layout::RowMajor, Layout::ColumnMajor, Activation::SiLU},
                      ReferenceCase{Layout::ColumnMajor, Layout::ColumnMajor, Layout::ColumnMajor, Activation::Sigmoid},
                      ReferenceCase{Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, Activation::LeakyReLU},
                      ReferenceCase{Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, Activation::Tanh},
                      ReferenceCase{Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, Activation::ReLU}));

// Two batch modes laid out as a permuted 4-D tensor has them ([batch][outer] for A and D, a
// residual shared by the kernel's batches, a bias per outer batch scaled by its value): the GPU
// reference against the host reference of the same argument image.
TEST(GpuReferenceTwoModes, MatchesTheHostReference) {
  FACT_REQUIRE_GPU();
  gemm::GemmSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = DType::Float32;
  spec.batched = true;
  spec.epilogue = {{Kind::Bias, Activation::Identity, DType::Float32},
                   {Kind::Activation, Activation::Tanh, DType::Unknown},
                   {Kind::Residual, Activation::Identity, DType::Float32}};
  gemm::GemmCase c = gemm::with_adversarial_constants(gemm::make_gemm_case(
      spec, gemm::make_gemm_problem({19, 24, 13, 3, 2}, DType::Float32, "", "tn"),
      PrecisionMode::Strict));
  GemmProblem& p = c.problem;
  const int64_t mk = p.m * p.k, mn = p.m * p.n;
  p.a.batch_stride = 2 * mk;  // [batch][outer][M][K]
  p.a.outer_batch_stride = mk;
  p.d.ld = p.n;
  p.d.batch_stride = 2 * mn;
  p.d.outer_batch_stride = mn;
  p.epilogue[0].operand_outer_batch_stride = p.n;  // one bias per outer batch
  p.epilogue[2].operand_ld = p.n;
  p.epilogue[2].operand_batch_stride = 0;          // one residual per outer batch
  p.epilogue[2].operand_outer_batch_stride = mn;
  std::mt19937 rng(5);
  const auto a = random_values<float>(rng, 6 * mk);
  const auto b = random_values<float>(rng, 6 * p.k * p.n);
  const auto bias = random_values<float>(rng, 2 * p.n);
  const auto residual = random_values<float>(rng, 2 * mn);
  DeviceBuffer da = upload(a), db = upload(b), dbias = upload(bias), dres = upload(residual);
  DeviceBuffer out(6 * mn * sizeof(double));
  std::array<const void*, FACT_GEMM_MAX_STEPS> device_operands{};
  device_operands[0] = dbias.data();
  device_operands[2] = dres.data();
  gemm::launch_reference_gemm(
      gemm::reference_params(p, da.data(), db.data(), device_operands, out.as<double>()), nullptr);
  FACT_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download<double>(out);  // dense [outer][batch][M][N]

  FactGemmArgs args = gemm::gemm_args(p);
  std::vector<double> expected(6 * mn);
  args.a = a.data();
  args.b = b.data();
  args.d = expected.data();
  args.d_type = FACT_DTYPE_F64;
  args.stride_d = mn;  // written dense [outer][batch] like the GPU reference
  args.outer_stride_d = 3 * mn;
  args.steps[0].operand = bias.data();
  args.steps[2].operand = residual.data();
  ASSERT_EQ(gemm::reference_gemm_host(args), FACT_OK);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 1e-12 * std::max(1.0, scale));
}

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
  gemm::MatrixView view{dout.data(), ElementType::F32, n, 1, m * n};
  gemm::launch_compare(view, dref.as<double>(), m, n, batch, 1, sums.as<ErrorSums>(), nullptr);
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
