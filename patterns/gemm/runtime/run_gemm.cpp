// The GEMM kind's runtime (fact/runtime/kind_runtime.hpp), registered for kind "gemm": turns a
// `fact run-kernel` request for a GEMM problem into a GemmVerifyCase (gemm_verify_case.hpp) for
// the one verifier — the kernel's spec joined with the problem's sizes and constants
// (gemm_case.hpp), after the precision check; the baselines are cuBLAS / cuBLASLt
// (blas_baselines.hpp), and in strict mode cuBLAS SGEMM's own error is reported beside the
// kernel's. Calls go through the kernel ABI v2 (FactGemmArgs with the epilogue as data, packed
// by pack.cpp's gemm_args like the plan's argument images).
#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/kind_runtime.hpp"
#include "patterns/gemm/runtime/gemm_case.hpp"
#include "patterns/gemm/runtime/gemm_verify_case.hpp"

namespace fact::gemm {
namespace {

using nlohmann::json;
using runtime::KernelLibrary;
using runtime::RunKernelOptions;
using runtime::RunReport;
using runtime::RunStatus;

// The report's problem: sizes, dtypes, layouts, fusion, and the epilogue with every constant
// the checks used (the problem JSON's spelling).
json problem_json(const GemmCase& c, const std::string& text) {
  const GemmProblem& p = c.problem;
  return {{"text", text},
          {"m", p.m},
          {"n", p.n},
          {"k", p.k},
          {"batch", p.batch},
          {"outer_batch", p.outer_batch},
          {"alpha", p.alpha},
          {"epilogue", gemm_problem_to_json(p).at("epilogue")},
          {"a_dtype", graph::dtype_name(p.a.dtype)},
          {"b_dtype", graph::dtype_name(p.b.dtype)},
          {"d_dtype", graph::dtype_name(p.d.dtype)},
          {"layouts", std::string{layout_token(p.a.layout), layout_token(p.b.layout),
                                  layout_token(p.d.layout)}},
          {"fusion", p.fusion_name()},
          {"shape", p.shape_string()},
          {"flops", p.flops()}};
}

class GemmRuntime final : public runtime::KindRuntime {
 public:
  std::string kind() const override { return kKindName; }

  std::unique_ptr<runtime::VerifyCase> prepare(const RunKernelOptions& options, const Problem& problem,
                                               const KernelLibrary* library, RunReport& report) const override {
    const GemmProblem given = gemm_problem_of(problem);
    GemmSpec spec;
    if (library == nullptr) {
      spec = baseline_spec(given, options.precision);
    } else {
      spec = GemmSpec::of(library->spec());
      if (auto why = precision_mismatch(spec, options.precision)) {
        report.status = RunStatus::Error;
        report.error = *why;
        return nullptr;
      }
    }
    GemmCase gemm_case;
    try {
      gemm_case = make_gemm_case(spec, given, options.precision);
    } catch (const std::invalid_argument& e) {
      report.status = library == nullptr ? RunStatus::Error : RunStatus::CannotImplement;
      report.error = e.what();
      return nullptr;
    }
    report.problem = problem_json(gemm_case, options.problem);
    report.tolerance = core::tolerance_for(options.precision, gemm_case.problem.d.dtype);
    return std::make_unique<GemmVerifyCase>(gemm_case, library != nullptr);
  }
};

const runtime::KindRuntimeRegistrar kGemmRuntime{std::make_unique<GemmRuntime>()};

}  // namespace
}  // namespace fact::gemm
