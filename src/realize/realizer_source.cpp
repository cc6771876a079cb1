#include "fact/realize/realizer_source.hpp"

#include <stdexcept>

#include "fact/realize/realizer.hpp"
#include "fact/realize/render.hpp"

namespace fact::realize {

RealizerSource::RealizerSource(CompileOptions options) : options_(std::move(options)) {}

const Realizer& RealizerSource::realizer_of(const KernelSpec& spec) const {
  const Realizer* realizer = RealizerRegistry::global().find(spec.pattern());
  if (realizer == nullptr) {
    throw std::invalid_argument("pattern '" + spec.pattern() + "' has no realizer");
  }
  return *realizer;
}

KernelSpec RealizerSource::problem_class(const Problem& problem, core::PrecisionMode precision) {
  return RealizerRegistry::global().for_problem(problem, precision).problem_class(problem, precision);
}

ParamSpace RealizerSource::candidates(const KernelSpec& problem_class, const Problem& problem,
                                      const std::string& space) {
  if (space != "default" && space != "exhaustive") {
    throw std::invalid_argument("unknown parameter space '" + space + "' (expected default or exhaustive)");
  }
  SpaceOptions options;
  options.exhaustive = space == "exhaustive";
  if (options.exhaustive) options.max_candidates = 100000;
  return realizer_of(problem_class).space(problem_class, problem, options);
}

BuildJob RealizerSource::build_job(const KernelSpec& spec) {
  return realize::build_job(render_kernel(spec, options_), options_);
}

TuningKey RealizerSource::tuning_key(const KernelSpec& problem_class, const Problem& problem,
                                     core::PrecisionMode precision, const std::string& cutlass_version) {
  return make_tuning_key(realizer_of(problem_class), problem_class, problem, precision, cutlass_version);
}

std::string RealizerSource::family(const KernelSpec& spec) { return realizer_of(spec).family(spec); }

}  // namespace fact::realize
