#include "fact/runtime/run_kernel.hpp"

#include <cublas_v2.h>

#include <fstream>
#include <iostream>
#include <optional>

#include "fact/runtime/cuda_backend.hpp"
#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/device_report.hpp"
#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/kind_runtime.hpp"
#include "fact/runtime/verifier.hpp"

namespace fact::runtime {

using nlohmann::json;

namespace {

void set_phase(ProcessGuard* guard, const std::string& phase) {
  if (guard) guard->set_phase(phase);
}

// The problem to run: the --problem-json file, else the command-line words read by the kind
// (the library's, else --kind, else whichever registered kind accepts them).
Problem read_problem(const RunKernelOptions& options, const KernelLibrary* library) {
  if (!options.problem_json.empty()) {
    std::ifstream in(options.problem_json);
    if (!in) throw std::invalid_argument("cannot read the problem file " + options.problem_json);
    return problem_from_json(json::parse(in));
  }
  std::map<std::string, std::string> words = options.problem_words;
  words["problem"] = options.problem;
  std::string kind = library ? library->kind() : options.kind;
  const KindRegistry& kinds = KindRegistry::global();
  std::vector<std::string> candidates = kind.empty() ? kinds.names() : std::vector<std::string>{kind};
  for (const auto& name : candidates) {
    if (auto desc = kinds.get(name).from_command_line(words)) return Problem{name, *desc};
  }
  throw std::invalid_argument("problem '" + options.problem + "' is not one of kind " +
                              (kind.empty() ? std::string("any registered kind") : "'" + kind + "'"));
}

void run(const RunKernelOptions& options, ProcessGuard* guard, RunReport& report) {
  validate(options);
  std::optional<KernelLibrary> library;
  if (!options.baseline_only) {
    set_phase(guard, "loading the kernel library");
    library.emplace(options.lib);
    report.entry = library->entry_name();
    report.kernel_name = library->spec().name();
  }
  const Problem problem = read_problem(options, library ? &*library : nullptr);
  const KindRuntime* runtime = KindRuntimeRegistry::global().find(problem.kind);
  if (runtime == nullptr) {
    throw std::invalid_argument("no runtime runs kernels of kind '" + problem.kind + "'");
  }
  const std::vector<std::string> registered = kind_of(problem).baselines();
  std::vector<std::string> baselines = options.baselines;
  if (options.baseline_only && baselines.empty()) baselines = registered;
  if (options.baseline_only && baselines.empty()) {
    throw std::invalid_argument("kind '" + problem.kind + "' registers no baselines to run alone");
  }
  check_baselines(baselines, registered, problem.kind);

  std::unique_ptr<VerifyCase> verify_case =
      runtime->prepare(options, problem, library ? &*library : nullptr, report);
  if (!verify_case) return;

  set_phase(guard, "initializing CUDA");
  if (cuda_device_count() == 0) {
    report.status = RunStatus::Error;
    report.error = "no CUDA device is visible";
    return;
  }
  FACT_CUDA_CHECK(cudaSetDevice(options.device));
  report.device = current_device_json();
  CudaBackend backend(options.timing.flush_l2 && !options.verify_only);
  VerifyOptions verify;
  verify.base_seed = options.seed != 0 ? options.seed : fresh_seed();
  verify.verify_only = options.verify_only;
  verify.timing = options.timing;
  verify.baselines = baselines;
  CallFunction kernel;
  if (library) kernel = library->entry();
  verify_and_time(backend, *verify_case, kernel, verify, guard, report);
}

}  // namespace

int cublas_library_version() {
  int major = 0, minor = 0, patch = 0;
  FACT_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &major));
  FACT_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &minor));
  FACT_CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &patch));
  return major * 10000 + minor * 100 + patch;
}

json current_device_json() {
  int device = 0;
  FACT_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  FACT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0, runtime = 0;
  FACT_CUDA_CHECK(cudaDriverGetVersion(&driver));
  FACT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  return {{"index", device},
          {"name", prop.name},
          {"sm_count", prop.multiProcessorCount},
          {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
          {"l2_bytes", prop.l2CacheSize},
          {"driver", nvidia_driver_release().empty() ? cuda_version_string(driver)
                                                     : nvidia_driver_release()},
          {"driver_cuda", cuda_version_string(driver)},
          {"cuda_runtime", cuda_version_string(runtime)},
          {"cublas", cublas_version_string(cublas_library_version())}};
}

RunReport run_kernel(const RunKernelOptions& options, ProcessGuard* guard) {
  RunReport report;
  report.lib = options.lib;
  report.precision = std::string(core::precision_name(options.precision));
  report.problem = {{"text", options.problem}};
  try {
    run(options, guard, report);
  } catch (const std::exception& e) {
    report.status = RunStatus::Error;
    report.error = e.what();
  }
  return report;
}

int run_kernel_command(const RunKernelOptions& options) {
  const json context = {{"kernel", {{"lib", options.lib}}},
                        {"problem", {{"text", options.problem}}},
                        {"precision", core::precision_name(options.precision)}};
  ProcessGuard guard(options.json_path, options.timeout_s, context);
  const RunReport report = run_kernel(options, &guard);
  try {
    guard.finish(to_json(report));
  } catch (const std::exception& e) {
    std::cerr << "fact: error: " << e.what() << "\n";
    return kExitError;
  }
  std::cout << summary_line(report) << std::endl;
  return exit_code_for(report.status);
}

}  // namespace fact::runtime
