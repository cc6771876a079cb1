// Measures the device profile written by `fact device` (device_report.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "fact/runtime/device_report.hpp"
#include "fact/runtime/timing.hpp"

namespace fact::runtime {

struct DeviceProbeOptions {
  int device = 0;
  int64_t gemm_size = 8192;              // M = N = K of the cuBLAS GEMMs
  size_t copy_bytes = size_t{1} << 30;   // bytes per device-to-device copy
  int launches = 2000;                   // empty kernels for the launch overhead
  TimingOptions timing{.warmup_runs = 3, .min_runs = 10, .min_time_s = 0.2, .max_runs = 200};
};

// Device facts (name, SMs, L2, memory, versions) and measured rates on random data:
//   hbm_bytes_per_s    2·bytes / median time of a cudaMemcpyAsync device-to-device copy
//                      (each byte is read once and written once)
//   bf16_flops         cublasGemmEx bf16 → bf16, float32 compute, gemm_size³
//   tf32_flops         float32 operands, CUBLAS_COMPUTE_32F_FAST_TF32
//   fp32_flops         float32 operands, CUBLAS_COMPUTE_32F (SGEMM)
//   launch_overhead_s  max(GPU time per back-to-back empty kernel, host time per launch call)
// Throws CudaError (no device, out of memory, a failed call).
DeviceReport measure_device(const DeviceProbeOptions& options);

}  // namespace fact::runtime
