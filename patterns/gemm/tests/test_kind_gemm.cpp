// The GEMM kind: its argument image (pack) and its float64 host reference, which together are
// what the CPU path of a composed module runs, checked against a direct computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "fact/graph/graph_builder.hpp"
#include "fact/problem/problem.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/kind/reference_host.hpp"

namespace fact::gemm {
namespace {

using graph::DType;

// y = epilogue(x @ w^T) with x [m, k] row-major and w [n, k] (an nn.Linear), float32.
struct LinearCase {
  int64_t m = 6, n = 5, k = 7;
  std::vector<float> x, w, bias, r1, r2;
  GemmProblem problem;
  graph::Graph graph;
};

LinearCase make_case(const std::vector<EpilogueStep>& steps, uint32_t seed) {
  LinearCase c;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (auto& e : v) e = normal(rng);
  };
  fill(c.x, c.m * c.k);
  fill(c.w, c.n * c.k);
  fill(c.bias, c.n);
  fill(c.r1, c.m * c.n);
  fill(c.r2, c.m * c.n);
  GemmProblem& p = c.problem;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.a = {"x", DType::Float32, Layout::RowMajor, c.k, 0, 0};
  p.b = {"w", DType::Float32, Layout::ColumnMajor, c.k, 0, 0};
  p.d = {"y", DType::Float32, Layout::RowMajor, c.n, 0, 0};
  p.epilogue = steps;
  graph::GraphBuilder b(DType::Float32);
  auto x = b.input("x", {c.m, c.k});
  auto w = b.parameter("w", {c.n, c.k});
  auto y = b.op("aten.linear.default", {graph::T(x), graph::T(w)}, {c.m, c.n});
  c.graph = b.finish({y});
  c.problem.d.value = y;
  return c;
}

double activate(Activation a, double x, double p0, double p1) {
  switch (a) {
    case Activation::Identity: return x;
    case Activation::ReLU: return std::max(x, 0.0);
    case Activation::GeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::SiLU: return x / (1 + std::exp(-x));
    case Activation::Sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::LeakyReLU: return x >= 0 ? x : p0 * x;
    case Activation::HardTanh: return std::min(std::max(x, p0), p1);
    case Activation::Tanh: return std::tanh(x);
  }
  return 0;
}

// The problem's steps applied literally, in order (no folding).
std::vector<double> direct(const LinearCase& c) {
  std::vector<double> out(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < c.k; ++k) acc += double(c.x[i * c.k + k]) * c.w[j * c.k + k];
      double v = c.problem.alpha * acc;
      for (const auto& s : c.problem.epilogue) {
        const std::vector<float>& other = s.operand == "r1" ? c.r1 : c.r2;
        switch (s.kind) {
          case EpilogueStep::Kind::Scale: v *= s.value; break;
          case EpilogueStep::Kind::AddScalar: v += s.value; break;
          case EpilogueStep::Kind::Bias: v += s.value * c.bias[j]; break;
          case EpilogueStep::Kind::Activation: v = activate(s.activation, v, s.p0, s.p1); break;
          case EpilogueStep::Kind::Residual: v += s.value * other[i * c.n + j]; break;
          case EpilogueStep::Kind::Multiply: v *= other[i * c.n + j]; break;
          default: ADD_FAILURE() << "direct() computes the GEMM's own elementwise steps only"; break;
        }
      }
      out[i * c.n + j] = v;
    }
  }
  return out;
}

// Runs the argument image through the host reference with the case's buffers.
std::vector<float> run_image(const LinearCase& c) {
  const ArgImage image = pack_gemm(c.problem, c.graph);
  std::vector<const void*> operands;
  std::vector<int> operand_bytes;
  for (const auto& o : image.operands) {
    const void* data = o.value == "x" ? c.x.data() : o.value == "w" ? c.w.data()
                       : o.value == "b" ? c.bias.data() : o.value == "r1" ? c.r1.data() : c.r2.data();
    operands.push_back(data);
    operand_bytes.push_back(4);
  }
  std::vector<float> y(c.m * c.n, std::numeric_limits<float>::quiet_NaN());
  std::vector<uint8_t> bytes = bind_addresses(image, operands, {y.data()}, operand_bytes, {4});
  EXPECT_EQ(reference_call(reinterpret_cast<const FactCallHeader*>(bytes.data())), FACT_OK);
  return y;
}

EpilogueStep step(EpilogueStep::Kind kind, double value = 1.0) {
  EpilogueStep s;
  s.kind = kind;
  s.value = value;
  return s;
}

EpilogueStep act(Activation a, double p0 = 0, double p1 = 0) {
  EpilogueStep s;
  s.kind = EpilogueStep::Kind::Activation;
  s.activation = a;
  s.p0 = p0;
  s.p1 = p1;
  return s;
}

EpilogueStep tensor_step(EpilogueStep::Kind kind, const char* operand, int64_t n, double value = 1.0) {
  EpilogueStep s = step(kind, value);
  s.operand = operand;
  s.operand_dtype = DType::Float32;
  s.operand_ld = kind == EpilogueStep::Kind::Bias ? 0 : n;
  return s;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

TEST(GemmKind, ChainBiasScaleClampGeluKeepsEachStepsConstants) {
  // Linear -> x * 0.5 -> Hardtanh(-2, 2) -> GELU: once composed to all zeros.
  const LinearCase c = make_case({tensor_step(EpilogueStep::Kind::Bias, "b", 5), step(EpilogueStep::Kind::Scale, 0.5),
                                  act(Activation::HardTanh, -2, 2), act(Activation::GeluErf)},
                                 1);
  const std::vector<float> y = run_image(c);
  expect_close(y, direct(c));
  double nonzero = 0;
  for (float v : y) nonzero += v != 0;
  EXPECT_GT(nonzero, 0);
}

TEST(GemmKind, AnyOrderOfScalesConstantsActivationsResidualsAndProducts) {
  const LinearCase c = make_case(
      {step(EpilogueStep::Kind::Scale, 0.25), act(Activation::Tanh), step(EpilogueStep::Kind::AddScalar, 3.0),
       tensor_step(EpilogueStep::Kind::Multiply, "r1", 5), act(Activation::LeakyReLU, 0.2),
       tensor_step(EpilogueStep::Kind::Residual, "r2", 5, -1.5), step(EpilogueStep::Kind::Scale, 2.0),
       act(Activation::HardTanh, -INFINITY, 1.5)},
      2);
  expect_close(run_image(c), direct(c));
}

TEST(GemmKind, LeadingScalesFoldIntoAlphaInTheImage) {
  const LinearCase c = make_case({step(EpilogueStep::Kind::Scale, 0.5), act(Activation::ReLU)}, 3);
  const FactGemmArgs args = gemm_args(c.problem);
  EXPECT_FLOAT_EQ(args.alpha, 0.5f);
  ASSERT_EQ(args.num_steps, 1);
  EXPECT_EQ(args.steps[0].kind, FACT_STEP_ACTIVATION);
  EXPECT_EQ(args.steps[0].activation, FACT_ACT_RELU);
  expect_close(run_image(c), direct(c));
}

// A D with unaligned rows (the direct-store variant's: N odd) is packed and referenced with
// ldd = N; the case's N = 5 is odd, so the host reference walks such rows.
TEST(GemmKind, UnalignedOutputRowsKeepLddN) {
  const LinearCase c = make_case({}, 11);
  const FactGemmArgs args = gemm_args(c.problem);
  EXPECT_EQ(args.n, 5);
  EXPECT_EQ(args.ldd, 5);
  EXPECT_EQ(args.num_steps, 0);
  expect_close(run_image(c), direct(c));
  GemmProblem lm_head = c.problem;  // GPT-2's LM head: V = 50257 columns
  lm_head.m = 8192;
  lm_head.n = 50257;
  lm_head.k = 768;
  lm_head.a.ld = lm_head.b.ld = 768;
  lm_head.d.ld = 50257;
  lm_head.a.dtype = lm_head.b.dtype = lm_head.d.dtype = DType::BFloat16;
  const FactGemmArgs lm = gemm_args(lm_head);
  EXPECT_EQ(lm.n, 50257);
  EXPECT_EQ(lm.ldd, 50257);
  EXPECT_EQ(lm.lda, 768);
}

TEST(GemmKind, ImageNamesOperandsResultsAndAddressSlots) {
  const LinearCase c = make_case({tensor_step(EpilogueStep::Kind::Bias, "b", 5),
                                  tensor_step(EpilogueStep::Kind::Residual, "r1", 5)},
                                 4);
  const ArgImage image = pack_gemm(c.problem, c.graph);
  ASSERT_EQ(image.operands.size(), 4u);
  EXPECT_EQ(image.operands[0].value, "x");
  EXPECT_EQ(image.operands[1].value, "w");
  ASSERT_EQ(image.results.size(), 1u);
  EXPECT_EQ(image.results[0].shape, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(image.pointers.size(), 5u);  // a, b, d, bias, residual
  EXPECT_EQ(image.bytes.size(), sizeof(FactGemmArgs));
  const ArgImage back = ArgImage::from_json(image.to_json());
  EXPECT_EQ(back.bytes, image.bytes);
  EXPECT_EQ(back.pointers.size(), image.pointers.size());
}

// Every integer of the struct is written through ArgImage::put, so the image lists it as an int
// field (a dynamic range fits them); floats and address slots are not int fields.
TEST(GemmKind, ImageRecordsEveryIntegerField) {
  const LinearCase c = make_case({tensor_step(EpilogueStep::Kind::Bias, "b", 5)}, 4);
  const ArgImage image = pack_gemm(c.problem, c.graph);
  auto has = [&](size_t offset, size_t bytes) {
    return std::find(image.int_fields.begin(), image.int_fields.end(), IntField{offset, bytes}) != image.int_fields.end();
  };
  for (size_t offset : {offsetof(FactGemmArgs, m), offsetof(FactGemmArgs, n), offsetof(FactGemmArgs, k),
                        offsetof(FactGemmArgs, batch), offsetof(FactGemmArgs, outer_batch), offsetof(FactGemmArgs, lda),
                        offsetof(FactGemmArgs, stride_a), offsetof(FactGemmArgs, ldb), offsetof(FactGemmArgs, ldd),
                        offsetof(FactGemmArgs, stride_d), offsetof(FactGemmArgs, steps) + offsetof(FactGemmStep, ld),
                        offsetof(FactGemmArgs, steps) + offsetof(FactGemmStep, batch_stride)})
    EXPECT_TRUE(has(offset, 8)) << offset;
  for (size_t offset : {offsetof(FactGemmArgs, a_type), offsetof(FactGemmArgs, a_layout), offsetof(FactGemmArgs, num_steps),
                        offsetof(FactGemmArgs, header) + offsetof(FactCallHeader, size),
                        offsetof(FactGemmArgs, steps) + offsetof(FactGemmStep, kind)})
    EXPECT_TRUE(has(offset, 4)) << offset;
  for (const IntField& f : image.int_fields) {
    EXPECT_NE(f.offset, offsetof(FactGemmArgs, alpha));
    for (const PointerSlot& p : image.pointers) EXPECT_NE(f.offset, p.offset);
  }
  const ArgImage back = ArgImage::from_json(image.to_json());
  EXPECT_EQ(back.int_fields, image.int_fields);
  EXPECT_EQ(image.to_json()["args"]["int_fields"][0], nlohmann::json::parse("[0, 4]"));
}

TEST(GemmKind, ReferenceRefusesAMalformedStruct) {
  LinearCase c = make_case({}, 5);
  FactGemmArgs args = gemm_args(c.problem);
  args.a = c.x.data();
  args.b = c.w.data();
  std::vector<float> y(c.m * c.n);
  args.d = y.data();
  EXPECT_EQ(reference_call(&args.header), FACT_OK);
  FactGemmArgs wrong = args;
  wrong.header.abi_version = 1;
  EXPECT_EQ(reference_call(&wrong.header), FACT_ERR_INVALID_ARGS);
  wrong = args;
  wrong.header.kind = fact_kind_id("no such kind");
  EXPECT_EQ(reference_call(&wrong.header), FACT_ERR_INVALID_ARGS);
  wrong = args;
  wrong.num_steps = 1;
  wrong.steps[0].kind = FACT_STEP_BIAS;  // no operand
  EXPECT_EQ(reference_call(&wrong.header), FACT_ERR_INVALID_ARGS);
}

TEST(GemmKind, PackRefusesAnOutputThatIsNotDense) {
  LinearCase c = make_case({}, 6);
  c.problem.d.ld = 8;  // D would need padding: not the graph's dense tensor
  EXPECT_THROW(pack_gemm(c.problem, c.graph), std::invalid_argument);
}

// D given padded rows: the result is the [M, :N] view of a dense [M, ld] allocation; an ld
// that is not 16-byte aligned or shorter than N is refused.
TEST(GemmKind, PaddedRowsGiveAViewOfTheirAllocation) {
  LinearCase c = make_case({}, 6);  // float32, M 6, N 5
  c.problem.d.padded = true;
  c.problem.d.ld = 8;
  const ArgImage image = pack_gemm(c.problem, c.graph);
  ASSERT_EQ(image.results.size(), 1u);
  EXPECT_EQ(image.results[0].shape, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(image.results[0].stride, (std::vector<int64_t>{8, 1}));
  EXPECT_EQ(image.results[0].alloc_shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(result_storage_elements(image.results[0]), 48);
  EXPECT_EQ(gemm_args(c.problem).padded, FACT_GEMM_PADDED_D);
  EXPECT_EQ(gemm_args(c.problem).ldd, 8);
  c.problem.d.ld = 6;  // 24 bytes: not a TMA row
  EXPECT_THROW(pack_gemm(c.problem, c.graph), std::invalid_argument);
  c.problem.d.ld = 4;
  EXPECT_THROW(pack_gemm(c.problem, c.graph), std::invalid_argument);
  // Without the flag the same ld is no dense output.
  c.problem.d.padded = false;
  c.problem.d.ld = 8;
  EXPECT_THROW(pack_gemm(c.problem, c.graph), std::invalid_argument);
}

TEST(GemmKind, KindDescribesItsProblems) {
  const LinearCase c = make_case({act(Activation::ReLU)}, 7);
  const Problem p = to_problem(c.problem);
  const ProblemKind& kind = kind_of(p);
  EXPECT_EQ(kind.fusion(p.desc), "gemm_relu");
  EXPECT_EQ(kind.shape(p.desc), "6x5x7");
  EXPECT_EQ(kind.tuning_dims(p.desc), (std::vector<int64_t>{6, 5, 7, 1}));
  EXPECT_DOUBLE_EQ(kind.tolerance(p.desc, core::PrecisionMode::Strict), 1e-5);
  EXPECT_EQ(problem_summary(p), "gemm_relu 6x5x7 float32");
  const auto words = kind.from_command_line({{"problem", "m=64,n=32,k=16"}, {"dtype", "bf16"}, {"epilogue", "bias,relu"}});
  ASSERT_TRUE(words);
  EXPECT_EQ(gemm_problem_from_json(*words).fusion_name(), "gemm_bias_relu");
  EXPECT_FALSE(kind.from_command_line({{"problem", "batch=2"}}));
}

TEST(GemmKind, BiasStepsScaleTheirVectorByTheirValue) {
  // addmm(bias, x, w, beta=0.5): the bias step carries beta as its multiplier.
  const LinearCase c = make_case({tensor_step(EpilogueStep::Kind::Bias, "b", 5, 0.5),
                                  act(Activation::ReLU)},
                                 8);
  const FactGemmArgs args = gemm_args(c.problem);
  EXPECT_FLOAT_EQ(args.steps[0].value, 0.5f);
  expect_close(run_image(c), direct(c));
  // A plain bias: multiplier 1, and the problem's JSON does not spell it.
  const LinearCase plain = make_case({tensor_step(EpilogueStep::Kind::Bias, "b", 5)}, 8);
  EXPECT_FLOAT_EQ(gemm_args(plain.problem).steps[0].value, 1.0f);
  EXPECT_FALSE(gemm_problem_to_json(plain.problem)["epilogue"][0].contains("value"));
  const GemmProblem back = gemm_problem_from_json(gemm_problem_to_json(c.problem));
  EXPECT_DOUBLE_EQ(back.epilogue[0].value, 0.5);
}

// Two batch modes: D[o, l] = epilogue(A[o, l] · B[o, l]) with every operand laid out its own way
// (a 4-D matmul whose batch dims do not collapse into one stride): A [O][M][L][K] (heads split
// from a fused projection: batch stride K, outer M·L·K, lda L·K), B column-major [L][O][N][K]
// (batch stride O·N·K, outer N·K), D [L][O][M][N] (the kernel's mode outermost in memory), a bias
// per outer batch scaled by 0.5, a residual shared by the kernel's batches (batch stride 0), a
// product per (o, l).
struct TwoModeCase {
  int64_t outer = 2, batch = 3, m = 4, n = 8, k = 5;
  std::vector<float> a, b, bias, residual, multiplier;
  GemmProblem problem;
  graph::Graph graph;

  float at_a(int64_t o, int64_t l, int64_t i, int64_t kk) const {
    return a[((o * m + i) * batch + l) * k + kk];
  }
  float at_b(int64_t o, int64_t l, int64_t kk, int64_t j) const {
    return b[((l * outer + o) * n + j) * k + kk];
  }
  int64_t d_index(int64_t o, int64_t l, int64_t i, int64_t j) const {
    return ((l * outer + o) * m + i) * n + j;
  }
};

TwoModeCase make_two_mode_case() {
  TwoModeCase c;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  auto fill = [&](std::vector<float>& v, int64_t count) {
    v.resize(static_cast<size_t>(count));
    for (auto& e : v) e = normal(rng);
  };
  fill(c.a, c.outer * c.batch * c.m * c.k);
  fill(c.b, c.outer * c.batch * c.k * c.n);
  fill(c.bias, c.outer * c.n);
  fill(c.residual, c.outer * c.m * c.n);
  fill(c.multiplier, c.outer * c.batch * c.m * c.n);
  GemmProblem& p = c.problem;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.batch = c.batch;
  p.outer_batch = c.outer;
  p.alpha = 0.75;
  p.a = {"a", DType::Float32, Layout::RowMajor, c.batch * c.k, c.k, 0, c.m * c.batch * c.k};
  p.b = {"b", DType::Float32, Layout::ColumnMajor, c.k, c.outer * c.n * c.k, 0, c.n * c.k};
  p.d = {"d", DType::Float32, Layout::RowMajor, c.n, c.outer * c.m * c.n, 0, c.m * c.n};
  EpilogueStep bias = tensor_step(EpilogueStep::Kind::Bias, "bias", c.n, 0.5);
  bias.operand_batch_stride = 0;
  bias.operand_outer_batch_stride = c.n;
  EpilogueStep residual = tensor_step(EpilogueStep::Kind::Residual, "residual", c.n, -1.5);
  residual.operand_batch_stride = 0;
  residual.operand_outer_batch_stride = c.m * c.n;
  EpilogueStep multiply = tensor_step(EpilogueStep::Kind::Multiply, "multiplier", c.n);
  multiply.operand_batch_stride = c.m * c.n;
  multiply.operand_outer_batch_stride = c.batch * c.m * c.n;
  p.epilogue = {bias, act(Activation::Tanh), residual, multiply};
  graph::GraphBuilder builder(DType::Float32);
  auto a = builder.input("a", {c.outer, c.m, c.batch, c.k});
  auto b = builder.parameter("b", {c.batch, c.outer, c.n, c.k});
  auto d = builder.op("aten.mul.Tensor", {graph::T(a), graph::T(b)}, {c.batch, c.outer, c.m, c.n});
  c.graph = builder.finish({d});
  p.d.value = d;
  return c;
}

std::vector<double> direct_two_modes(const TwoModeCase& c) {
  std::vector<double> out(static_cast<size_t>(c.outer * c.batch * c.m * c.n));
  for (int64_t o = 0; o < c.outer; ++o) {
    for (int64_t l = 0; l < c.batch; ++l) {
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double acc = 0;
          for (int64_t kk = 0; kk < c.k; ++kk) acc += double(c.at_a(o, l, i, kk)) * c.at_b(o, l, kk, j);
          double v = 0.75 * acc + 0.5 * c.bias[o * c.n + j];
          v = std::tanh(v);
          v += -1.5 * c.residual[(o * c.m + i) * c.n + j];
          v *= c.multiplier[((o * c.batch + l) * c.m + i) * c.n + j];
          out[static_cast<size_t>(c.d_index(o, l, i, j))] = v;
        }
      }
    }
  }
  return out;
}

TEST(GemmKind, TwoBatchModesPackAndReferenceAgreeWithADirectComputation) {
  const TwoModeCase c = make_two_mode_case();
  const FactGemmArgs args = gemm_args(c.problem);
  EXPECT_EQ(args.batch, 3);
  EXPECT_EQ(args.outer_batch, 2);
  EXPECT_EQ(args.stride_a, 5);
  EXPECT_EQ(args.outer_stride_a, 60);
  EXPECT_EQ(args.stride_b, 80);
  EXPECT_EQ(args.outer_stride_b, 40);
  EXPECT_EQ(args.stride_d, 64);
  EXPECT_EQ(args.outer_stride_d, 32);
  EXPECT_EQ(args.steps[0].outer_batch_stride, 8);
  EXPECT_EQ(args.steps[2].batch_stride, 0);
  EXPECT_EQ(args.steps[2].outer_batch_stride, 32);
  const ArgImage image = pack_gemm(c.problem, c.graph);
  std::vector<const void*> operands;
  for (const auto& o : image.operands) {
    operands.push_back(o.value == "a" ? c.a.data() : o.value == "b" ? c.b.data()
                       : o.value == "bias" ? c.bias.data() : o.value == "residual"
                           ? c.residual.data() : c.multiplier.data());
  }
  std::vector<float> d(static_cast<size_t>(c.outer * c.batch * c.m * c.n),
                       std::numeric_limits<float>::quiet_NaN());
  std::vector<uint8_t> bytes = bind_addresses(image, operands, {d.data()},
                                              std::vector<int>(operands.size(), 4), {4});
  ASSERT_EQ(reference_call(reinterpret_cast<const FactCallHeader*>(bytes.data())), FACT_OK);
  expect_close(d, direct_two_modes(c));
}

TEST(GemmKind, OuterSliceAdvancesEveryPointerByItsOuterStride) {
  const TwoModeCase c = make_two_mode_case();
  FactGemmArgs args = gemm_args(c.problem);
  args.a = c.a.data();
  args.b = c.b.data();
  std::vector<float> d(192);
  args.d = d.data();
  args.steps[0].operand = c.bias.data();
  args.steps[2].operand = c.residual.data();
  args.steps[3].operand = c.multiplier.data();
  EXPECT_EQ(fact_gemm_outer_count(&args), 2);
  const FactGemmArgs slice = fact_gemm_outer_slice(&args, 1);
  EXPECT_EQ(slice.outer_batch, 1);
  EXPECT_EQ(slice.a, c.a.data() + 60);
  EXPECT_EQ(slice.b, c.b.data() + 40);
  EXPECT_EQ(slice.d, d.data() + 32);
  EXPECT_EQ(slice.steps[0].operand, c.bias.data() + 8);
  EXPECT_EQ(slice.steps[1].operand, nullptr);  // the activation has none
  EXPECT_EQ(slice.steps[2].operand, c.residual.data() + 32);
  EXPECT_EQ(slice.steps[3].operand, c.multiplier.data() + 96);
  EXPECT_EQ(slice.outer_stride_a, 0);
  EXPECT_EQ(slice.stride_a, args.stride_a);
  // Running every slice through the reference computes the whole call.
  std::vector<float> whole(192), sliced(192);
  args.d = whole.data();
  ASSERT_EQ(reference_call(&args.header), FACT_OK);
  args.d = sliced.data();
  for (int64_t o = 0; o < 2; ++o) {
    const FactGemmArgs one = fact_gemm_outer_slice(&args, o);
    ASSERT_EQ(reference_call(&one.header), FACT_OK);
  }
  EXPECT_EQ(whole, sliced);
  // A zeroed outer_batch reads as 1; a negative one is malformed.
  args.outer_batch = 0;
  EXPECT_EQ(fact_gemm_outer_count(&args), 1);
  args.outer_batch = -1;
  EXPECT_EQ(reference_call(&args.header), FACT_ERR_INVALID_ARGS);
}

TEST(GemmKind, TwoBatchModesInTheProblemJsonAndItsDescription) {
  const TwoModeCase c = make_two_mode_case();
  const nlohmann::json j = gemm_problem_to_json(c.problem);
  EXPECT_EQ(j["outer_batch"], 2);
  EXPECT_EQ(j["a"]["outer_batch_stride"], 60);
  EXPECT_EQ(j["epilogue"][3]["operand_outer_batch_stride"], 96);
  EXPECT_EQ(j["shape"], "2x3x(4x8x5)");
  EXPECT_EQ(j["fusion"], "bgemm_bias_tanh_residual_mul");
  const GemmProblem back = gemm_problem_from_json(j);
  EXPECT_EQ(back.outer_batch, 2);
  EXPECT_EQ(back.b.outer_batch_stride, 40);
  EXPECT_EQ(back.d.outer_batch_stride, 32);
  EXPECT_EQ(back.epilogue[0].operand_outer_batch_stride, 8);
  EXPECT_EQ(gemm_problem_to_json(back), j);
  EXPECT_DOUBLE_EQ(c.problem.flops(), 2.0 * 4 * 8 * 5 * 6);
  // One batch mode: the JSON has no outer fields (plans written before stay as they were).
  GemmProblem one = c.problem;
  one.outer_batch = 1;
  EXPECT_FALSE(gemm_problem_to_json(one).contains("outer_batch"));
  EXPECT_FALSE(gemm_problem_to_json(one)["a"].contains("outer_batch_stride"));
  nlohmann::json bad = j;
  bad["outer_batch"] = 0;
  EXPECT_THROW(gemm_problem_from_json(bad), std::invalid_argument);
  const auto words = kind_of(to_problem(c.problem))
                         .from_command_line({{"problem", "m=64,n=32,k=16,batch=8,outer=2"}});
  ASSERT_TRUE(words);
  const GemmProblem parsed = gemm_problem_from_json(*words);
  EXPECT_EQ(parsed.outer_batch, 2);
  EXPECT_EQ(parsed.a.batch_stride, 64 * 16);
  EXPECT_EQ(parsed.a.outer_batch_stride, 8 * 64 * 16);
}

TEST(GemmKind, PackRefusesATwoModeOutputThatIsNotDense) {
  TwoModeCase c = make_two_mode_case();
  c.problem.d.outer_batch_stride = 0;  // every outer batch into the same matrices
  EXPECT_THROW(pack_gemm(c.problem, c.graph), std::invalid_argument);
  c = make_two_mode_case();
  c.problem.d.batch_stride = 32;
  c.problem.d.outer_batch_stride = 64;  // strides of neither order
  EXPECT_THROW(pack_gemm(c.problem, c.graph), std::invalid_argument);
  c = make_two_mode_case();
  c.problem.d.batch_stride = 32;
  c.problem.d.outer_batch_stride = 3 * 32;  // [O][L]: dense too
  EXPECT_NO_THROW(pack_gemm(c.problem, c.graph));
}

}  // namespace
}  // namespace fact::gemm
