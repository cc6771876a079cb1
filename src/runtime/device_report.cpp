#include "fact/runtime/device_report.hpp"

#include <fstream>
#include <iterator>
#include <regex>

namespace fact::runtime {

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string cublas_version_string(int version) {
  return std::to_string(version / 10000) + "." + std::to_string((version % 10000) / 100) + "." +
         std::to_string(version % 100);
}

std::string parse_nvidia_driver_release(std::string_view text) {
  static const std::regex release(R"(Kernel Module[^\n]*?\s(\d+\.\d+(\.\d+)?)(\s|$))");
  std::match_results<std::string_view::const_iterator> match;
  if (!std::regex_search(text.begin(), text.end(), match, release)) return "";
  return match[1].str();
}

std::string nvidia_driver_release() {
  std::ifstream in("/proc/driver/nvidia/version");
  if (!in) return "";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_nvidia_driver_release(text);
}

nlohmann::json to_json(const DeviceReport& r) {
  const DeviceProfile& p = r.profile;
  return {{"name", p.name},
          {"hbm_bytes_per_s", p.hbm_bytes_per_s},
          {"bf16_flops", p.bf16_flops},
          {"tf32_flops", p.tf32_flops},
          {"fp32_flops", p.fp32_flops},
          {"launch_overhead_s", p.launch_overhead_s},
          {"device_index", r.device_index},
          {"sm_count", r.sm_count},
          {"compute_capability", std::to_string(r.cc_major) + "." + std::to_string(r.cc_minor)},
          {"l2_bytes", r.l2_bytes},
          {"memory_bytes", r.memory_bytes},
          {"versions",
           {{"driver", r.driver_release.empty() ? cuda_version_string(r.driver_version)
                                                : r.driver_release},
            {"driver_cuda", cuda_version_string(r.driver_version)},
            {"cuda_runtime", cuda_version_string(r.runtime_version)},
            {"cublas", cublas_version_string(r.cublas_version)}}},
          {"measurements", r.measurements}};
}

}  // namespace fact::runtime
