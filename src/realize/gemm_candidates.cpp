#include "fact/realize/gemm_candidates.hpp"

#include <stdexcept>

#include "fact/realize/render.hpp"
#include "fact/realize/spec_from_problem.hpp"
#include "patterns/gemm/space.hpp"

namespace fact::realize {

GemmCandidateSource::GemmCandidateSource(CompileOptions options) : options_(std::move(options)) {}

KernelSpec GemmCandidateSource::problem_class(const discover::GemmProblem& problem, const std::string& precision) {
  return spec_from_problem(problem, precision);
}

ParamSpace GemmCandidateSource::candidates(const KernelSpec& problem_class, const discover::GemmProblem& problem,
                                           const std::string& space) {
  if (space != "default" && space != "exhaustive") {
    throw std::invalid_argument("unknown parameter space '" + space + "' (expected default or exhaustive)");
  }
  SpaceOptions options;
  options.exhaustive = space == "exhaustive";
  if (options.exhaustive) options.max_candidates = 100000;
  options.m = problem.m;
  options.n = problem.n;
  options.k = problem.k;
  options.batch = problem.batch;
  return gemm::gemm_space(problem_class, options);
}

BuildJob GemmCandidateSource::build_job(const KernelSpec& spec) {
  return realize::build_job(render_kernel(spec, options_), options_);
}

}  // namespace fact::realize
