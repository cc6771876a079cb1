// Device operands of one GEMM case and the checks run on them: random inputs, a poisoned and
// guarded output, the float64 reference, and the comparison that turns one call of a kernel
// (or a library baseline) into a CheckResult.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/device_kernels.hpp"
#include "fact/runtime/run_report.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/runtime/gemm_case.hpp"
#include "patterns/gemm/runtime/reference_gemm.hpp"

namespace fact::gemm {

using runtime::CheckResult;
using runtime::CudaStream;
using runtime::DeviceBuffer;

// Something that computes a GEMM from FactGemmArgs: a kernel library's entry or a baseline.
// Returns a FactStatus; throws CudaError when a CUDA/cuBLAS call fails.
using GemmLauncher = std::function<int(const FactGemmArgs& args, cudaStream_t stream)>;

// The storage type of a supported dtype (float32, bfloat16, float16); std::invalid_argument
// otherwise.
ElementType element_type(DType dtype);

// Float64 reference parameters for `problem` reading A, B and, for every operand step i,
// operands[i] (D's layout for M×N operands; a bias is indexed by n; a TABLES step's first
// table) and operands2[i] (a TABLES step's second table).
ReferenceParams reference_params(const GemmProblem& problem, const void* a, const void* b,
                                 const std::array<const void*, FACT_GEMM_MAX_STEPS>& operands,
                                 double* out,
                                 const std::array<const void*, FACT_GEMM_MAX_STEPS>& operands2 = {});

class GemmHarness {
 public:
  // Allocates A, B, one buffer per epilogue operand (each bias, each M×N tensor), D with
  // poisoned guard bands of kGuardBytes on both sides, the float64 reference, and two
  // non-blocking streams.
  explicit GemmHarness(GemmCase gemm_case);

  static constexpr size_t kGuardBytes = 4096;
  static constexpr int64_t kStreamCheckDelayNs = 2'000'000;

  const GemmCase& gemm_case() const { return case_; }
  cudaStream_t primary_stream() const { return primary_.get(); }
  cudaStream_t secondary_stream() const { return secondary_.get(); }

  // New random inputs from `seed`: A and every epilogue operand uniform in [-1, 1], B uniform
  // in [-3/√K, 3/√K] so that A·B has about unit variance (activations are exercised in their
  // non-linear range and bias/residual terms are not negligible); each buffer its own stream of
  // numbers. Invalidates the reference.
  void randomize_inputs(uint64_t seed);
  uint64_t input_seed() const { return seed_; }

  // The call for `problem` (its constants; same sizes, dtypes, layouts and operand steps as the
  // case, or a prefix of its epilogue) on this harness's buffers: pack.cpp's gemm_args(problem)
  // with the addresses of A, B, D and each step's operand filled in.
  FactGemmArgs abi_args(const GemmProblem& problem) const;
  FactGemmArgs abi_args() const { return abi_args(case_.problem); }

  // Runs `launcher` once on `stream` for `problem` and checks it: output poisoned first, every
  // element written, finite, guard bands untouched, inputs unchanged, relative error against the
  // float64 reference of `problem` within `tolerance`. On the secondary stream the poisoning is
  // queued behind a kStreamCheckDelayNs spin, so a kernel that launches on another stream than
  // the one it was given races the poison and is caught. Returns the FactStatus in `status` when
  // it is not FACT_OK (the check then has failure set and no measurements). Throws CudaError.
  CheckResult check(const std::string& name, const GemmLauncher& launcher,
                    const GemmProblem& problem, cudaStream_t stream, double tolerance, int* status);

  // Sums of the last comparison (for tests).
  const ErrorSums& last_sums() const { return last_sums_; }

  // Copies D (without guards) to the host as raw bytes.
  std::vector<unsigned char> download_output() const;
  // The device buffer of epilogue step `step`'s operand (nullptr for a step without one).
  const void* operand(size_t step) const { return operands_.at(step).data(); }
  // Its second operand (a TABLES step's second table; nullptr for every other step).
  const void* operand2(size_t step) const { return operands2_.at(step).data(); }

 private:
  void ensure_reference(const GemmProblem& problem, cudaStream_t stream);
  uint64_t input_checksum(cudaStream_t stream);
  int64_t guard_changes(cudaStream_t stream);
  std::array<const void*, FACT_GEMM_MAX_STEPS> operand_pointers() const;

  GemmCase case_;
  CudaStream primary_, secondary_;
  DeviceBuffer a_, b_, d_storage_, reference_, scratch_;
  std::array<DeviceBuffer, FACT_GEMM_MAX_STEPS> operands_;
  std::array<DeviceBuffer, FACT_GEMM_MAX_STEPS> operands2_;  // TABLES steps' second tables
  void* d_ = nullptr;
  int64_t d_elements_ = 0, guard_elements_ = 0;
  uint64_t seed_ = 0;
  std::optional<std::string> reference_key_;
  ErrorSums last_sums_{};
};

// A stable text key of everything the reference depends on besides the inputs.
std::string reference_key(const GemmProblem& problem);

}  // namespace fact::gemm
