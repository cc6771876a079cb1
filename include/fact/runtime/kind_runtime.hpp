// How `fact run-kernel` runs a kernel of a kind: each kind's pattern folder registers a
// KindRuntime (patterns/<kind>/runtime/) that turns a problem into a VerifyCase (verify_case.hpp:
// the call's buffers, input fills, float64 reference, argument image, baselines). The generic
// command (run_kernel.hpp) loads the library, reads the problem, dispatches here by kind, and
// runs the one verifier (verifier.hpp) on the case.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "fact/problem/problem.hpp"
#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/run_options.hpp"
#include "fact/runtime/run_report.hpp"
#include "fact/runtime/verify_case.hpp"

namespace fact::runtime {

class KindRuntime {
 public:
  virtual ~KindRuntime() = default;
  virtual std::string kind() const = 0;
  // The case of `problem` run by `library` (nullptr: a baseline-only run), or nullptr after
  // setting report.status and report.error when it cannot run: CannotImplement when the kernel's
  // spec does not cover the problem, Error for a refusal such as a precision below the mode's.
  // Fills report.problem (the kind's description: "fusion", "shape", "flops", ...) and
  // report.tolerance. Runs before the device is initialized; allocates no device memory.
  virtual std::unique_ptr<VerifyCase> prepare(const RunKernelOptions& options, const Problem& problem,
                                              const KernelLibrary* library, RunReport& report) const = 0;
};

class KindRuntimeRegistry {
 public:
  static KindRuntimeRegistry& global();
  void add(std::unique_ptr<KindRuntime> runtime);  // throws std::logic_error on a duplicate
  const KindRuntime* find(const std::string& kind) const;

 private:
  std::vector<std::unique_ptr<KindRuntime>> runtimes_;
};

struct KindRuntimeRegistrar {
  explicit KindRuntimeRegistrar(std::unique_ptr<KindRuntime> runtime) {
    KindRuntimeRegistry::global().add(std::move(runtime));
  }
};

}  // namespace fact::runtime
