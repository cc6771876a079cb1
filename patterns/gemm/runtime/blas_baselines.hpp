// cuBLAS and cuBLASLt baselines for a GemmCase, as GemmLaunchers reading the same FactGemmArgs
// as a kernel, so that they are verified and timed on the same buffers in the same process.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "fact/runtime/device_buffer.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/runtime/gemm_case.hpp"
#include "patterns/gemm/runtime/gemm_verify_case.hpp"

namespace fact::gemm {

using runtime::DeviceBuffer;

// Something that computes a GEMM from FactGemmArgs on a stream. Returns a FactStatus; throws
// CudaError when a CUDA/cuBLAS call fails.
using GemmLauncher = std::function<int(const FactGemmArgs& args, cudaStream_t stream)>;

// cuBLAS and cuBLASLt handles with one workspace they share (32 MiB), on the current device.
class BlasContext {
 public:
  BlasContext();  // throws CudaError
  ~BlasContext();
  BlasContext(const BlasContext&) = delete;
  BlasContext& operator=(const BlasContext&) = delete;

  void* cublas() const { return cublas_; }    // cublasHandle_t
  void* cublaslt() const { return cublaslt_; }  // cublasLtHandle_t
  void* workspace() const { return workspace_.data(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  void* cublas_ = nullptr;
  void* cublaslt_ = nullptr;
  DeviceBuffer workspace_;
};

struct Baseline {
  std::string name;                   // "cublas" / "cublaslt"
  GemmProblem computes;               // what it computes (the case's problem or a prefix)
  bool fused = false;                 // computes the case's whole epilogue
  bool bias_multiplier_fixed = false; // fuses a bias whose multiplier must stay 1 (cuBLASLt)
  std::string config;                 // compute type and algorithm, for reports
  GemmLauncher launch;
  std::shared_ptr<void> state;        // descriptors the launcher uses
};

// cublasGemmStridedBatchedEx computing alpha·A·B only (no epilogue), compute type by the
// case's precision: CUBLAS_COMPUTE_32F (strict, and bf16/fp16 operands),
// CUBLAS_COMPUTE_32F_FAST_TF32 (tf32). Row-major D is computed as Dᵀ = Bᵀ·Aᵀ
// (blas_mapping.hpp). Throws CudaError / std::invalid_argument for an unsupported case.
Baseline make_cublas_baseline(BlasContext& context, const GemmCase& gemm_case);

// cublasLtMatmul with the fused epilogue plan_cublaslt_epilogue allows (a prefix of the
// epilogue: bias, ReLU, tanh-GELU, residual as beta·C, each read from its step's operand), the
// algorithm being cuBLASLt's first heuristic choice for `sample`'s pointers. Throws CudaError
// when cuBLASLt offers no algorithm.
Baseline make_cublaslt_baseline(BlasContext& context, const GemmCase& gemm_case,
                                const FactGemmArgs& sample);

// cublasGemmEx on plain device pointers (row-major, compact), used by `fact device` to measure
// GEMM rates: D = A·B, M×K times K×N, with operand dtype `dtype`, output `out`, and compute type
// as for make_cublas_baseline in `precision`.
void cublas_gemm_row_major(BlasContext& context, DType dtype, DType out,
                           PrecisionMode precision, int64_t m, int64_t n, int64_t k,
                           const void* a, const void* b, void* d, cudaStream_t stream);

}  // namespace fact::gemm
