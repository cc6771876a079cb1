// The GEMM kind's runtime (fact/runtime/kind_runtime.hpp), registered for kind "gemm": one
// `fact run-kernel` request for a GEMM problem — its buffers (gemm_case.hpp, gemm_harness.hpp),
// the precision check, the workspace query, the verification sequence (verifier.hpp), cuBLAS
// SGEMM's own error in strict mode, timing, and the cuBLAS/cuBLASLt baselines on the same
// inputs. Calls go through the kernel ABI v2 (FactGemmArgs with the epilogue as data, packed by
// pack.cpp's gemm_args like the plan's argument images).
#include <cublas_v2.h>

#include <random>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_report.hpp"
#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/kind_runtime.hpp"
#include "fact/runtime/run_kernel.hpp"
#include "fact/runtime/timing.hpp"
#include "patterns/gemm/runtime/blas_baselines.hpp"
#include "patterns/gemm/runtime/gemm_case.hpp"
#include "patterns/gemm/runtime/gemm_harness.hpp"
#include "patterns/gemm/runtime/verifier.hpp"

namespace fact::gemm {
namespace {

using nlohmann::json;
using runtime::BaselineResult;
using runtime::check_seed;
using runtime::current_device_json;
using runtime::describe;
using runtime::fact_status_name;
using runtime::KernelLibrary;
using runtime::L2Flusher;
using runtime::ProcessGuard;
using runtime::RunKernelOptions;
using runtime::RunReport;
using runtime::SgemmComparison;
using runtime::time_launches;
using runtime::tflops_per_s;
using core::tolerance_for;

// The report's problem: sizes, dtypes, layouts, fusion, and the epilogue with every constant
// the checks used (the problem JSON's spelling).
json problem_json(const GemmCase& c, const std::string& text) {
  const GemmProblem& p = c.problem;
  return {{"text", text},
          {"m", p.m},
          {"n", p.n},
          {"k", p.k},
          {"batch", p.batch},
          {"outer_batch", p.outer_batch},
          {"alpha", p.alpha},
          {"epilogue", gemm_problem_to_json(p).at("epilogue")},
          {"a_dtype", graph::dtype_name(p.a.dtype)},
          {"b_dtype", graph::dtype_name(p.b.dtype)},
          {"d_dtype", graph::dtype_name(p.d.dtype)},
          {"layouts", std::string{layout_token(p.a.layout), layout_token(p.b.layout),
                                  layout_token(p.d.layout)}},
          {"fusion", p.fusion_name()},
          {"shape", p.shape_string()},
          {"flops", p.flops()}};
}

uint64_t fresh_seed() {
  std::random_device device;
  const uint64_t seed = (uint64_t{device()} << 32) ^ device();
  return seed == 0 ? 1 : seed;
}

void set_phase(ProcessGuard* guard, const std::string& phase) {
  if (guard) guard->set_phase(phase);
}

// The kernel's entry with its own workspace, filled with 0xFF once so that a kernel relying
// on zeroed workspace fails verification.
struct KernelLauncher {
  FactEntry entry = nullptr;
  DeviceBuffer workspace;

  int operator()(const FactGemmArgs& args, cudaStream_t stream) const {
    return entry(&args.header, workspace.data(), nullptr, stream);
  }
};

BaselineResult run_baseline(const std::string& name, BlasContext& blas, GemmHarness& harness,
                            const RunKernelOptions& options, L2Flusher* flusher,
                            ProcessGuard* guard) {
  BaselineResult result;
  result.name = name;
  const GemmCase& gemm_case = harness.gemm_case();
  try {
    set_phase(guard, "setting up baseline " + name);
    Baseline baseline = name == "cublas" ? make_cublas_baseline(blas, gemm_case)
                                         : make_cublaslt_baseline(blas, gemm_case, harness.abi_args());
    result.computes = baseline.computes.fusion_name();
    result.fused = baseline.fused;
    result.config = baseline.config;
    set_phase(guard, "verifying baseline " + name);
    int status = FACT_OK;
    const double tolerance = tolerance_for(gemm_case.precision, gemm_case.problem.d.dtype);
    CheckResult check = harness.check("primary", baseline.launch, baseline.computes,
                                      harness.primary_stream(), tolerance, &status);
    result.check = check;
    result.status = check.passed ? "ok" : "wrong";
    if (!check.passed) result.error = check.failure;
    if (!options.verify_only) {
      set_phase(guard, "timing baseline " + name);
      const FactGemmArgs args = harness.abi_args(baseline.computes);
      result.ms = time_launches(
          [&](cudaStream_t stream) { baseline.launch(args, stream); }, harness.primary_stream(),
          options.timing, flusher);
      result.tflops = tflops_per_s(gemm_case.problem.flops(), result.ms->median);
    }
  } catch (const std::exception& e) {
    result.status = "error";
    result.error = e.what();
  }
  return result;
}

void run_gemm(const RunKernelOptions& options, const Problem& problem, const KernelLibrary* library,
              ProcessGuard* guard, RunReport& report) {
  const GemmProblem given = gemm_problem_of(problem);
  GemmSpec spec;
  if (library == nullptr) {
    spec = baseline_spec(given, options.precision);
  } else {
    spec = GemmSpec::of(library->spec());
    if (auto why = precision_mismatch(spec, options.precision)) {
      report.status = RunStatus::Error;
      report.error = *why;
      return;
    }
  }

  GemmCase gemm_case;
  try {
    gemm_case = make_gemm_case(spec, given, options.precision);
  } catch (const std::invalid_argument& e) {
    report.status = library == nullptr ? RunStatus::Error : RunStatus::CannotImplement;
    report.error = e.what();
    return;
  }
  report.problem = problem_json(gemm_case, options.problem);
  report.tolerance = tolerance_for(options.precision, gemm_case.problem.d.dtype);

  set_phase(guard, "initializing CUDA");
  if (runtime::cuda_device_count() == 0) {
    report.status = RunStatus::Error;
    report.error = "no CUDA device is visible";
    return;
  }
  FACT_CUDA_CHECK(cudaSetDevice(options.device));
  report.device = current_device_json();

  GemmHarness harness(gemm_case);
  const uint64_t base_seed = options.seed != 0 ? options.seed : fresh_seed();
  report.timing = {{"base_seed", base_seed}};

  std::optional<BlasContext> blas;
  const bool strict_sgemm = library != nullptr &&
                            options.precision == PrecisionMode::Strict &&
                            gemm_case.problem.a.dtype == graph::DType::Float32;
  if (strict_sgemm || !options.baselines.empty()) blas.emplace();
  std::optional<L2Flusher> flusher;
  if (!options.verify_only) {
    flusher.emplace();
    report.timing.update(describe(options.timing, &*flusher));
  }

  report.status = RunStatus::Ok;
  if (library != nullptr) {
    set_phase(guard, "querying the workspace size");
    harness.randomize_inputs(check_seed(base_seed, 0));
    KernelLauncher launcher;
    launcher.entry = library->entry();
    const FactGemmArgs sample = harness.abi_args();
    size_t workspace_bytes = 0;
    const int query =
        launcher.entry(&sample.header, nullptr, &workspace_bytes, harness.primary_stream());
    if (query != FACT_OK) {
      report.status = query == FACT_ERR_CANNOT_IMPLEMENT ? RunStatus::CannotImplement : RunStatus::Error;
      report.error = "workspace query returned " + fact_status_name(query);
      return;
    }
    report.workspace_bytes = static_cast<int64_t>(workspace_bytes);
    launcher.workspace = runtime::dirty_workspace(workspace_bytes);
    const GemmLauncher launch = std::cref(launcher);

    set_phase(guard, "verifying the kernel");
    std::optional<CheckResult> sgemm_check;
    auto compare_with_sgemm = [&] {
      if (!strict_sgemm) return;
      set_phase(guard, "measuring cuBLAS SGEMM's error");
      Baseline sgemm = make_cublas_baseline(*blas, gemm_case);
      int status = FACT_OK;
      sgemm_check = harness.check("sgemm", sgemm.launch, sgemm.computes, harness.primary_stream(),
                                  report.tolerance, &status);
      set_phase(guard, "verifying the kernel");
    };
    VerifyOutcome outcome = verify_gemm(harness, launch, base_seed, compare_with_sgemm);
    report.checks = outcome.checks;
    report.rel_err = outcome.worst_rel_err;
    report.status = outcome.status;
    report.error = outcome.error;
    if (sgemm_check && sgemm_check->rel_err && !report.checks.empty() && report.checks[0].rel_err) {
      SgemmComparison cmp;
      cmp.sgemm_rel_err = *sgemm_check->rel_err;
      const double kernel_err = *report.checks[0].rel_err;
      cmp.ratio = cmp.sgemm_rel_err > 0 ? kernel_err / cmp.sgemm_rel_err : (kernel_err > 0 ? 1e30 : 1.0);
      cmp.within_limit = cmp.ratio <= core::kSgemmErrorRatioLimit;
      report.sgemm = cmp;
    }
    if (report.status != RunStatus::Ok) return;

    if (!options.verify_only) {
      set_phase(guard, "timing the kernel");
      const FactGemmArgs args = harness.abi_args();
      report.ms = time_launches(
          [&](cudaStream_t stream) {
            const int status = launcher(args, stream);
            if (status != FACT_OK) {
              throw std::runtime_error("kernel returned " + fact_status_name(status) +
                                       " while being timed");
            }
          },
          harness.primary_stream(), options.timing, &*flusher);
      report.tflops = tflops_per_s(gemm_case.problem.flops(), report.ms->median);
    }
  } else {
    harness.randomize_inputs(check_seed(base_seed, 0));
  }

  for (const std::string& name : options.baselines) {
    report.baselines.push_back(
        run_baseline(name, *blas, harness, options, flusher ? &*flusher : nullptr, guard));
  }
  set_phase(guard, "writing the report");
}

class GemmRuntime final : public runtime::KindRuntime {
 public:
  std::string kind() const override { return kKindName; }
  void run(const RunKernelOptions& options, const Problem& problem, const KernelLibrary* library,
           ProcessGuard* guard, RunReport& report) const override {
    run_gemm(options, problem, library, guard, report);
  }
};

const runtime::KindRuntimeRegistrar kGemmRuntime{std::make_unique<GemmRuntime>()};

}  // namespace
}  // namespace fact::gemm
