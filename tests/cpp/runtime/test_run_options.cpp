#include <set>

#include <gtest/gtest.h>

#include "fact/runtime/device_report.hpp"
#include "fact/runtime/run_options.hpp"

namespace fact::runtime {
namespace {

TEST(RunOptions, BaselineList) {
  EXPECT_EQ(parse_baseline_list("cublas,cublaslt"), (std::vector<std::string>{"cublas", "cublaslt"}));
  EXPECT_EQ(parse_baseline_list(" cublaslt "), (std::vector<std::string>{"cublaslt"}));
  EXPECT_TRUE(parse_baseline_list("").empty());
  EXPECT_THROW(parse_baseline_list("cublas,cublas"), std::invalid_argument);
}

TEST(RunOptions, BaselinesAreCheckedAgainstTheKinds) {
  const std::vector<std::string> registered = {"cublas", "cublaslt"};
  EXPECT_NO_THROW(check_baselines({"cublaslt"}, registered, "gemm"));
  EXPECT_NO_THROW(check_baselines({}, {}, "attention"));
  try {
    check_baselines({"cublas", "torch"}, registered, "gemm");
    ADD_FAILURE() << "torch accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'torch' for kind 'gemm' (expected cublas, cublaslt)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_baselines({"cublas"}, {}, "attention"), std::invalid_argument);
}

TEST(RunOptions, Validate) {
  RunKernelOptions o;
  o.problem = "m=1,n=1,k=1";
  EXPECT_THROW(validate(o), std::invalid_argument);  // no library
  o.lib = "k.so";
  EXPECT_NO_THROW(validate(o));
  o.baseline_only = true;
  EXPECT_THROW(validate(o), std::invalid_argument);  // library with baseline-only
  o.lib.clear();
  EXPECT_NO_THROW(validate(o));  // no names: every baseline of the kind
  o.baselines = {"cublas"};
  EXPECT_NO_THROW(validate(o));
  o.problem.clear();
  EXPECT_THROW(validate(o), std::invalid_argument);
  o.problem = "m=1,n=1,k=1";
  o.timing.min_runs = 10;
  o.timing.max_runs = 5;
  EXPECT_THROW(validate(o), std::invalid_argument);
}

TEST(RunOptions, CheckSeedsAreDistinctAndReproducible) {
  std::set<uint64_t> seeds;
  for (uint64_t base : {uint64_t{1}, uint64_t{2}, uint64_t{12345}}) {
    for (int i = 0; i < 5; ++i) seeds.insert(check_seed(base, i));
  }
  EXPECT_EQ(seeds.size(), 15u);
  EXPECT_EQ(check_seed(99, 3), check_seed(99, 3));
}

TEST(DeviceReport, VersionStrings) {
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12080), "12.8");
  EXPECT_EQ(cublas_version_string(130100), "13.1.0");
}

TEST(DeviceReport, DriverReleaseFromProcText) {
  EXPECT_EQ(parse_nvidia_driver_release(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  9 2025\n"
                "GCC version:  gcc version 12.2.0\n"),
            "580.159.04");
  EXPECT_EQ(parse_nvidia_driver_release("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                        "570.86.15  Release Build\n"),
            "570.86.15");  // open kernel module: "x86_64" is not the version
  EXPECT_EQ(parse_nvidia_driver_release("nothing here"), "");
}

TEST(DeviceReport, JsonIsReadableAsADeviceProfile) {
  DeviceReport r;
  r.profile.name = "NVIDIA H100 80GB HBM3";
  r.profile.hbm_bytes_per_s = 3.0e12;
  r.profile.bf16_flops = 7.9e14;
  r.profile.tf32_flops = 4.1e14;
  r.profile.fp32_flops = 5.1e13;
  r.profile.launch_overhead_s = 2.5e-6;
  r.sm_count = 132;
  r.cc_major = 9;
  r.l2_bytes = 50 << 20;
  r.driver_version = 13000;
  r.runtime_version = 13000;
  r.cublas_version = 130100;
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j.at("sm_count"), 132);
  EXPECT_EQ(j.at("compute_capability"), "9.0");
  EXPECT_EQ(j.at("versions").at("cublas"), "13.1.0");
  const DeviceProfile p = device_profile_from_json(j);
  EXPECT_EQ(p.name, r.profile.name);
  EXPECT_EQ(p.hbm_bytes_per_s, r.profile.hbm_bytes_per_s);
  EXPECT_EQ(p.bf16_flops, r.profile.bf16_flops);
  EXPECT_EQ(p.tf32_flops, r.profile.tf32_flops);
  EXPECT_EQ(p.fp32_flops, r.profile.fp32_flops);
  EXPECT_EQ(p.launch_overhead_s, r.profile.launch_overhead_s);
  // Absent keys keep the defaults; wrong types are errors.
  EXPECT_EQ(device_profile_from_json({{"name", "x"}}).bf16_flops, DeviceProfile{}.bf16_flops);
  EXPECT_THROW(device_profile_from_json({{"bf16_flops", "fast"}}), std::invalid_argument);
}

}  // namespace
}  // namespace fact::runtime
