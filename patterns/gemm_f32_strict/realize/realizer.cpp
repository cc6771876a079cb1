// The strict-float32 pattern's realizer (fact/realize/realizer.hpp): float32 GEMMs whose
// precision mode requires float32 accuracy (strict), on FACT's 3xTF32 kernels (render.hpp); and
// float32 GEMMs in precision tf32 whose layout the CUTLASS TF32 kernels of patterns/gemm refuse
// (anything but row-major A with column-major B: `x @ W`, `x.T @ W`, ...), on the same Hopper
// mainloop with one TF32 product.
#include <stdexcept>

#include "fact/realize/realizer.hpp"
#include "patterns/gemm/realize/realizer.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"
#include "patterns/gemm_f32_strict/realize/render.hpp"

namespace fact::strict {
namespace {

using namespace fact::gemm;  // NOLINT: the GEMM kind and spec

constexpr const char* kPattern = "gemm_f32_strict";

// The problem class: the GEMM pattern's, re-targeted to this pattern.
GemmSpec strict_class(const Problem& problem, core::PrecisionMode precision) {
  GemmSpec spec = spec_from_problem(gemm_problem_of(problem), precision);
  if (spec.math == MathMode::Tf32) {
    if (spec.a_layout == Layout::RowMajor && spec.b_layout == Layout::ColumnMajor) {
      throw std::invalid_argument("TF32 with K-major operands runs on the CUTLASS TF32 kernels "
                                  "(pattern gemm)");
    }
  } else if (spec.math != MathMode::Tf32x3) {
    throw std::invalid_argument("not a float32 GEMM under precision '" + std::string(core::precision_name(precision)) + "'");
  }
  spec.pattern = kPattern;
  return spec;
}

// Why no strict kernel fits, for a class with no candidate.
std::string no_candidate_reason(const GemmSpec& problem_class) {
  GemmSpec probe = problem_class;
  probe.mainloop = MainloopSchedule::Cooperative;
  probe.epilogue_schedule = EpilogueSchedule::TmaCooperative;
  return f32_strict_unsupported_reason(probe).value_or("no strict configuration fits");
}

class StrictRealizer final : public realize::Realizer {
 public:
  std::string pattern() const override { return kPattern; }
  std::string kind() const override { return kKindName; }
  int priority() const override { return 10; }

  std::optional<std::string> declines(const Problem& problem, core::PrecisionMode precision) const override {
    try {
      const GemmSpec cls = strict_class(problem, precision);
      if (f32_strict_candidates(cls).empty()) return no_candidate_reason(cls);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::nullopt;
  }
  realize::KernelSpec problem_class(const Problem& problem, core::PrecisionMode precision) const override {
    const GemmSpec cls = strict_class(problem, precision);
    const GemmProblem sizes = gemm_problem_of(problem);
    const std::vector<GemmSpec> candidates = f32_strict_candidates(cls, sizes.m, sizes.n);
    if (candidates.empty()) throw std::invalid_argument(no_candidate_reason(cls));
    return candidates.front().to_kernel_spec();  // the first candidate is the default
  }
  realize::ParamSpace space(const realize::KernelSpec& problem_class, const Problem& problem,
                            const realize::SpaceOptions&) const override {
    // The candidates carry no pruning of their own: every one passes
    // f32_strict_unsupported_reason.
    GemmSpec cls = GemmSpec::of(problem_class);
    cls.staged_transpose = StagedTranspose::None;  // the class, not its default candidate
    const GemmProblem sizes = gemm_problem_of(problem);
    GemmSpace space;
    space.candidates = f32_strict_candidates(cls, sizes.m, sizes.n);
    if (space.candidates.empty()) space.pruned.push_back({cls, no_candidate_reason(cls)});
    return space.to_param_space();
  }
  realize::KernelTemplate render(const realize::KernelSpec& spec) const override {
    return render_f32_strict_template(GemmSpec::of(spec));
  }
  std::string class_token(const realize::KernelSpec& problem_class) const override {
    return gemm_class_token(GemmSpec::of(problem_class));
  }
  std::string family(const realize::KernelSpec& spec) const override {
    return gemm_family(GemmSpec::of(spec));
  }
};

const realize::RealizerRegistrar kStrictRealizer{std::make_unique<StrictRealizer>()};

}  // namespace
}  // namespace fact::strict
