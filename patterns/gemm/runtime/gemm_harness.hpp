// Device operands of one GEMM case and the checks run on them: random inputs, a poisoned and
// guarded output, the float64 reference, and the comparison that turns one call of a kernel
// (or a library baseline) into a CheckResult.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "patterns/gemm/kind/problem.hpp"
#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/device_kernels.hpp"
#include "fact/runtime/fact_abi.h"
#include "patterns/gemm/runtime/gemm_case.hpp"
#include "fact/runtime/run_report.hpp"

namespace fact::runtime {

// Something that computes a GEMM from FactGemmArgs: a kernel library's entry or a baseline.
// Returns a FactStatus; throws CudaError when a CUDA/cuBLAS call fails.
using GemmLauncher = std::function<int(const FactGemmArgs& args, cudaStream_t stream)>;

// The storage type of a supported dtype (float32, bfloat16, float16); std::invalid_argument
// otherwise.
ElementType element_type(graph::DType dtype);

// Float64 reference parameters for `problem` reading the given device operands (D's layout
// is used for C).
ReferenceParams reference_params(const discover::GemmProblem& problem, const void* a,
                                 const void* b, const void* c, const void* bias, double* out);

class GemmHarness {
 public:
  // Allocates A, B, the epilogue operands the case reads, D with poisoned guard bands of
  // kGuardBytes on both sides, the float64 reference, and two non-blocking streams.
  explicit GemmHarness(GemmCase gemm_case);

  static constexpr size_t kGuardBytes = 4096;
  static constexpr int64_t kStreamCheckDelayNs = 2'000'000;

  const GemmCase& gemm_case() const { return case_; }
  cudaStream_t primary_stream() const { return primary_.get(); }
  cudaStream_t secondary_stream() const { return secondary_.get(); }

  // New random inputs from `seed`: A, C and bias uniform in [-1, 1], B uniform in
  // [-3/√K, 3/√K] so that A·B has about unit variance (activations are exercised in their
  // non-linear range and bias/residual terms are not negligible). Invalidates the reference.
  void randomize_inputs(uint64_t seed);
  uint64_t input_seed() const { return seed_; }

  // The ABI arguments for `problem` (its scalars) on this harness's buffers.
  FactGemmArgs abi_args(const discover::GemmProblem& problem) const;
  FactGemmArgs abi_args() const { return abi_args(case_.problem); }

  // Runs `launcher` once on `stream` for `problem` (same sizes, dtypes and layouts as the
  // case; epilogue and scalars may differ) and checks it: output poisoned first, every element
  // written, finite, guard bands untouched, inputs unchanged, relative error against the float64
  // reference of `problem` within `tolerance`. On the secondary stream the poisoning is queued
  // behind a kStreamCheckDelayNs spin, so a kernel that launches on another stream than the
  // one it was given races the poison and is caught. Returns the FactStatus in `status` when it is not
  // FACT_OK (the check then has failure set and no measurements). Throws CudaError.
  CheckResult check(const std::string& name, const GemmLauncher& launcher,
                    const discover::GemmProblem& problem, cudaStream_t stream, double tolerance,
                    int* status);

  // Sums of the last comparison (for tests).
  const ErrorSums& last_sums() const { return last_sums_; }

  // Copies D (without guards) to the host as raw bytes.
  std::vector<unsigned char> download_output() const;

 private:
  void ensure_reference(const discover::GemmProblem& problem, cudaStream_t stream);
  uint64_t input_checksum(cudaStream_t stream);
  int64_t guard_changes(cudaStream_t stream);

  GemmCase case_;
  CudaStream primary_, secondary_;
  DeviceBuffer a_, b_, c_, bias_, d_storage_, reference_, scratch_;
  void* d_ = nullptr;
  int64_t d_elements_ = 0, guard_elements_ = 0;
  uint64_t seed_ = 0;
  std::optional<std::string> reference_key_;
  ErrorSums last_sums_{};
};

// A stable text key of everything the reference depends on besides the inputs.
std::string reference_key(const discover::GemmProblem& problem);

}  // namespace fact::runtime
