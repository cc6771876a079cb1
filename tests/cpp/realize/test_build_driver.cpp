// Build driver + kernel cache: hits and misses, corrupt entries, failed builds, ptxas
// performance warnings, concurrent builders. The "compiler" is a shell one-liner, so these run
// anywhere; test_build_nvcc.cpp compiles a real .cu through the same path.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "build_test_support.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/util/sha256.hpp"

namespace fact::realize {
namespace {

using test::count_lines;
using test::fake_compiler;
using test::ScratchDir;

BuildJob make_job(const std::string& key, std::vector<std::string> command, std::string source = "") {
  BuildJob job;
  job.key = key;
  job.source = source.empty() ? "// kernel " + key + "\n" : source;
  job.entry_symbol = "fact_" + key;
  job.spec = {{"pattern", "gemm"}, {"name", key}};
  job.command = std::move(command);
  job.label = "label_" + key;
  return job;
}

BuildOptions quiet_options(bool use_ninja) {
  BuildOptions options;
  options.jobs = 2;
  options.use_ninja = use_ninja;
  options.show_progress = false;
  options.compiler_identity = "fake compiler 1.0";
  return options;
}

// Every test runs through both job runners: the ninja job graph and the thread pool.
class BuildDriverTest : public ::testing::TestWithParam<bool> {
 protected:
  BuildOptions options() const { return quiet_options(GetParam()); }
  ScratchDir scratch;
  KernelCache cache{scratch / "cache"};
  std::filesystem::path counter = scratch / "compiles.txt";
};

TEST_P(BuildDriverTest, MissThenHit) {
  BuildDriver driver(cache, options());
  auto first = driver.build({make_job("k1", fake_compiler(counter)), make_job("k2", fake_compiler(counter))});
  ASSERT_EQ(first.size(), 2u);
  for (const auto& outcome : first) {
    EXPECT_EQ(outcome.status, BuildStatus::Built) << outcome.reason;
    EXPECT_TRUE(std::filesystem::exists(outcome.library));
  }
  EXPECT_EQ(first[1].label, "label_k2");
  EXPECT_EQ(count_lines(counter), 2);
  EXPECT_EQ(driver.last_runner(), GetParam() ? "ninja" : "threads");

  auto second = driver.build({make_job("k1", fake_compiler(counter)), make_job("k2", fake_compiler(counter))});
  for (const auto& outcome : second) EXPECT_EQ(outcome.status, BuildStatus::Cached);
  EXPECT_EQ(second[0].library, first[0].library);
  EXPECT_EQ(count_lines(counter), 2) << "a cache hit must not compile";
}

TEST_P(BuildDriverTest, EntryHoldsLibrarySourceLogAndMeta) {
  BuildDriver driver(cache, options());
  auto job = make_job("entry", fake_compiler(counter, "ptxas info : Used 128 registers"), "int kernel_text;\n");
  auto outcome = driver.build({job}).at(0);
  ASSERT_EQ(outcome.status, BuildStatus::Built) << outcome.reason;
  auto dir = cache.entry_dir("entry");
  EXPECT_EQ(util::read_file(dir / "source.cu"), "int kernel_text;\n");
  EXPECT_EQ(util::read_file(dir / "lib.so"), "int kernel_text;\n");
  EXPECT_NE(util::read_file(dir / "build.log").find("Used 128 registers"), std::string::npos);
  auto meta = nlohmann::json::parse(util::read_file(dir / "meta.json"));
  EXPECT_EQ(meta["key"], "entry");
  EXPECT_EQ(meta["entry_symbol"], "fact_entry");
  EXPECT_EQ(meta["command"], job.command);
  EXPECT_EQ(meta["compiler"], "fake compiler 1.0");
  EXPECT_EQ(meta["spec"]["name"], "entry");
  EXPECT_EQ(meta["lib_sha256"], util::sha256_file_hex(dir / "lib.so"));
  EXPECT_TRUE(meta["compile_seconds"].is_number());
  EXPECT_FALSE(std::filesystem::exists(dir / "exit_status"));
  // Nothing is left behind in staging.
  for (const auto& item : std::filesystem::directory_iterator(cache.root() / ".staging")) {
    ADD_FAILURE() << "left in staging: " << item.path();
  }
}

TEST_P(BuildDriverTest, DuplicateKeysBuildOnce) {
  BuildDriver driver(cache, options());
  auto outcomes = driver.build({make_job("same", fake_compiler(counter)), make_job("same", fake_compiler(counter))});
  EXPECT_EQ(outcomes[0].status, BuildStatus::Built);
  EXPECT_EQ(outcomes[1].status, BuildStatus::Built);
  EXPECT_EQ(count_lines(counter), 1);
}

TEST_P(BuildDriverTest, CorruptLibraryIsDetectedAndRebuilt) {
  BuildDriver driver(cache, options());
  auto job = make_job("corrupt", fake_compiler(counter));
  ASSERT_EQ(driver.build({job})[0].status, BuildStatus::Built);
  {
    std::ofstream damage(cache.entry_dir("corrupt") / "lib.so", std::ios::app);
    damage << "flipped bits";
  }
  auto found = cache.lookup("corrupt");
  EXPECT_EQ(found.state, EntryState::Corrupt);
  EXPECT_FALSE(found.problem.empty());

  auto rebuilt = driver.build({job})[0];
  EXPECT_EQ(rebuilt.status, BuildStatus::Built);
  EXPECT_EQ(count_lines(counter), 2);
  EXPECT_EQ(cache.lookup("corrupt").state, EntryState::Built);
}

TEST_P(BuildDriverTest, MissingFilesAreCorruptAndRebuilt) {
  BuildDriver driver(cache, options());
  auto job = make_job("partial", fake_compiler(counter));
  driver.build({job});
  std::filesystem::remove(cache.entry_dir("partial") / "meta.json");
  EXPECT_EQ(cache.lookup("partial").state, EntryState::Corrupt);
  EXPECT_EQ(driver.build({job})[0].status, BuildStatus::Built);

  std::filesystem::remove(cache.entry_dir("partial") / "lib.so");
  EXPECT_EQ(cache.lookup("partial").state, EntryState::Corrupt);
  EXPECT_EQ(driver.build({job})[0].status, BuildStatus::Built);
  EXPECT_EQ(count_lines(counter), 3);
}

TEST_P(BuildDriverTest, FailedBuildIsRecordedAndNotRetried) {
  BuildDriver driver(cache, options());
  auto job = make_job("broken", fake_compiler(counter, "source.cu(12): error: identifier \"Foo\" is undefined", 2));
  auto outcome = driver.build({job})[0];
  EXPECT_EQ(outcome.status, BuildStatus::Failed);
  EXPECT_NE(outcome.reason.find("exit 2"), std::string::npos) << outcome.reason;
  EXPECT_NE(outcome.reason.find("identifier \"Foo\" is undefined"), std::string::npos) << outcome.reason;

  auto found = cache.lookup("broken");
  ASSERT_EQ(found.state, EntryState::Failed);
  EXPECT_EQ(found.failure->command, job.command);
  EXPECT_EQ(found.failure->exit_code, 2);
  EXPECT_NE(found.failure->log.find("is undefined"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(cache.entry_dir("broken") / "source.cu"));
  EXPECT_FALSE(std::filesystem::exists(cache.entry_dir("broken") / "lib.so"));

  auto again = driver.build({job})[0];
  EXPECT_EQ(again.status, BuildStatus::SkippedFailed);
  EXPECT_NE(again.reason.find("retry-failed"), std::string::npos);
  EXPECT_EQ(count_lines(counter), 1) << "a recorded failure must not be rebuilt blindly";
}

TEST_P(BuildDriverTest, RetryFailedRebuilds) {
  auto job = make_job("flaky", fake_compiler(counter, "error: out of memory", 1));
  BuildDriver(cache, options()).build({job});
  BuildOptions retry = options();
  retry.retry_failed = true;
  job.command = fake_compiler(counter, "error: out of memory", 1);
  EXPECT_EQ(BuildDriver(cache, retry).build({job})[0].status, BuildStatus::Failed);
  EXPECT_EQ(count_lines(counter), 2);
}

TEST_P(BuildDriverTest, FailureUnderOtherCommandOrCompilerIsRetried) {
  auto job = make_job("changed", fake_compiler(counter, "error: bad flag", 1));
  BuildDriver(cache, options()).build({job});

  auto fixed = job;
  fixed.command = fake_compiler(counter);  // a different command line
  EXPECT_EQ(BuildDriver(cache, options()).build({fixed})[0].status, BuildStatus::Built);
  EXPECT_EQ(count_lines(counter), 2);

  auto job2 = make_job("new_compiler", fake_compiler(counter, "error: internal", 1));
  BuildDriver(cache, options()).build({job2});
  BuildOptions upgraded = options();
  upgraded.compiler_identity = "fake compiler 2.0";
  EXPECT_EQ(BuildDriver(cache, upgraded).build({job2})[0].status, BuildStatus::Failed);
  EXPECT_EQ(count_lines(counter), 4) << "a new compiler deserves a new attempt";
}

TEST_P(BuildDriverTest, PtxasSerializationWarningIsAFailure) {
  BuildDriver driver(cache, options());
  auto job = make_job(
      "serialized",
      fake_compiler(counter,
                    "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are "
                    "serialized due to the presence of Extern calls"));
  auto outcome = driver.build({job})[0];
  EXPECT_EQ(outcome.status, BuildStatus::Failed);
  EXPECT_NE(outcome.reason.find("C7510"), std::string::npos) << outcome.reason;
  EXPECT_EQ(cache.lookup("serialized").state, EntryState::Failed);
}

TEST_P(BuildDriverTest, MixedBatchKeepsOrderAndStatuses) {
  BuildDriver driver(cache, options());
  driver.build({make_job("warm", fake_compiler(counter))});
  auto outcomes = driver.build({make_job("cold", fake_compiler(counter)),
                                make_job("bad", fake_compiler(counter, "error: nope", 3)),
                                make_job("warm", fake_compiler(counter))});
  EXPECT_EQ(outcomes[0].status, BuildStatus::Built);
  EXPECT_EQ(outcomes[1].status, BuildStatus::Failed);
  EXPECT_EQ(outcomes[2].status, BuildStatus::Cached);
  EXPECT_FALSE(outcomes[1].usable());
  EXPECT_TRUE(outcomes[2].usable());
}

TEST_P(BuildDriverTest, ConcurrentThreadsBuildASharedKeyOnce) {
  auto job = make_job("shared", fake_compiler(counter, "", 0, 0.5));
  std::vector<BuildOutcome> a, b;
  std::thread first([&] { a = BuildDriver(cache, options()).build({job}); });
  std::thread second([&] { b = BuildDriver(cache, options()).build({job}); });
  first.join();
  second.join();
  EXPECT_TRUE(a[0].usable()) << a[0].reason;
  EXPECT_TRUE(b[0].usable()) << b[0].reason;
  EXPECT_EQ(count_lines(counter), 1) << "the second builder must wait for the first and reuse its entry";
  EXPECT_EQ(cache.lookup("shared").state, EntryState::Built);
}

TEST_P(BuildDriverTest, ConcurrentProcessesBuildASharedKeyOnce) {
  auto job = make_job("process_shared", fake_compiler(counter, "", 0, 0.5));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto outcome = BuildDriver(cache, options()).build({job})[0];
    ::_exit(outcome.usable() ? 0 : 1);
  }
  auto outcome = BuildDriver(cache, options()).build({job})[0];
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(outcome.usable()) << outcome.reason;
  EXPECT_EQ(count_lines(counter), 1);
}

INSTANTIATE_TEST_SUITE_P(Runners, BuildDriverTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "ninja" : "threads"; });

TEST(BuildFailureReason, Classifies) {
  EXPECT_FALSE(build_failure_reason(0, true, "ptxas info : Used 90 registers\n").has_value());
  EXPECT_NE(build_failure_reason(1, false, "x.cu(3): error: expected a ;\n")->find("expected a ;"), std::string::npos);
  EXPECT_TRUE(build_failure_reason(0, true, "ptxas warning : (C7510) something").has_value());
  EXPECT_TRUE(build_failure_reason(0, true, "ptxas info : potential performance loss: foo").has_value());
  EXPECT_EQ(*build_failure_reason(0, false, ""), "compiler exited 0 but wrote no library");
}

TEST(BuildCommand, PlaceholdersAreExpanded) {
  auto expanded = expand_command({"nvcc", "{source}", "-o", "{output}", "-DX={output}.y"}, "/s/source.cu", "/s/lib.so");
  EXPECT_EQ(expanded, (std::vector<std::string>{"nvcc", "/s/source.cu", "-o", "/s/lib.so", "-DX=/s/lib.so.y"}));
  EXPECT_EQ(ninja_escape_path("/a b/c:d$e"), "/a$ b/c$:d$$e");
}

TEST(KernelCache, RejectsUnsafeKeys) {
  ScratchDir scratch;
  KernelCache cache(scratch / "cache");
  EXPECT_THROW(cache.entry_dir("../escape"), std::invalid_argument);
  EXPECT_THROW(cache.entry_dir(".hidden"), std::invalid_argument);
  EXPECT_THROW(cache.entry_dir(""), std::invalid_argument);
  EXPECT_NO_THROW(cache.entry_dir("gemm_bf16-abc123.v1"));
  EXPECT_EQ(cache.lookup("absent").state, EntryState::Missing);
}

TEST(KernelCache, DefaultLocationFollowsEnvironment) {
  const char* saved = std::getenv("FACT_CACHE_DIR");
  std::string saved_value = saved ? saved : "";
  ::setenv("FACT_CACHE_DIR", "/tmp/fact-cache-env-test", 1);
  EXPECT_EQ(default_kernel_cache_dir(), std::filesystem::path("/tmp/fact-cache-env-test/kernels"));
  if (saved) ::setenv("FACT_CACHE_DIR", saved_value.c_str(), 1);
  else ::unsetenv("FACT_CACHE_DIR");
}

}  // namespace
}  // namespace fact::realize
