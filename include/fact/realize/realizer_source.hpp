// The tuner's candidates from the registered realizers (realizer.hpp): the engine's one
// CandidateSource. Tests substitute their own CandidateSource.
#pragma once
#include "fact/realize/compile_command.hpp"
#include "fact/realize/tuner.hpp"

namespace fact::realize {

class RealizerSource : public CandidateSource {
 public:
  explicit RealizerSource(CompileOptions options = default_compile_options());

  KernelSpec problem_class(const Problem& problem, core::PrecisionMode precision) override;
  // `space`: "default" (curated, pruned) or "exhaustive" (every combination, pruned); throws
  // std::invalid_argument for another name.
  ParamSpace candidates(const KernelSpec& problem_class, const Problem& problem,
                        const std::string& space) override;
  BuildJob build_job(const KernelSpec& spec) override;
  TuningKey tuning_key(const KernelSpec& problem_class, const Problem& problem,
                       core::PrecisionMode precision, const std::string& cutlass_version) override;
  std::string family(const KernelSpec& spec) override;

  const CompileOptions& compile_options() const { return options_; }

 private:
  const Realizer& realizer_of(const KernelSpec& spec) const;
  CompileOptions options_;
};

}  // namespace fact::realize
