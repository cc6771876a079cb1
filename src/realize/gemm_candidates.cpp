#include "fact/realize/gemm_candidates.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

#include "fact/realize/render.hpp"
#include "fact/realize/spec_from_problem.hpp"
#include "patterns/gemm/space.hpp"
#include "patterns/gemm_f32_strict/render_strict.hpp"

namespace fact::realize {
namespace {

struct SpaceRegistry {
  std::mutex mutex;
  std::map<std::string, SpaceFunction> spaces;
};

SpaceRegistry& registry() {
  static SpaceRegistry instance;
  return instance;
}

// The strict-float32 pattern's candidates carry no pruning of their own: every one passes
// f32_strict_unsupported_reason.
ParamSpace strict_f32_space(const KernelSpec& problem_class, const SpaceOptions&) {
  ParamSpace space;
  space.candidates = f32_strict_candidates(problem_class);
  if (space.candidates.empty()) {
    // Say why with the Hopper family's verdict on the problem class itself.
    KernelSpec probe = problem_class;
    probe.math = MathMode::Tf32x3;
    probe.mainloop = MainloopSchedule::Cooperative;
    probe.epilogue_schedule = EpilogueSchedule::TmaCooperative;
    space.pruned.push_back({probe, f32_strict_unsupported_reason(probe).value_or("no strict configuration fits")});
  }
  return space;
}

// The patterns realized through this source. A pattern folder with its own space registers it
// here until patterns register their spaces themselves (as they do their templates).
const bool kRegistered = [] {
  register_space("gemm", &gemm::gemm_space);
  register_space("gemm_f32_strict", &strict_f32_space);
  return true;
}();

}  // namespace

void register_space(const std::string& pattern, SpaceFunction space) {
  std::lock_guard lock(registry().mutex);
  if (!registry().spaces.emplace(pattern, space).second) {
    throw std::logic_error("parameter space for pattern '" + pattern + "' registered twice");
  }
}

std::optional<SpaceFunction> find_space(const std::string& pattern) {
  std::lock_guard lock(registry().mutex);
  auto it = registry().spaces.find(pattern);
  if (it == registry().spaces.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> registered_spaces() {
  std::lock_guard lock(registry().mutex);
  std::vector<std::string> names;
  for (const auto& [name, space] : registry().spaces) names.push_back(name);
  return names;
}

GemmCandidateSource::GemmCandidateSource(CompileOptions options) : options_(std::move(options)) {
  (void)kRegistered;
}

KernelSpec GemmCandidateSource::problem_class(const discover::GemmProblem& problem, const std::string& precision) {
  return spec_from_problem(problem, precision);
}

ParamSpace GemmCandidateSource::candidates(const KernelSpec& problem_class, const discover::GemmProblem& problem,
                                           const std::string& space) {
  if (space != "default" && space != "exhaustive") {
    throw std::invalid_argument("unknown parameter space '" + space + "' (expected default or exhaustive)");
  }
  auto function = find_space(problem_class.pattern);
  if (!function) {
    throw std::invalid_argument("pattern '" + problem_class.pattern + "' has no registered parameter space");
  }
  SpaceOptions options;
  options.exhaustive = space == "exhaustive";
  if (options.exhaustive) options.max_candidates = 100000;
  options.m = problem.m;
  options.n = problem.n;
  options.k = problem.k;
  options.batch = problem.batch;
  return (*function)(problem_class, options);
}

BuildJob GemmCandidateSource::build_job(const KernelSpec& spec) {
  return realize::build_job(render_kernel(spec, options_), options_);
}

}  // namespace fact::realize
