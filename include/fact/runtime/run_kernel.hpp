// `fact run-kernel` as a library call: load a kernel, verify it, time it, run the baselines,
// and produce a RunReport. Meant to run in a child process per candidate (the tuner's), so
// that a crashing or hanging kernel cannot take the caller down; run_kernel_command arms the
// ProcessGuard that makes the JSON report reliable in that case too.
#pragma once
#include "fact/runtime/process_guard.hpp"
#include "fact/runtime/run_options.hpp"
#include "fact/runtime/run_report.hpp"

namespace fact::runtime {

// Never throws: bad options, load failures, CUDA errors and refusals all end up in the report
// (status and error). `guard` (may be null) is told the current phase.
//   - Problems the kind's runtime cannot run with the kernel's spec, and kernels returning
//     FACT_ERR_CANNOT_IMPLEMENT: status CannotImplement.
//   - A kernel whose precision is below the mode's (the kind runtime's check): status Error.
//   - A failed check: status Wrong, no timing.
//   - Baselines run after the kernel (or alone with baseline_only) on the same buffers; their
//     failures are recorded per baseline and do not change the status.
RunReport run_kernel(const RunKernelOptions& options, ProcessGuard* guard = nullptr);

// Arms a ProcessGuard(options.json_path, options.timeout_s), runs run_kernel, writes the JSON
// report atomically, prints summary_line to stdout, and returns exit_code_for(status) (or
// kExitError when the report cannot be written).
int run_kernel_command(const RunKernelOptions& options);

// Facts about the current device for reports: name, sm_count, compute capability, driver,
// runtime and cuBLAS versions. Throws CudaError.
nlohmann::json current_device_json();
// The loaded cuBLAS library's version, 10000·major + 100·minor + patch. Throws CudaError.
int cublas_library_version();

}  // namespace fact::runtime
