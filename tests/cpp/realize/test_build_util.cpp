// The utilities the build driver and tuner stand on: child processes with time limits, shell
// quoting, file locks, atomic writes (the progress line: test_progress.cpp).
#include <atomic>
#include <csignal>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "build_test_support.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/file_lock.hpp"
#include "fact/util/sha256.hpp"
#include "fact/util/subprocess.hpp"

namespace fact::util {
namespace {

using test::ScratchDir;

TEST(Subprocess, ExitCodeAndOutputFile) {
  ScratchDir scratch;
  ProcessOptions options;
  options.output_file = scratch / "out.txt";
  options.working_directory = scratch.path();
  auto result = run_process({"sh", "-c", "echo to-stdout; echo to-stderr >&2; pwd; exit 3"}, options);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_FALSE(result.succeeded());
  std::string text = read_file(scratch / "out.txt");
  EXPECT_NE(text.find("to-stdout"), std::string::npos);
  EXPECT_NE(text.find("to-stderr"), std::string::npos);
  EXPECT_NE(text.find(scratch.path().filename().string()), std::string::npos);
}

TEST(Subprocess, TimeoutKillsTheWholeGroup) {
  ScratchDir scratch;
  ProcessOptions options;
  options.timeout = std::chrono::milliseconds(300);
  // The grandchild would touch the marker after 2 s if it survived the kill.
  auto marker = scratch / "survived";
  auto result = run_process({"sh", "-c", "(sleep 2; touch '" + marker.string() + "') & sleep 30"}, options);
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.term_signal, SIGKILL);
  EXPECT_LT(result.seconds, 5.0);
  EXPECT_NE(result.describe().find("timed out"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Subprocess, SignalAndSpawnFailureAreReported) {
  auto crashed = run_process({"sh", "-c", "kill -SEGV $$"});
  EXPECT_EQ(crashed.term_signal, SIGSEGV);
  EXPECT_NE(crashed.describe().find("signal 11"), std::string::npos);
  auto missing = run_process({"/nonexistent/fact-no-such-program"});
  EXPECT_TRUE(missing.spawn_failed);
  EXPECT_FALSE(missing.succeeded());
}

TEST(Subprocess, ExtraEnvironmentAndCapture) {
  ProcessOptions options;
  auto text = capture_output({"sh", "-c", "echo hello"});
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, "hello\n");
  EXPECT_FALSE(capture_output({"sh", "-c", "exit 1"}).has_value());
  ScratchDir scratch;
  options.output_file = scratch / "env.txt";
  options.extra_environment = {{"FACT_TEST_VARIABLE", "forty two"}};
  run_process({"sh", "-c", "echo \"$FACT_TEST_VARIABLE\""}, options);
  EXPECT_EQ(read_file(scratch / "env.txt"), "forty two\n");
}

TEST(Subprocess, ShellQuotingRoundTrips) {
  std::vector<std::string> words = {"plain", "with space", "it's", "$HOME", "a\"b", "", "-DX=1;rm"};
  ScratchDir scratch;
  ProcessOptions options;
  options.output_file = scratch / "echo.txt";
  run_process({"sh", "-c", "printf '%s\\n' " + shell_join(words)}, options);
  std::string expected;
  for (const auto& w : words) expected += w + "\n";
  EXPECT_EQ(read_file(scratch / "echo.txt"), expected);
  EXPECT_TRUE(find_executable("sh").has_value());
  EXPECT_FALSE(find_executable("fact-surely-not-installed").has_value());
}

TEST(FileLock, ExclusiveLocksContendAcrossDescriptors) {
  ScratchDir scratch;
  auto path = scratch / "locks" / "a.lock";
  auto held = FileLock::acquire(path);
  EXPECT_TRUE(held.held());
  EXPECT_FALSE(FileLock::try_acquire(path).has_value());
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    auto lock = FileLock::acquire(path);
    acquired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(acquired.load()) << "the waiter must block while the lock is held";
  held.release();
  waiter.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_TRUE(FileLock::try_acquire(path).has_value());
}

TEST(FileLock, SharedLocksCoexist) {
  ScratchDir scratch;
  auto path = scratch / "s.lock";
  auto reader = FileLock::acquire(path, FileLock::Mode::Shared);
  EXPECT_TRUE(FileLock::try_acquire(path, FileLock::Mode::Shared).has_value());
  EXPECT_FALSE(FileLock::try_acquire(path, FileLock::Mode::Exclusive).has_value());
}

TEST(AtomicFile, ReadersNeverSeeATornFile) {
  ScratchDir scratch;
  auto path = scratch / "data.txt";
  std::string small(10, 'a'), large(1 << 20, 'b');
  write_file_atomically(path, small);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!stop) {
      std::string seen = read_file(path);
      if (seen != small && seen != large) ++torn;
    }
  });
  for (int i = 0; i < 40; ++i) write_file_atomically(path, i % 2 ? small : large);
  stop = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  for (const auto& item : std::filesystem::directory_iterator(scratch.path())) {
    EXPECT_EQ(item.path().filename(), "data.txt") << "temporary left behind";
  }
}

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  ScratchDir scratch;
  write_file_atomically(scratch / "abc", "abc");
  EXPECT_EQ(sha256_file_hex(scratch / "abc"), sha256_hex("abc"));
}

}  // namespace
}  // namespace fact::util
