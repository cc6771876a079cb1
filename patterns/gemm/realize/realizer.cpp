// The GEMM pattern's realizer (fact/realize/realizer.hpp): bf16/fp16 GEMMs, and float32 GEMMs
// in precision mode tf32, as CUTLASS 3 sm90 kernels (render.hpp). Float32 GEMMs in strict mode
// belong to patterns/gemm_f32_strict.
#include "patterns/gemm/realize/realizer.hpp"

#include <stdexcept>

#include "fact/realize/realizer.hpp"
#include "patterns/gemm/realize/cutlass_names.hpp"
#include "patterns/gemm/realize/render.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"

namespace fact::gemm {

std::string epilogue_class_token(const std::vector<EpilogueOpSpec>& epilogue) {
  if (epilogue.empty()) return "none";
  std::string token;
  for (const auto& op : epilogue) {
    if (!token.empty()) token += "+";
    token += op.kind == EpilogueStep::Kind::Activation ? std::string(activation_name(op.activation))
                                                       : std::string(epilogue_kind_name(op.kind));
  }
  return token;
}

std::string gemm_class_token(const GemmSpec& spec) {
  return std::string(realize::dtype_token(spec.a_dtype)) + "." + std::string(realize::dtype_token(spec.b_dtype)) + "." +
         std::string(realize::dtype_token(spec.d_dtype)) + "." + std::string(realize::dtype_token(spec.accumulate)) +
         "|" + layout_token(spec.a_layout) + layout_token(spec.b_layout) + layout_token(spec.d_layout) +
         "|" + epilogue_class_token(spec.epilogue) +
         // A tuned choice for an aligned D (a TMA epilogue, perhaps stream-K) cannot run an
         // unaligned one of the same sizes' bucket: the direct-store variant is its own class.
         (stores_d_directly(spec) ? "|dstore" : "");
}

std::string gemm_family(const GemmSpec& spec) {
  return std::string(mainloop_token(spec.mainloop)) + "/" +
         std::string(tile_scheduler_token(spec.scheduler)) + "/" + (spec.split_k > 1 ? "split" : "whole");
}

SpaceOptions gemm_space_options(const realize::SpaceOptions& options, const GemmProblem& problem) {
  SpaceOptions sized;
  static_cast<realize::SpaceOptions&>(sized) = options;
  sized.m = problem.m;
  sized.n = problem.n;
  sized.k = problem.k;
  sized.batch = problem.batch;
  return sized;
}

namespace {

class GemmRealizer final : public realize::Realizer {
 public:
  std::string pattern() const override { return "gemm"; }
  std::string kind() const override { return kKindName; }

  std::optional<std::string> declines(const Problem& problem, core::PrecisionMode precision) const override {
    const GemmProblem p = gemm_problem_of(problem);
    try {
      if (math_mode_for(p.a.dtype, precision) == MathMode::Tf32x3) {
        return "float32 GEMMs in precision '" + std::string(core::precision_name(precision)) +
               "' are float32-accurate (3xTF32)";
      }
      GemmSpec spec = spec_from_problem(p, precision);
      if (auto error = gemm_spec_error(spec)) return *error;
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::nullopt;
  }
  realize::KernelSpec problem_class(const Problem& problem, core::PrecisionMode precision) const override {
    return spec_from_problem(gemm_problem_of(problem), precision).to_kernel_spec();
  }
  realize::ParamSpace space(const realize::KernelSpec& problem_class, const Problem& problem,
                            const realize::SpaceOptions& options) const override {
    return gemm_space(GemmSpec::of(problem_class), gemm_space_options(options, gemm_problem_of(problem)))
        .to_param_space();
  }
  realize::KernelTemplate render(const realize::KernelSpec& spec) const override {
    return render_gemm_template(GemmSpec::of(spec));
  }
  std::string class_token(const realize::KernelSpec& problem_class) const override {
    return gemm_class_token(GemmSpec::of(problem_class));
  }
  std::string family(const realize::KernelSpec& spec) const override {
    return gemm_family(GemmSpec::of(spec));
  }
};

const realize::RealizerRegistrar kGemmRealizer{std::make_unique<GemmRealizer>()};

}  // namespace
}  // namespace fact::gemm
