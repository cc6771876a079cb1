// Realizers: how a pattern folder turns problems of a kind into kernels (docs/architecture.md).
// Each template-bearing pattern registers one; the engine's stages (realize_matches, the tuner,
// the build driver, the plan writer) find them here and know nothing of any kind.
//
// Several realizers may take the same kind (patterns/gemm: bf16/fp16/tf32 GEMMs;
// patterns/gemm_f32_strict: float32 GEMMs in strict mode); the one with the highest priority
// among those that do not decline a problem realizes it.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fact/problem/problem.hpp"
#include "fact/realize/kernel_spec.hpp"
#include "fact/realize/param_space.hpp"
#include "fact/realize/render.hpp"

namespace fact::realize {

class Realizer {
 public:
  virtual ~Realizer() = default;
  virtual std::string pattern() const = 0;  // the folder: "gemm"
  virtual std::string kind() const = 0;     // the problem kind it realizes: "gemm"
  virtual int priority() const { return 0; }

  // nullopt when this realizer takes `problem` under `precision`; else why it does not.
  virtual std::optional<std::string> declines(const Problem& problem,
                                              core::PrecisionMode precision) const = 0;
  // The problem class (dtypes, layouts, math, epilogue) with the default configuration for
  // the problem's sizes. Throws std::invalid_argument when it cannot realize the problem.
  virtual KernelSpec problem_class(const Problem& problem, core::PrecisionMode precision) const = 0;
  // The configurations worth compiling, pruned, most promising first (docs/architecture.md).
  // `options.exhaustive` asks for the full pruned cross product.
  virtual ParamSpace space(const KernelSpec& problem_class, const Problem& problem,
                           const SpaceOptions& options) const = 0;
  // Type choices of one kernel (logic lives in headers); throws RenderError for a spec it cannot
  // render.
  virtual KernelTemplate render(const KernelSpec& spec) const = 0;
  // The class part of a tuning key: what a tuned choice is valid for besides the sizes
  // ("bf16.bf16.bf16.f32|tnt|bias").
  virtual std::string class_token(const KernelSpec& problem_class) const = 0;
  // A spec's kernel family (mainloop schedule, scheduler, split or not): spread_selection keeps
  // one of each when a sweep is cut.
  virtual std::string family(const KernelSpec& spec) const = 0;
};

class RealizerRegistry {
 public:
  static RealizerRegistry& global();
  // Throws std::logic_error when the pattern already has a realizer.
  void add(std::unique_ptr<Realizer> realizer);
  const Realizer* find(std::string_view pattern) const;
  // The realizer for `problem` under `precision`; throws std::invalid_argument with every
  // realizer's reason when none takes it (or none exists for the kind).
  const Realizer& for_problem(const Problem& problem, core::PrecisionMode precision) const;
  std::vector<std::string> patterns() const;  // sorted

 private:
  std::vector<std::unique_ptr<Realizer>> realizers_;
};

struct RealizerRegistrar {
  explicit RealizerRegistrar(std::unique_ptr<Realizer> realizer) {
    RealizerRegistry::global().add(std::move(realizer));
  }
};

}  // namespace fact::realize
