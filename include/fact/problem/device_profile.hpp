// The device's ceilings, used by roofline estimates (discovery's ranking, reports). Defaults
// are an H100 SXM's; `fact device` measures the real ones and saves them
// (default_device_profile_path), which discovery then reads.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fact {

struct DeviceProfile {
  std::string name = "H100 SXM (defaults)";
  double hbm_bytes_per_s = 3.0e12;   // measured device-to-device copy rate
  double bf16_flops = 750e12;        // dense bf16/fp16 tensor-core rate
  double tf32_flops = 370e12;        // dense tf32 tensor-core rate
  double fp32_flops = 50e12;         // CUDA-core fp32 (SGEMM) rate
  double launch_overhead_s = 4e-6;   // per kernel
};

// One kernel at its roofline: max(flops / rate, bytes / memory rate) plus a launch.
double roofline_seconds(double flops, double flops_per_s, double bytes, const DeviceProfile& device);

// <fact cache root>/device_profile.json: where `fact device` saves the measured profile.
std::filesystem::path default_device_profile_path();
// Reads a profile file (the JSON `fact device --json` writes: {"name", "hbm_bytes_per_s", ...}
// or the same under "profile"); throws std::runtime_error naming the file when unreadable.
DeviceProfile load_device_profile(const std::filesystem::path& file);
// The saved profile when default_device_profile_path() exists and reads, else the defaults.
DeviceProfile default_device_profile();
nlohmann::json device_profile_to_json(const DeviceProfile& profile);
// Reads the fields of device_profile_to_json (or the same under "profile"); keys that are absent
// keep their defaults; throws std::invalid_argument for a field of the wrong type.
DeviceProfile device_profile_from_json(const nlohmann::json& j);

}  // namespace fact
