// `fact device`: measure the device profile (copy bandwidth, cuBLAS GEMM rates, launch
// overhead), save it where discovery reads it (default_device_profile_path) and optionally
// write a copy.
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "src/cli/commands.hpp"

#include "fact/problem/device_profile.hpp"

#ifdef FACT_HAVE_CUDA
#include "fact/runtime/device_probe.hpp"
#include "fact/runtime/process_guard.hpp"
#endif

namespace fact::cli {

namespace {

struct DeviceArgs {
  std::string json_path;
  int device = 0;
  int64_t gemm_size = 8192;
  bool no_save = false;
};

#ifdef FACT_HAVE_CUDA
void run(const DeviceArgs& args) {
  runtime::DeviceProbeOptions options;
  options.device = args.device;
  options.gemm_size = args.gemm_size;
  const runtime::DeviceReport report = runtime::measure_device(options);
  const nlohmann::json j = runtime::to_json(report);
  if (!args.json_path.empty()) runtime::write_file_atomically(args.json_path, j.dump(2) + "\n");
  if (!args.no_save) {
    std::filesystem::create_directories(default_device_profile_path().parent_path());
    runtime::write_file_atomically(default_device_profile_path().string(), j.dump(2) + "\n");
  }
  const auto& p = report.profile;
  std::cout << p.name << ": " << report.sm_count << " SMs, L2 " << (report.l2_bytes >> 20)
            << " MiB, copy " << p.hbm_bytes_per_s / 1e12 << " TB/s, bf16 " << p.bf16_flops / 1e12
            << " TFLOP/s, tf32 " << p.tf32_flops / 1e12 << " TFLOP/s, fp32 "
            << p.fp32_flops / 1e12 << " TFLOP/s, launch " << p.launch_overhead_s * 1e6 << " us"
            << (args.no_save ? "" : " (saved to " + default_device_profile_path().string() + ")") << "\n";
}
#else
void run(const DeviceArgs&) {
  throw std::runtime_error(
      "fact was built without CUDA (no CUDA toolkit at configure time): device cannot run");
}
#endif

}  // namespace

bool measure_and_save_device_profile() {
  try {
    run(DeviceArgs{});
    return true;
  } catch (const std::exception& e) {
    std::cout << "device profile not measured (" << e.what() << "); the defaults stay\n";
    return false;
  }
}

void add_device_command(CLI::App& app) {
  auto args = std::make_shared<DeviceArgs>();
  CLI::App* cmd = app.add_subcommand(
      "device", "Measure the device profile (bandwidth, GEMM rates, launch overhead)");
  cmd->add_option("--json", args->json_path, "Also write the profile here");
  cmd->add_flag("--no-save", args->no_save,
                "Do not save it as the profile discovery uses (" + default_device_profile_path().string() + ")");
  cmd->add_option("--device", args->device, "CUDA device index");
  cmd->add_option("--gemm-size", args->gemm_size, "M = N = K of the measured GEMMs");
  cmd->callback([args] { run(*args); });
}

}  // namespace fact::cli
