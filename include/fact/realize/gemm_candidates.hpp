// The GEMM pattern as a tuning candidate source: problem class from spec_from_problem, the
// pruned parameter space of patterns/gemm/space.hpp, and build jobs rendered by
// render_kernel with the nvcc command line of compile_command.hpp.
#pragma once
#include "fact/realize/compile_command.hpp"
#include "fact/realize/tuner.hpp"

namespace fact::realize {

class GemmCandidateSource : public CandidateSource {
 public:
  explicit GemmCandidateSource(CompileOptions options = default_compile_options());

  KernelSpec problem_class(const discover::GemmProblem& problem, const std::string& precision) override;
  // `space`: "default" (curated, pruned) or "exhaustive" (every combination, pruned); throws
  // std::invalid_argument for another name.
  ParamSpace candidates(const KernelSpec& problem_class, const discover::GemmProblem& problem,
                        const std::string& space) override;
  BuildJob build_job(const KernelSpec& spec) override;

  const CompileOptions& compile_options() const { return options_; }

 private:
  CompileOptions options_;
};

}  // namespace fact::realize
