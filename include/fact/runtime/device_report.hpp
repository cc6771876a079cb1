// The measured device profile written by `fact device`: DeviceProfile's fields under
// their member names (so any reader of DeviceProfile can take the file as is) plus the facts
// and measurements behind them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fact/problem/device_profile.hpp"

namespace fact::runtime {

struct DeviceReport {
  DeviceProfile profile;
  int device_index = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  std::string driver_release;  // the kernel driver's version, e.g. "580.159.04" (may be empty)
  int driver_version = 0;   // cudaDriverGetVersion: the CUDA version it supports, e.g. 13000
  int runtime_version = 0;  // cudaRuntimeGetVersion
  int cublas_version = 0;   // cublasGetVersion, e.g. 130100
  // How each rate was measured: {"copy": {"bytes": .., "ms": {...}}, "gemm_bf16": {...}, ...}
  nlohmann::json measurements = nlohmann::json::object();
};

// 13000 → "13.0", 12080 → "12.8" (the CUDA driver/runtime encoding 1000·major + 10·minor).
std::string cuda_version_string(int version);
// 130100 → "13.1.0" (cuBLAS: 10000·major + 100·minor + patch).
std::string cublas_version_string(int version);

// "580.159.04" from the text of /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX
// x86_64 Kernel Module  580.159.04  Thu ..."); empty when the text holds none.
std::string parse_nvidia_driver_release(std::string_view proc_text);
// parse_nvidia_driver_release of /proc/driver/nvidia/version; empty when unreadable.
std::string nvidia_driver_release();

// {"name", "hbm_bytes_per_s", "bf16_flops", "tf32_flops", "fp32_flops", "launch_overhead_s",
//  "sm_count", "compute_capability", "l2_bytes", "memory_bytes", "versions": {...},
//  "measurements": {...}}
nlohmann::json to_json(const DeviceReport& report);
// Reading such a file: fact::device_profile_from_json / load_device_profile
// (fact/problem/device_profile.hpp).

}  // namespace fact::runtime
