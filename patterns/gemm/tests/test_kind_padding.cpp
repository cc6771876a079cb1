// Zero padding (gemm_padding.h) executed on the host: the plan's copies run element by element
// (copied_element, the function the CUDA copy kernel runs), the float64 host reference computes
// the padded call, and D must equal the unpadded call's D bit for bit — zeros along K add
// nothing, rows and columns past M and N are dropped. The GPU side (the same plan, CUDA copies,
// real kernels) is checked by patterns/gemm/tests/test_gemm_padding_gpu.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "patterns/gemm/gemm_padding.h"
#include "patterns/gemm/kind/reference_host.hpp"

namespace fact::gemm {
namespace {

using padding::Copy2D;

// Host memory for one operand: `count` elements of `type`, small integers (exact in bf16).
struct HostBuffer {
  std::vector<uint8_t> bytes;
  int32_t type = FACT_DTYPE_F32;
  HostBuffer(int32_t t, int64_t count, unsigned seed, bool random = true) : type(t) {
    const int64_t size = fact_gemm_dtype_bytes(t);
    bytes.assign(static_cast<size_t>(count * size), 0);
    if (!random) return;
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> value(-3, 3);
    for (int64_t i = 0; i < count; ++i) {
      const float f = static_cast<float>(value(rng));
      if (t == FACT_DTYPE_F32) {
        std::memcpy(bytes.data() + i * 4, &f, 4);
      } else {  // bf16: the float's upper half (exact for small integers)
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        const uint16_t half = static_cast<uint16_t>(bits >> 16);
        std::memcpy(bytes.data() + i * 2, &half, 2);
      }
    }
  }
  void* data() { return bytes.data(); }
};

// The elements an operand spans: rows x ld, per batch and outer batch (strides as given).
int64_t span(int64_t rows, int64_t ld, int64_t batch, int64_t batch_stride, int64_t outer,
             int64_t outer_stride) {
  return (outer - 1) * outer_stride + (batch - 1) * batch_stride + rows * ld;
}

template <class T>
void copy_typed(const Copy2D& c) {
  for (int64_t o = 0; o < c.outer; ++o)
    for (int64_t l = 0; l < c.batch; ++l)
      for (int64_t r = 0; r < c.dst_rows; ++r)
        for (int64_t col = 0; col < c.dst_cols; ++col)
          static_cast<T*>(c.dst)[o * c.dst_outer_stride + l * c.dst_batch_stride + r * c.dst_ld + col] =
              padding::copied_element<T>(c, o, l, r, col);
}

void run_copy(const Copy2D& c) {
  if (c.bytes == 2) copy_typed<uint16_t>(c);
  else if (c.bytes == 4) copy_typed<uint32_t>(c);
  else copy_typed<uint64_t>(c);
}

FactGemmArgs make_args(int64_t m, int64_t n, int64_t k, int32_t type, int32_t a_layout,
                       int32_t b_layout, int64_t batch = 1, int64_t outer = 1) {
  FactGemmArgs a;
  std::memset(&a, 0, sizeof(a));
  a.header.abi_version = FACT_ABI_VERSION;
  a.header.kind = fact_kind_id(FACT_GEMM_KIND_NAME);
  a.header.size = sizeof(FactGemmArgs);
  a.m = m;
  a.n = n;
  a.k = k;
  a.batch = batch;
  a.outer_batch = outer;
  a.a_type = a.b_type = type;
  a.d_type = FACT_DTYPE_F32;
  a.a_layout = a_layout;
  a.b_layout = b_layout;
  a.lda = a_layout == FACT_ROW_MAJOR ? k : m;
  a.ldb = b_layout == FACT_ROW_MAJOR ? n : k;
  a.ldd = n;
  a.stride_a = m * k;
  a.stride_b = k * n;
  a.stride_d = m * n;
  a.outer_stride_a = batch * m * k;
  a.outer_stride_b = batch * k * n;
  a.outer_stride_d = batch * m * n;
  a.alpha = 1.0f;
  return a;
}

struct Case {
  FactGemmArgs args;
  std::vector<HostBuffer> buffers;
};

// Allocates A, B, D and every step operand for `args` (its strides as given) and points the
// call at them. A B given padded gets zeros past K (and N) as the plan would write them.
void allocate(Case& c) {
  FactGemmArgs& a = c.args;
  const int64_t outer = fact_gemm_outer_count(&a);
  const bool a_row = a.a_layout == FACT_ROW_MAJOR, b_row = a.b_layout == FACT_ROW_MAJOR;
  c.buffers.reserve(3 + FACT_GEMM_MAX_STEPS);
  c.buffers.emplace_back(a.a_type, span(a_row ? a.m : a.k, a.lda, a.batch, a.stride_a, outer, a.outer_stride_a), 1);
  a.a = c.buffers.back().data();
  c.buffers.emplace_back(a.b_type, span(b_row ? a.k : a.n, a.ldb, a.batch, a.stride_b, outer, a.outer_stride_b), 2);
  a.b = c.buffers.back().data();
  c.buffers.emplace_back(a.d_type, span(a.m, a.ldd, a.batch, a.stride_d, outer, a.outer_stride_d), 3, false);
  a.d = c.buffers.back().data();
  for (int32_t i = 0; i < a.num_steps; ++i) {
    FactGemmStep& s = a.steps[i];
    if (s.operand_type == 0) continue;
    const int64_t count = s.ld != 0 ? span(a.m, s.ld, a.batch, s.batch_stride, outer, s.outer_batch_stride)
                                    : span(1, a.n, a.batch, s.batch_stride, outer, s.outer_batch_stride);
    c.buffers.emplace_back(s.operand_type, count, 10 + i);
    s.operand = c.buffers.back().data();
  }
}

// D of `args` computed unpadded and padded (the plan's copies on the host); both as bytes.
void expect_padded_equals_unpadded(FactGemmArgs args, bool d_direct, bool expect_padding = true) {
  Case c{args, {}};
  allocate(c);
  const size_t d_elements = static_cast<size_t>(
      span(c.args.m, c.args.ldd, c.args.batch, c.args.stride_d, fact_gemm_outer_count(&c.args),
           c.args.outer_stride_d));
  ASSERT_EQ(reference_gemm_host(c.args), FACT_OK);
  std::vector<float> expected(static_cast<const float*>(c.args.d),
                              static_cast<const float*>(c.args.d) + d_elements);
  std::memset(c.args.d, 0xff, d_elements * sizeof(float));  // NaN: every element must be written

  const padding::Plan sized = padding::plan(c.args, d_direct, nullptr);
  ASSERT_EQ(sized.status, FACT_OK);
  EXPECT_EQ(!sized.identity(), expect_padding);
  std::vector<double> workspace(sized.staging_bytes / sizeof(double) + 1);
  char* base = reinterpret_cast<char*>(workspace.data());
  const padding::Plan plan = padding::plan(c.args, d_direct, base);
  EXPECT_EQ(plan.staging_bytes, sized.staging_bytes);  // addresses change nothing
  // The padded call is what TMA can address: every contiguous extent, ld and stride aligned.
  const int64_t al = padding::align_elements(c.args.a_type);
  EXPECT_EQ(plan.args.lda % al, 0);
  EXPECT_EQ(plan.args.ldb % al, 0);
  if (c.args.a_layout == FACT_ROW_MAJOR || c.args.b_layout == FACT_COLUMN_MAJOR) EXPECT_EQ(plan.args.k % al, 0);
  for (int i = 0; i < plan.num_copies_in; ++i) run_copy(plan.copies_in[i]);
  ASSERT_EQ(reference_gemm_host(plan.args), FACT_OK);
  if (plan.copy_out) run_copy(plan.out);
  const float* got = static_cast<const float*>(c.args.d);
  for (size_t i = 0; i < d_elements; ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &expected[i], sizeof(float)), 0)
        << "D element " << i << ": " << got[i] << " vs " << expected[i];
  }
}

void add_bias(FactGemmArgs& a, int32_t type, int64_t batch_stride = 0) {
  FactGemmStep& s = a.steps[a.num_steps++];
  s.kind = FACT_STEP_BIAS;
  s.value = 1.0f;
  s.operand_type = type;
  s.batch_stride = batch_stride;
}

void add_residual(FactGemmArgs& a, int32_t type, int64_t ld, int64_t batch_stride, int64_t outer_stride) {
  FactGemmStep& s = a.steps[a.num_steps++];
  s.kind = FACT_STEP_RESIDUAL;
  s.value = 0.5f;
  s.operand_type = type;
  s.ld = ld;
  s.batch_stride = batch_stride;
  s.outer_batch_stride = outer_stride;
}

TEST(GemmPadding, Bf16LinearWithKOf770) {
  FactGemmArgs a = make_args(33, 40, 770, FACT_DTYPE_BF16, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR);
  add_bias(a, FACT_DTYPE_BF16);
  const padding::Plan p = padding::plan(a, true, nullptr);
  EXPECT_EQ(p.extents.k, 776);
  EXPECT_EQ(p.extents.n, 40);
  EXPECT_TRUE(p.staged_a);
  EXPECT_TRUE(p.staged_b);
  EXPECT_FALSE(p.copy_out);
  EXPECT_EQ(p.args.lda, 776);
  EXPECT_EQ(p.args.ldb, 776);
  EXPECT_EQ(p.num_copies_in, 2);  // the bias is aligned: read in place
  expect_padded_equals_unpadded(a, /*d_direct=*/true);
  expect_padded_equals_unpadded(a, /*d_direct=*/false);
}

TEST(GemmPadding, Float32StrictOddExtentsPadKAndNAndStageD) {
  // The 8205 x 2949 x 5921 product's shape class, small: every extent odd.
  FactGemmArgs a = make_args(37, 29, 61, FACT_DTYPE_F32, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR);
  add_bias(a, FACT_DTYPE_F32);
  const padding::Plan p = padding::plan(a, false, nullptr);
  EXPECT_EQ(p.extents.m, 37);
  EXPECT_EQ(p.extents.n, 32);
  EXPECT_EQ(p.extents.k, 64);
  EXPECT_TRUE(p.copy_out);
  EXPECT_EQ(p.args.ldd, 32);
  EXPECT_EQ(p.num_copies_in, 3);  // A, B and the bias (read past N otherwise)
  expect_padded_equals_unpadded(a, false);
}

TEST(GemmPadding, TinyK) {
  expect_padded_equals_unpadded(make_args(16, 24, 3, FACT_DTYPE_BF16, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR), true);
  expect_padded_equals_unpadded(make_args(16, 24, 1, FACT_DTYPE_F32, FACT_ROW_MAJOR, FACT_ROW_MAJOR), false);
}

TEST(GemmPadding, BatchedWithASharedWeight) {
  FactGemmArgs a = make_args(20, 16, 770, FACT_DTYPE_BF16, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR, /*batch=*/3);
  a.stride_b = 0;  // one weight for every batch: staged once
  add_bias(a, FACT_DTYPE_BF16, /*batch_stride=*/0);
  const padding::Plan p = padding::plan(a, true, nullptr);
  EXPECT_EQ(p.copies_in[1].batch, 1);
  EXPECT_EQ(p.args.stride_b, 0);
  EXPECT_EQ(p.args.stride_a, 20 * 776);
  expect_padded_equals_unpadded(a, true);
}

TEST(GemmPadding, TwoBatchModesWithAnUnalignedResidual) {
  FactGemmArgs a = make_args(24, 32, 12, FACT_DTYPE_BF16, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR, /*batch=*/3,
                             /*outer=*/2);
  // A read with heads-interleaved strides; a residual with rows of 33 (unaligned), shared by the
  // kernel's batches.
  a.lda = 3 * 12;
  a.stride_a = 12;
  a.outer_stride_a = 24 * 3 * 12;
  add_residual(a, FACT_DTYPE_F32, /*ld=*/33, /*batch_stride=*/0, /*outer_stride=*/24 * 33);
  const padding::Plan p = padding::plan(a, false, nullptr);
  EXPECT_EQ(p.extents.k, 16);
  EXPECT_EQ(p.args.lda, 16);
  EXPECT_EQ(p.args.stride_a, 24 * 16);
  EXPECT_EQ(p.args.outer_stride_a, 3 * 24 * 16);
  EXPECT_EQ(p.args.steps[0].ld, 32);
  EXPECT_EQ(p.args.steps[0].batch_stride, 0);
  expect_padded_equals_unpadded(a, false);
}

TEST(GemmPadding, ColumnMajorAAndRowMajorBPadMAndN) {
  FactGemmArgs a = make_args(37, 29, 40, FACT_DTYPE_F32, FACT_COLUMN_MAJOR, FACT_ROW_MAJOR, /*batch=*/2);
  const padding::Plan p = padding::plan(a, false, nullptr);
  EXPECT_EQ(p.extents.m, 40);
  EXPECT_EQ(p.extents.n, 32);
  EXPECT_EQ(p.extents.k, 40);
  EXPECT_TRUE(p.copy_out);
  expect_padded_equals_unpadded(a, false);
}

TEST(GemmPadding, AWeightGivenPaddedIsReadInPlace) {
  // B [N, K_pad] with zeros past K, as the plan's derived operand holds it.
  FactGemmArgs a = make_args(16, 24, 770, FACT_DTYPE_BF16, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR);
  a.ldb = 776;
  a.padded = FACT_GEMM_PADDED_B;
  Case c{a, {}};
  allocate(c);
  for (int64_t n = 0; n < 24; ++n)
    std::memset(static_cast<uint8_t*>(const_cast<void*>(c.args.b)) + (n * 776 + 770) * 2, 0, 6 * 2);
  const padding::Plan p = padding::plan(c.args, true, nullptr);
  EXPECT_TRUE(p.staged_a);
  EXPECT_FALSE(p.staged_b);
  EXPECT_EQ(p.args.ldb, 776);
  EXPECT_EQ(p.num_copies_in, 1);
  // Its random zeros-free copy would not do (the plan trusts the flag): run with the zeroed one.
  const size_t d_count = 16 * 24;
  ASSERT_EQ(reference_gemm_host(c.args), FACT_OK);
  std::vector<float> expected(static_cast<float*>(c.args.d), static_cast<float*>(c.args.d) + d_count);
  std::vector<double> workspace(p.staging_bytes / sizeof(double) + 1);
  const padding::Plan run = padding::plan(c.args, true, reinterpret_cast<char*>(workspace.data()));
  for (int i = 0; i < run.num_copies_in; ++i) run_copy(run.copies_in[i]);
  std::memset(c.args.d, 0xff, d_count * sizeof(float));
  ASSERT_EQ(reference_gemm_host(run.args), FACT_OK);
  EXPECT_EQ(std::memcmp(c.args.d, expected.data(), d_count * sizeof(float)), 0);
}

TEST(GemmPadding, AnAlignedCallIsLeftAlone) {
  FactGemmArgs a = make_args(64, 64, 768, FACT_DTYPE_BF16, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR, 2);
  add_bias(a, FACT_DTYPE_BF16);
  const padding::Plan p = padding::plan(a, false, nullptr);
  EXPECT_TRUE(p.identity());
  EXPECT_EQ(std::memcmp(&p.args, &a, sizeof(a)), 0);
  // An unaligned D alone is the direct-store variant's when it may write it.
  FactGemmArgs lm = make_args(64, 1001, 768, FACT_DTYPE_BF16, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR);
  lm.d_type = FACT_DTYPE_BF16;
  EXPECT_TRUE(padding::plan(lm, true, nullptr).identity());
  EXPECT_EQ(padding::plan(lm, false, nullptr).extents.n, 1008);
}

// D given padded rows (FACT_GEMM_PADDED_D: a result allocated as [M, ld] whose [:, :N] is the
// value): the run is padded along N, D written in place (no copy back), the weight given padded
// read in place, a bias staged; the first N columns of every row equal the unpadded call's.
TEST(GemmPadding, ADGivenPaddedRowsIsWrittenInPlace) {
  const int64_t m = 16, n = 257, k = 64, ld = 260;  // float32 D: 257 * 4 bytes unaligned
  FactGemmArgs a = make_args(m, n, k, FACT_DTYPE_BF16, FACT_ROW_MAJOR, FACT_COLUMN_MAJOR);
  add_bias(a, FACT_DTYPE_F32);
  Case plain{a, {}};
  allocate(plain);
  ASSERT_EQ(reference_gemm_host(plain.args), FACT_OK);
  const float* want = static_cast<const float*>(plain.args.d);

  // The same call with B [ld, K] (zero rows past N) and D [M, ld].
  a.ldd = ld;
  a.stride_d = m * ld;
  a.padded = FACT_GEMM_PADDED_B | FACT_GEMM_PADDED_D;
  Case c{a, {}};
  allocate(c);
  HostBuffer b(FACT_DTYPE_BF16, ld * k, 2, false);
  std::memcpy(b.data(), plain.args.b, static_cast<size_t>(n * k * 2));
  c.args.b = b.data();
  const padding::Plan sized = padding::plan(c.args, false, nullptr);
  ASSERT_EQ(sized.status, FACT_OK);
  EXPECT_FALSE(sized.identity());
  EXPECT_FALSE(sized.copy_out);
  EXPECT_FALSE(sized.staged_b);
  EXPECT_EQ(sized.num_copies_in, 1);  // the bias, N long, staged to ld
  EXPECT_EQ(sized.extents.n, ld);
  std::vector<double> workspace(sized.staging_bytes / sizeof(double) + 1);
  const padding::Plan run = padding::plan(c.args, false, reinterpret_cast<char*>(workspace.data()));
  EXPECT_EQ(run.args.d, c.args.d);
  EXPECT_EQ(run.args.ldd, ld);
  EXPECT_EQ(run.args.n, ld);
  for (int i = 0; i < run.num_copies_in; ++i) run_copy(run.copies_in[i]);
  std::memset(c.args.d, 0xff, static_cast<size_t>(m * ld) * sizeof(float));
  ASSERT_EQ(reference_gemm_host(run.args), FACT_OK);
  const float* got = static_cast<const float*>(c.args.d);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t col = 0; col < n; ++col) {
      ASSERT_EQ(std::memcmp(&got[r * ld + col], &want[r * n + col], sizeof(float)), 0)
          << "D[" << r << ", " << col << "]";
    }
    for (int64_t col = n; col < ld; ++col) EXPECT_EQ(got[r * ld + col], 0.0f);  // zero rows of B, zero bias
  }

  // Without the bit, the same strides stage D and copy it back (the run padded along N).
  c.args.padded = FACT_GEMM_PADDED_B;
  EXPECT_TRUE(padding::plan(c.args, false, nullptr).copy_out);
  // With the bit but an ld shorter than the padded N, or the run padded along M: staged.
  FactGemmArgs short_ld = a;
  short_ld.ldd = 258;
  short_ld.stride_d = m * 258;
  EXPECT_TRUE(padding::plan(short_ld, false, nullptr).copy_out);
  FactGemmArgs col_a = make_args(17, n, k, FACT_DTYPE_BF16, FACT_COLUMN_MAJOR, FACT_COLUMN_MAJOR);
  col_a.ldd = ld;
  col_a.padded = FACT_GEMM_PADDED_D;
  EXPECT_TRUE(padding::plan(col_a, false, nullptr).copy_out);
}

}  // namespace
}  // namespace fact::gemm
