// GEMM-family problems as a tuning candidate source: the problem class from spec_from_problem
// (which also picks the pattern: "gemm" for the sm90 template, "gemm_f32_strict" for strict
// float32), the pruned parameter space registered for that pattern, and build jobs rendered by
// render_kernel with the nvcc command line of compile_command.hpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/param_space.hpp"
#include "fact/realize/tuner.hpp"

namespace fact::realize {

// A pattern's parameter space: the configurations worth compiling for a problem class.
using SpaceFunction = ParamSpace (*)(const KernelSpec& problem_class, const SpaceOptions& options);

// Registers the space of KernelSpec::pattern == `pattern`. Throws std::logic_error when the
// pattern already has one.
void register_space(const std::string& pattern, SpaceFunction space);
// The space registered for `pattern`, or nullopt.
std::optional<SpaceFunction> find_space(const std::string& pattern);
std::vector<std::string> registered_spaces();  // sorted

class GemmCandidateSource : public CandidateSource {
 public:
  explicit GemmCandidateSource(CompileOptions options = default_compile_options());

  KernelSpec problem_class(const discover::GemmProblem& problem, const std::string& precision) override;
  // `space`: "default" (curated, pruned) or "exhaustive" (every combination, pruned); throws
  // std::invalid_argument for another name or a pattern without a registered space.
  ParamSpace candidates(const KernelSpec& problem_class, const discover::GemmProblem& problem,
                        const std::string& space) override;
  BuildJob build_job(const KernelSpec& spec) override;

  const CompileOptions& compile_options() const { return options_; }

 private:
  CompileOptions options_;
};

}  // namespace fact::realize
