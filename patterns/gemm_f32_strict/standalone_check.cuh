// Standalone checker for one strict-float32 GEMM kernel library built with
// -DFACT_STANDALONE_MAIN: it calls the kernel through its FACT C ABI entry point on fresh random
// inputs, compares against a float64 reference computed on the device, times it against
// cublasSgemm (and, for orientation, cuBLAS TF32) with CUDA events after an L2 flush, and prints
// one table row per case.
//
//   int fact::strict_check::standalone_main<Chain>(argc, argv, entry, kernel_info, a_row_major,
//                                                  b_row_major, products);
//
// Chain is the kernel's epilogue chain (FactKernel::Chain, strict_epilogue.cuh); `products` 3
// (3xTF32, strict) or 1 (one TF32 product, tf32). Every epilogue operand (each bias, each M×N
// operand) gets fresh random values, alpha = 0.75, and each step its own constants (scale 1.25,
// add 0.25, residual beta 0.5, activations p0 = -0.25, p1 = 0.4: LeakyReLU's slope, Clamp's
// bounds); the reference is the chain evaluated per element (Chain::reference) on the float64
// product rounded to float32; cuBLAS computes the plain product and is compared with the plain
// float64 product.
//
// Command line: --cases=check,square,batched,largek,oddk (default: all) --reps=N (timed runs per
// case, default 20) --seed=S --split-k=N (FactGemmArgs::split_k for every case; default: 1,
// and 0 = the kernel's choice for largek). Exit status 0 only when every case passes: rel_err <= 1e-5 and
// rel_err <= 20 x the rel_err of cublasSgemm on the same inputs (3xTF32), rel_err <= 5e-3 (one
// TF32 product), and every output element was written (the output is poisoned with NaN first).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm_f32_strict/strict_epilogue.cuh"

namespace fact::strict_check {

using EntryFn = int (*)(const FactCallHeader*, void*, size_t*, void*);

#define FACT_CHECK_CUDA(expr)                                                              \
  do {                                                                                     \
    cudaError_t fact_err_ = (expr);                                                        \
    if (fact_err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(fact_err_),   \
                   __FILE__, __LINE__, cudaGetErrorString(fact_err_));                     \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

#define FACT_CHECK_CUBLAS(expr)                                                            \
  do {                                                                                     \
    cublasStatus_t fact_st_ = (expr);                                                      \
    if (fact_st_ != CUBLAS_STATUS_SUCCESS) {                                               \
      std::fprintf(stderr, "cuBLAS error %d at %s:%d\n", int(fact_st_), __FILE__, __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

struct Case {
  const char* name;
  int64_t m, n, k, batch;
  int split_k;
};

// The three shapes FACT's strict mode is judged on, plus small odd-sized batched checks (one
// with a K that is not a multiple of 4).
inline std::vector<Case> all_cases() {
  return {{"check", 392, 264, 1000, 3, 1},
          {"square", 4096, 4096, 4096, 1, 1},
          {"batched", 512, 2048, 1024, 128, 1},
          {"largek", 256, 256, 524288, 1, 0},   // split_k 0: let the kernel choose
          {"oddk", 392, 264, 1001, 3, 1}};      // K not a multiple of 4: padded along K
}

__device__ inline uint32_t mix_bits(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return uint32_t(x);
}

// Uniform values in [-1, 1) with all 24 mantissa bits random, so the low TF32 bits matter.
__global__ void fill_uniform(float* data, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t bits = mix_bits(seed * 0x9E3779B97F4A7C15ULL + i);
    data[i] = float(int32_t(bits)) * (1.0f / 2147483648.0f);
  }
}

__global__ void fill_value(float* data, size_t count, float value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    data[i] = value;
}

struct MatrixView {
  const float* data;
  int64_t ld, batch_stride;
  bool row_major;
  __device__ float at(int64_t l, int64_t r, int64_t c) const {
    return data[l * batch_stride + (row_major ? r * ld + c : c * ld + r)];
  }
};

// ref[l][m][n] = sum_k double(A[l][m][k]) * double(B[l][k][n]), row-major M x N per batch.
constexpr int kRefTile = 16;
__global__ void reference_gemm_f64(MatrixView a, MatrixView b, double* ref, int64_t m, int64_t n,
                                   int64_t k) {
  __shared__ double tile_a[kRefTile][kRefTile + 1];
  __shared__ double tile_b[kRefTile][kRefTile + 1];
  int64_t l = blockIdx.z;
  int64_t row = blockIdx.y * int64_t(kRefTile) + threadIdx.y;
  int64_t col = blockIdx.x * int64_t(kRefTile) + threadIdx.x;
  double sum = 0.0;
  for (int64_t k0 = 0; k0 < k; k0 += kRefTile) {
    int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    tile_a[threadIdx.y][threadIdx.x] = (row < m && ka < k) ? double(a.at(l, row, ka)) : 0.0;
    tile_b[threadIdx.y][threadIdx.x] = (kb < k && col < n) ? double(b.at(l, kb, col)) : 0.0;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kRefTile; ++kk) sum = fma(tile_a[threadIdx.y][kk], tile_b[kk][threadIdx.x], sum);
    __syncthreads();
  }
  if (row < m && col < n) ref[(l * m + row) * n + col] = sum;
}

// Large-K reference: each block reduces one output element over K with a tree in double.
__global__ void reference_dot_f64(MatrixView a, MatrixView b, double* ref, int64_t m, int64_t n,
                                  int64_t k) {
  __shared__ double partial[256];
  int64_t idx = blockIdx.x;
  int64_t l = idx / (m * n), row = (idx / n) % m, col = idx % n;
  double sum = 0.0;
  for (int64_t kk = threadIdx.x; kk < k; kk += blockDim.x)
    sum = fma(double(a.at(l, row, kk)), double(b.at(l, kk, col)), sum);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) ref[idx] = partial[0];
}

// ref[l][m][n] = Chain(float(product[l][m][n])) with the kernel's arguments.
template <class Chain>
__global__ void apply_chain(FactGemmArgs args, const double* product, double* ref) {
  const int64_t count = args.m * args.n * args.batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = i / (args.m * args.n), row = (i / args.n) % args.m, col = i % args.n;
    ref[i] = double(Chain::template reference<fact::strict::ProblemConfig>(
        args, float(product[i]), row, col, l));
  }
}

// sums[0] += (out - ref)^2, sums[1] += ref^2, sums[2] += count of non-finite outputs.
__global__ void error_sums(const float* out, const double* ref, size_t count, double* sums) {
  double diff2 = 0.0, ref2 = 0.0, bad = 0.0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    double o = out[i], r = ref[i];
    if (!isfinite(o)) bad += 1.0;
    else diff2 += (o - r) * (o - r);
    ref2 += r * r;
  }
  atomicAdd(&sums[0], diff2);
  atomicAdd(&sums[1], ref2);
  atomicAdd(&sums[2], bad);
}

struct Problem {
  Case shape;
  bool a_row_major, b_row_major;
  float *a = nullptr, *b = nullptr, *d = nullptr;
  float* operands[FACT_GEMM_MAX_STEPS] = {};  // each epilogue step's bias or M×N operand
  double* product = nullptr;            // float64 A·B
  double* ref = nullptr;                // float64 reference of the kernel's output
  int64_t lda() const { return a_row_major ? shape.k : shape.m; }
  int64_t ldb() const { return b_row_major ? shape.n : shape.k; }
  size_t a_count() const { return size_t(shape.m) * shape.k; }
  size_t b_count() const { return size_t(shape.k) * shape.n; }
  size_t d_count() const { return size_t(shape.m) * shape.n; }
};

inline double relative_error(const Problem& p, const double* ref, double* sums_device) {
  size_t count = p.d_count() * p.shape.batch;
  FACT_CHECK_CUDA(cudaMemset(sums_device, 0, 3 * sizeof(double)));
  error_sums<<<1024, 256>>>(p.d, ref, count, sums_device);
  FACT_CHECK_CUDA(cudaGetLastError());
  double sums[3];
  FACT_CHECK_CUDA(cudaMemcpy(sums, sums_device, sizeof(sums), cudaMemcpyDeviceToHost));
  if (sums[2] > 0) return INFINITY;
  return std::sqrt(sums[0] / sums[1]);
}

inline void poison_output(const Problem& p) {
  fill_value<<<1024, 256>>>(p.d, p.d_count() * p.shape.batch, NAN);
  FACT_CHECK_CUDA(cudaGetLastError());
}

template <class Chain>
FactGemmArgs make_args(const Problem& p, int split_k) {
  FactGemmArgs args{};
  args.header = {FACT_ABI_VERSION, fact_kind_id(FACT_GEMM_KIND_NAME), sizeof(FactGemmArgs), 0};
  args.m = p.shape.m; args.n = p.shape.n; args.k = p.shape.k; args.batch = p.shape.batch;
  args.a_type = args.b_type = args.d_type = FACT_DTYPE_F32;
  args.a_layout = p.a_row_major ? FACT_ROW_MAJOR : FACT_COLUMN_MAJOR;
  args.b_layout = p.b_row_major ? FACT_ROW_MAJOR : FACT_COLUMN_MAJOR;
  args.a = p.a; args.lda = p.lda(); args.stride_a = int64_t(p.a_count());
  args.b = p.b; args.ldb = p.ldb(); args.stride_b = int64_t(p.b_count());
  args.d = p.d; args.ldd = p.shape.n; args.stride_d = int64_t(p.d_count());
  args.alpha = 0.75f;
  args.split_k = split_k;
  args.sm_count = 0;
  args.num_steps = Chain::kSteps;
  Chain::describe(args.steps);
  for (int i = 0; i < Chain::kSteps; ++i) {
    FactGemmStep& step = args.steps[i];
    step.operand = p.operands[i];
    switch (step.kind) {
      case FACT_STEP_SCALE: step.value = 1.25f; break;
      case FACT_STEP_ADD_SCALAR: step.value = 0.25f; break;
      case FACT_STEP_ACTIVATION: step.p0 = -0.25f; step.p1 = 0.4f; break;
      case FACT_STEP_RESIDUAL: step.value = 0.5f; [[fallthrough]];
      case FACT_STEP_MULTIPLY:
        step.ld = p.shape.n;
        step.batch_stride = int64_t(p.d_count());
        break;
      case FACT_STEP_BIAS: step.value = 1.5f; break;  // one vector for every batch, scaled
      default: break;
    }
  }
  return args;
}

// Runs D = A·B through cuBLAS on column-major views: D^T (N x M) = B^T · A^T.
inline void cublas_gemm(cublasHandle_t handle, const Problem& p) {
  const float one = 1.0f, zero = 0.0f;
  cublasOperation_t op_b = p.b_row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  cublasOperation_t op_a = p.a_row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  FACT_CHECK_CUBLAS(cublasSgemmStridedBatched(
      handle, op_b, op_a, int(p.shape.n), int(p.shape.m), int(p.shape.k), &one, p.b,
      int(p.ldb()), int64_t(p.b_count()), p.a, int(p.lda()), int64_t(p.a_count()), &zero, p.d,
      int(p.shape.n), int64_t(p.d_count()), int(p.shape.batch)));
}

// Median milliseconds of `reps` runs of `launch`, each after overwriting an L2-sized scratch.
template <class Launch>
double median_ms(int reps, void* flush, size_t flush_bytes, Launch&& launch) {
  cudaEvent_t start, stop;
  FACT_CHECK_CUDA(cudaEventCreate(&start));
  FACT_CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) launch();  // warm-up
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    FACT_CHECK_CUDA(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
    FACT_CHECK_CUDA(cudaEventRecord(start));
    launch();
    FACT_CHECK_CUDA(cudaEventRecord(stop));
    FACT_CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    FACT_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  FACT_CHECK_CUDA(cudaEventDestroy(start));
  FACT_CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

inline std::string arg_value(int argc, char** argv, const char* key, const char* fallback) {
  size_t len = std::strlen(key);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], key, len) == 0 && argv[i][len] == '=') return argv[i] + len + 1;
  return fallback;
}

template <class Chain>
int standalone_main(int argc, char** argv, EntryFn entry, const char* kernel_info,
                    bool a_row_major, bool b_row_major, int products = 3) {
  std::string wanted = "," + arg_value(argc, argv, "--cases", "check,square,batched,largek,oddk") + ",";
  int reps = std::atoi(arg_value(argc, argv, "--reps", "20").c_str());
  uint64_t seed = std::strtoull(arg_value(argc, argv, "--seed", "1").c_str(), nullptr, 10);
  std::string split_k_override = arg_value(argc, argv, "--split-k", "");

  cudaDeviceProp prop;
  FACT_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("device: %s (%d SMs), driver %d, runtime %d\nkernel: %s\nlayout: A %s, B %s, D row\n",
              prop.name, prop.multiProcessorCount, driver, runtime, kernel_info,
              a_row_major ? "row" : "col", b_row_major ? "row" : "col");

  cublasHandle_t handle;
  FACT_CHECK_CUBLAS(cublasCreate(&handle));
  size_t flush_bytes = std::max<size_t>(size_t(prop.l2CacheSize) * 4, 256u << 20);
  void* flush = nullptr;
  FACT_CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
  double* sums = nullptr;
  FACT_CHECK_CUDA(cudaMalloc(&sums, 3 * sizeof(double)));

  std::printf("\n%-8s %-24s %9s %8s %9s | %9s %8s %9s | %9s %8s | %7s %7s %s\n", "case",
              "shape", "fact_ms", "TFLOP/s", "rel_err", "sgemm_ms", "TFLOP/s", "rel_err",
              "tf32_ms", "TFLOP/s", "x_sgemm", "err/sg", "verdict");
  bool all_pass = true;
  for (const Case& c : all_cases()) {
    if (wanted.find("," + std::string(c.name) + ",") == std::string::npos) continue;
    Problem p{c, a_row_major, b_row_major};
    FACT_CHECK_CUDA(cudaMalloc(&p.a, p.a_count() * c.batch * sizeof(float)));
    FACT_CHECK_CUDA(cudaMalloc(&p.b, p.b_count() * c.batch * sizeof(float)));
    FACT_CHECK_CUDA(cudaMalloc(&p.d, p.d_count() * c.batch * sizeof(float)));
    FACT_CHECK_CUDA(cudaMalloc(&p.product, p.d_count() * c.batch * sizeof(double)));
    FACT_CHECK_CUDA(cudaMalloc(&p.ref, p.d_count() * c.batch * sizeof(double)));
    fill_uniform<<<4096, 256>>>(p.a, p.a_count() * c.batch, seed * 2 + 0);
    fill_uniform<<<4096, 256>>>(p.b, p.b_count() * c.batch, seed * 2 + 1);
    FactGemmStep kinds[FACT_GEMM_MAX_STEPS] = {};
    Chain::describe(kinds);
    for (int i = 0; i < Chain::kSteps; ++i) {
      const bool matrix = kinds[i].kind == FACT_STEP_RESIDUAL || kinds[i].kind == FACT_STEP_MULTIPLY;
      const size_t count = matrix ? p.d_count() * c.batch
                                  : kinds[i].kind == FACT_STEP_BIAS ? size_t(c.n) : 0;
      if (count == 0) continue;
      FACT_CHECK_CUDA(cudaMalloc(&p.operands[i], count * sizeof(float)));
      fill_uniform<<<4096, 256>>>(p.operands[i], count, seed * 16 + 2 + i);
    }
    FACT_CHECK_CUDA(cudaGetLastError());
    MatrixView va{p.a, p.lda(), int64_t(p.a_count()), a_row_major};
    MatrixView vb{p.b, p.ldb(), int64_t(p.b_count()), b_row_major};
    if (c.k >= 65536) {
      reference_dot_f64<<<unsigned(c.m * c.n * c.batch), 256>>>(va, vb, p.product, c.m, c.n, c.k);
    } else {
      dim3 grid(unsigned((c.n + kRefTile - 1) / kRefTile), unsigned((c.m + kRefTile - 1) / kRefTile),
                unsigned(c.batch));
      reference_gemm_f64<<<grid, dim3(kRefTile, kRefTile)>>>(va, vb, p.product, c.m, c.n, c.k);
    }
    FACT_CHECK_CUDA(cudaGetLastError());
    FactGemmArgs args = make_args<Chain>(
        p, split_k_override.empty() ? c.split_k : std::atoi(split_k_override.c_str()));
    apply_chain<Chain><<<1024, 256>>>(args, p.product, p.ref);
    FACT_CHECK_CUDA(cudaGetLastError());
    FACT_CHECK_CUDA(cudaDeviceSynchronize());

    size_t workspace_bytes = 0;
    int status = entry(&args.header, nullptr, &workspace_bytes, nullptr);
    void* workspace = nullptr;
    if (status == FACT_OK && workspace_bytes) FACT_CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
    poison_output(p);
    if (status == FACT_OK) status = entry(&args.header, workspace, nullptr, nullptr);
    FACT_CHECK_CUDA(cudaDeviceSynchronize());
    double fact_err = status == FACT_OK ? relative_error(p, p.ref, sums) : INFINITY;
    double fact_ms = status == FACT_OK ? median_ms(reps, flush, flush_bytes, [&] {
      entry(&args.header, workspace, nullptr, nullptr);
    }) : NAN;
    // A second check after the timed runs catches races that show only now and then.
    if (status == FACT_OK) {
      poison_output(p);
      entry(&args.header, workspace, nullptr, nullptr);
      FACT_CHECK_CUDA(cudaDeviceSynchronize());
      fact_err = std::max(fact_err, relative_error(p, p.ref, sums));
    }

    FACT_CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    poison_output(p);
    cublas_gemm(handle, p);
    FACT_CHECK_CUDA(cudaDeviceSynchronize());
    double sgemm_err = relative_error(p, p.product, sums);
    double sgemm_ms = median_ms(reps, flush, flush_bytes, [&] { cublas_gemm(handle, p); });
    FACT_CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH));
    double tf32_ms = median_ms(reps, flush, flush_bytes, [&] { cublas_gemm(handle, p); });
    FACT_CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));

    double flop = 2.0 * double(c.m) * double(c.n) * double(c.k) * double(c.batch);
    auto tflops = [&](double ms) { return flop / (ms * 1e-3) / 1e12; };
    bool pass = status == FACT_OK &&
                (products == 3 ? fact_err <= 1e-5 && fact_err <= 20.0 * sgemm_err : fact_err <= 5e-3);
    all_pass = all_pass && pass;
    char shape[64];
    std::snprintf(shape, sizeof(shape), "%lldx(%lldx%lldx%lld)", (long long)c.batch,
                  (long long)c.m, (long long)c.n, (long long)c.k);
    std::printf("%-8s %-24s %9.4f %8.1f %9.2e | %9.4f %8.1f %9.2e | %9.4f %8.1f | %7.2f %7.2f %s\n",
                c.name, shape, fact_ms, tflops(fact_ms), fact_err, sgemm_ms, tflops(sgemm_ms),
                sgemm_err, tf32_ms, tflops(tf32_ms), sgemm_ms / fact_ms, fact_err / sgemm_err,
                status != FACT_OK ? "FAIL(status)" : (pass ? "PASS" : "FAIL"));
    if (status != FACT_OK) std::printf("         kernel returned status %d\n", status);
    std::fflush(stdout);
    cudaFree(workspace);
    cudaFree(p.a); cudaFree(p.b); cudaFree(p.d);
    for (float* operand : p.operands) cudaFree(operand);
    cudaFree(p.product); cudaFree(p.ref);
  }
  cudaFree(flush);
  cudaFree(sums);
  cublasDestroy(handle);
  return all_pass ? 0 : 1;
}

}  // namespace fact::strict_check
