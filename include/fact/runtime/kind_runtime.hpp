// How `fact run-kernel` runs a kernel of a kind on the GPU: each kind's pattern folder
// registers a KindRuntime (patterns/<kind>/runtime/) that sets up the problem's buffers, runs
// the verification sequence every kernel passes (docs/runtime.md), times it, and runs the
// kind's library baselines on the same inputs. The generic command (run_kernel.hpp) loads the
// library, reads the problem and dispatches here by kind.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "fact/problem/problem.hpp"
#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/process_guard.hpp"
#include "fact/runtime/run_options.hpp"
#include "fact/runtime/run_report.hpp"

namespace fact::runtime {

class KindRuntime {
 public:
  virtual ~KindRuntime() = default;
  virtual std::string kind() const = 0;
  // Fills `report` (problem, tolerance, device, checks, rel_err, status, timing, baselines)
  // for `problem` run through `library` (nullptr: options.baseline_only, baselines alone).
  // Sets report.status; throws CudaError / std::exception for failures the caller reports as
  // status Error. `guard` (may be null) is told the current phase.
  virtual void run(const RunKernelOptions& options, const Problem& problem,
                   const KernelLibrary* library, ProcessGuard* guard, RunReport& report) const = 0;
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
