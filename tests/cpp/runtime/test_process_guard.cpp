#include <csignal>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "fact/runtime/process_guard.hpp"
#include "fact/runtime/run_report.hpp"
#include "runtime_test_support.hpp"

namespace fact::runtime {
namespace {

using test::ScratchDir;
using test::read_text;

const nlohmann::json kContext = {{"kernel", {{"lib", "/tmp/candidate.so"}}},
                                 {"problem", {{"text", "m=1,n=2,k=3"}}}};

// Death tests fork ("fast" style): the child writes into the parent's scratch folder.
class ProcessGuardTest : public ::testing::Test {
 protected:
  void SetUp() override { ::testing::FLAGS_gtest_death_test_style = "fast"; }
  ScratchDir dir;
};

TEST_F(ProcessGuardTest, AtomicWriteReplacesAndLeavesNoTemporary) {
  const auto path = dir / "report.json";
  write_file_atomically(path.string(), "first");
  write_file_atomically(path.string(), "second");
  EXPECT_EQ(read_text(path), "second");
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1);
  EXPECT_THROW(write_file_atomically((dir / "missing" / "r.json").string(), "x"), std::runtime_error);
}

TEST_F(ProcessGuardTest, TimeoutReportKeepsTheContext) {
  const nlohmann::json j = timeout_report(kContext, 2.5, "timing the kernel");
  EXPECT_EQ(j.at("schema"), kRunReportSchema);
  EXPECT_EQ(j.at("status"), "error");
  EXPECT_TRUE(j.at("timed_out").get<bool>());
  EXPECT_EQ(j.at("error"), "timed out after 2.5 s while timing the kernel");
  EXPECT_EQ(j.at("kernel").at("lib"), "/tmp/candidate.so");
}

TEST_F(ProcessGuardTest, WatchdogWritesTheReportAndExits) {
  const auto path = dir / "timeout.json";
  EXPECT_EXIT(
      {
        ProcessGuard guard(path.string(), 0.2, kContext);
        guard.set_phase("timing the kernel");
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::exit(0);
      },
      ::testing::ExitedWithCode(kExitTimeout), "timed out after 0.2 s while timing the kernel");
  const nlohmann::json j = nlohmann::json::parse(read_text(path));
  EXPECT_EQ(j.at("status"), "error");
  EXPECT_TRUE(j.at("timed_out").get<bool>());
  EXPECT_EQ(j.at("problem").at("text"), "m=1,n=2,k=3");
}

TEST_F(ProcessGuardTest, FatalSignalLeavesACrashReport) {
  const auto path = dir / "crash.json";
  EXPECT_EXIT(
      {
        ProcessGuard guard(path.string(), 0, kContext);
        guard.set_phase("verifying the kernel");
        *static_cast<volatile int*>(nullptr) = 1;
      },
      ::testing::KilledBySignal(SIGSEGV), "crashed with signal 11 while verifying the kernel");
  const nlohmann::json j = nlohmann::json::parse(read_text(path));
  EXPECT_EQ(j.at("schema"), kRunReportSchema);
  EXPECT_EQ(j.at("status"), "error");
  EXPECT_TRUE(j.at("crashed").get<bool>());
  EXPECT_EQ(j.at("error"), "crashed with signal 11 while verifying the kernel");
  EXPECT_EQ(j.at("kernel").at("lib"), "/tmp/candidate.so");
}

TEST_F(ProcessGuardTest, AbortIsReportedToo) {
  const auto path = dir / "abort.json";
  EXPECT_EXIT(
      {
        ProcessGuard guard(path.string(), 0, kContext);
        std::abort();
      },
      ::testing::KilledBySignal(SIGABRT), "crashed with signal 6");
  const nlohmann::json j = nlohmann::json::parse(read_text(path));
  EXPECT_EQ(j.at("error"), "crashed with signal 6 while starting");
}

TEST_F(ProcessGuardTest, FinishWritesTheReportAndDisarms) {
  const auto path = dir / "done.json";
  {
    ProcessGuard guard(path.string(), 0.3, kContext);
    EXPECT_TRUE(guard.finish({{"status", "ok"}}));
    EXPECT_FALSE(guard.finish({{"status", "error"}}));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // past the deadline
  }
  EXPECT_EQ(nlohmann::json::parse(read_text(path)).at("status"), "ok");
}

TEST_F(ProcessGuardTest, OnlyOneGuardAtATime) {
  ProcessGuard first("", 0, kContext);
  EXPECT_THROW(ProcessGuard("", 0, kContext), std::logic_error);
}

}  // namespace
}  // namespace fact::runtime
