#include "fact/problem/device_profile.hpp"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "fact/util/cache_root.hpp"

namespace fact {

namespace {

DeviceProfile from_json(const nlohmann::json& document) {
  const nlohmann::json& j = document.contains("profile") ? document.at("profile") : document;
  DeviceProfile p;
  auto number = [&](const char* key, double& field) {
    if (!j.contains(key)) return;
    if (!j.at(key).is_number()) {
      throw std::invalid_argument(std::string("device profile: '") + key + "' is not a number");
    }
    field = j.at(key).get<double>();
  };
  if (j.contains("name")) {
    if (!j.at("name").is_string()) throw std::invalid_argument("device profile: 'name' is not a string");
    p.name = j.at("name").get<std::string>();
  }
  number("hbm_bytes_per_s", p.hbm_bytes_per_s);
  number("bf16_flops", p.bf16_flops);
  number("tf32_flops", p.tf32_flops);
  number("fp32_flops", p.fp32_flops);
  number("launch_overhead_s", p.launch_overhead_s);
  return p;
}

}  // namespace

double roofline_seconds(double flops, double flops_per_s, double bytes, const DeviceProfile& device) {
  const double compute = flops_per_s > 0 ? flops / flops_per_s : 0.0;
  const double memory = device.hbm_bytes_per_s > 0 ? bytes / device.hbm_bytes_per_s : 0.0;
  return std::max(compute, memory) + device.launch_overhead_s;
}

std::filesystem::path default_device_profile_path() {
  return util::cache_root() / "device_profile.json";
}

DeviceProfile load_device_profile(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read the device profile " + file.string());
  try {
    return from_json(nlohmann::json::parse(in));
  } catch (const std::exception& e) {
    throw std::runtime_error("device profile " + file.string() + ": " + e.what());
  }
}

DeviceProfile default_device_profile() {
  std::error_code ec;
  const auto file = default_device_profile_path();
  if (!std::filesystem::exists(file, ec)) return DeviceProfile{};
  try {
    return load_device_profile(file);
  } catch (const std::exception&) {
    return DeviceProfile{};
  }
}

nlohmann::json device_profile_to_json(const DeviceProfile& p) {
  return {{"name", p.name},
          {"hbm_bytes_per_s", p.hbm_bytes_per_s},
          {"bf16_flops", p.bf16_flops},
          {"tf32_flops", p.tf32_flops},
          {"fp32_flops", p.fp32_flops},
          {"launch_overhead_s", p.launch_overhead_s}};
}

DeviceProfile device_profile_from_json(const nlohmann::json& j) { return from_json(j); }

}  // namespace fact
