// Why no GPU is usable, in words that are true on the machine: a machine without an NVIDIA
// driver is not told that its driver "is insufficient" (the CUDA runtime's word for both).
#include <gtest/gtest.h>

#include <string>

#include "fact/engine/engine.hpp"

namespace fact::engine {
namespace {

TEST(GpuUnavailableReason, NoDriverIsNotAnInsufficientDriver) {
  const std::string none = insufficient_driver_reason(false, 0, 13000);
  EXPECT_EQ(none, "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)");
  const std::string old = insufficient_driver_reason(true, 12040, 13000);
  EXPECT_EQ(old, "the NVIDIA driver on this machine supports CUDA 12.4, older than this engine's CUDA runtime 13.0 "
                 "(update the driver)");
  EXPECT_NE(insufficient_driver_reason(true, 0, 13000).find("does not work"), std::string::npos);
}

TEST(GpuUnavailableReason, OnThisMachine) {
  const std::optional<std::string> reason = gpu_unavailable_reason();
  if (!reason) GTEST_SKIP() << "a Hopper GPU is usable here";
  EXPECT_EQ(reason->find("insufficient"), std::string::npos) << *reason;
  if (!cuda_driver_loads()) {
    EXPECT_TRUE(reason->find("no NVIDIA driver") != std::string::npos ||
                reason->find("built without the CUDA runtime") != std::string::npos)
        << *reason;
  }
}

}  // namespace
}  // namespace fact::engine
