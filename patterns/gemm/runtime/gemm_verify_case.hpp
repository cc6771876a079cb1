// The GEMM kind's part of the one verifier (fact/runtime/verify_case.hpp): the buffers of one
// GemmCase (A, B, one per epilogue operand, a TABLES step's second table, D), their random inputs,
// the call (pack.cpp's gemm_args with the buffers' addresses, as the plan packs it), the float64
// reference computed on the GPU (reference_gemm.hpp), the "scalars" check's constants
// (with_adversarial_constants), and the cuBLAS / cuBLASLt baselines (blas_baselines.hpp).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "fact/runtime/verify_case.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/runtime/gemm_case.hpp"
#include "patterns/gemm/runtime/reference_gemm.hpp"

namespace fact::gemm {

class BlasContext;
using runtime::ElementType;

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

// A stable text key of everything the reference depends on besides the inputs.
std::string reference_key(const GemmProblem& problem);

// Where each operand of a case lies in the verifier's BufferSet.
struct GemmBufferIndex {
  size_t a = 0, b = 0, d = 0;
  std::array<int, FACT_GEMM_MAX_STEPS> operand{}, operand2{};  // -1: the step has none
};

// What a call computes on a case's buffers: `problem` (the case's, its adversarial constants, or
// a baseline's prefix: same sizes, dtypes, layouts and operand steps).
class GemmComputation final : public runtime::Computation {
 public:
  GemmComputation(GemmProblem problem, GemmBufferIndex index) : problem_(std::move(problem)), index_(index) {}
  runtime::ArgBytes arguments(const runtime::BufferSet& buffers) const override;
  void reference(runtime::VerifyBackend& backend, const runtime::BufferSet& buffers,
                 const std::vector<double*>& refs) const override;
  std::string reference_key() const override { return gemm::reference_key(problem_); }
  const GemmProblem& problem() const { return problem_; }
  // gemm_args(problem) with the addresses of A, B, D and each step's operands in `buffers`.
  FactGemmArgs call(const runtime::BufferSet& buffers) const;

 private:
  GemmProblem problem_;
  GemmBufferIndex index_;
};

class GemmVerifyCase final : public runtime::VerifyCase {
 public:
  // `with_accuracy_peer`: in strict mode with float32 operands, report cuBLAS SGEMM's own error
  // beside the kernel's (set for kernel runs). `vary_bias_multiplier` false: the scalars check
  // keeps each bias multiplier (for verifying a launcher that fuses a bias only at multiplier 1,
  // Baseline::bias_multiplier_fixed).
  GemmVerifyCase(GemmCase gemm_case, bool with_accuracy_peer, bool vary_bias_multiplier = true);
  ~GemmVerifyCase() override;

  std::vector<runtime::BufferSpec> buffers() const override;
  // A and every epilogue operand uniform in [-1, 1], B uniform in [-3/√K, 3/√K] so that A·B has
  // about unit variance (activations are exercised in their non-linear range and bias/residual
  // terms are not negligible); each buffer its own stream of numbers.
  void fill_inputs(runtime::VerifyBackend& backend, const runtime::BufferSet& buffers, uint64_t seed,
                   int index) override;
  std::shared_ptr<const runtime::Computation> computation() const override;
  // "scalars": new inputs and every constant unlike any default and distinct per step.
  std::optional<runtime::VariedCheck> varied() const override;
  double tolerance() const override;
  double flops() const override { return case_.problem.flops(); }
  runtime::Baseline make_baseline(const std::string& name, runtime::VerifyBackend& backend,
                                  const runtime::BufferSet& buffers) override;
  std::optional<runtime::AccuracyPeer> accuracy_peer(runtime::VerifyBackend& backend,
                                                     const runtime::BufferSet& buffers) override;

  const GemmCase& gemm_case() const { return case_; }
  const GemmBufferIndex& index() const { return index_; }

 private:
  BlasContext& blas();

  GemmCase case_;
  bool with_accuracy_peer_;
  bool vary_bias_multiplier_;
  GemmBufferIndex index_;
  std::vector<runtime::BufferSpec> buffers_;
  std::unique_ptr<BlasContext> blas_;
};

}  // namespace fact::gemm
