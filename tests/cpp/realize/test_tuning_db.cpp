// Tuning database: round trip, exact and bucket lookups, concurrent updates, damaged files.
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include <gtest/gtest.h>

#include "build_test_support.hpp"
#include "fact/realize/tuning_db.hpp"

namespace fact::realize {
namespace {

using test::ScratchDir;

// The database keeps choices for keys of any kind; a GEMM-shaped key stands in for any.
TuningKey key_for(int64_t m, int64_t n, int64_t k, int64_t batch, const std::string& precision,
                  const std::string& cutlass, const std::string& problem_class = "bf16.bf16.bf16.f32|tnt|bias+gelu_tanh") {
  TuningKey key;
  key.kind = "gemm";
  key.pattern = "gemm";
  key.dims = {m, n, k, batch};
  key.problem_class = problem_class;
  key.cutlass_version = cutlass;
  key.precision = core::parse_precision(precision);
  return key;
}

TuningRecord record_for(const TuningKey& key, int tile_n, double ms) {
  const KernelSpec chosen("gemm", "gemm", "tile_n_" + std::to_string(tile_n), {{"tile_n", tile_n}});
  TuningRecord record;
  record.key = key;
  record.spec = chosen.to_json();
  record.config = "tile_n_" + std::to_string(tile_n);
  record.kernel_key = "key" + std::to_string(tile_n);
  record.ms = ms;
  record.tflops = 100.0;
  record.rel_err = 1e-3;
  record.device = "test device";
  record.candidates = 10;
  record.verified = 7;
  return record;
}

TEST(TuningKey, DescribesTheProblemClass) {
  TuningKey key = key_for(65536, 3072, 768, 1, "native", "4.2.0");
  EXPECT_EQ(key.arch, "sm_90a");
  EXPECT_EQ(key.id(), "gemm|65536x3072x768x1|bf16.bf16.bf16.f32|tnt|bias+gelu_tanh|sm_90a|cutlass4.2.0|native");
  EXPECT_EQ(TuningKey::from_json(key.to_json()), key);
}

TEST(TuningKey, BucketRoundsEachDimensionUpToAPowerOfTwo) {
  EXPECT_EQ(round_up_to_power_of_two(1), 1);
  EXPECT_EQ(round_up_to_power_of_two(3000), 4096);
  EXPECT_EQ(round_up_to_power_of_two(4096), 4096);
  EXPECT_EQ(round_up_to_power_of_two(4097), 8192);
  TuningKey a = key_for(3000, 4096, 700, 3, "native", "4.2.0", "none");
  TuningKey b = key_for(4096, 2049, 1024, 4, "native", "4.2.0", "none");
  EXPECT_EQ(a.bucket_id(), b.bucket_id());
  EXPECT_NE(a.id(), b.id());
  TuningKey other_precision = a;
  other_precision.precision = core::PrecisionMode::Strict;
  EXPECT_NE(a.bucket_id(), other_precision.bucket_id());
}

TEST(TuningDb, RoundTripAndReplace) {
  ScratchDir scratch;
  TuningDb db(scratch / "db" / "tuning_db.json");
  TuningKey key = key_for(4096, 4096, 4096, 1, "native", "4.2.0");
  EXPECT_FALSE(db.find_exact(key).has_value());
  db.store(record_for(key, 256, 0.2));
  auto found = db.find_exact(key);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->config, "tile_n_256");
  EXPECT_DOUBLE_EQ(found->ms, 0.2);
  EXPECT_EQ(found->verified, 7);
  EXPECT_FALSE(found->date.empty());
  EXPECT_EQ(KernelSpec::from_json(found->spec).params().at("tile_n"), 256);

  db.store(record_for(key, 128, 0.15));
  EXPECT_EQ(db.find_exact(key)->config, "tile_n_128");
  EXPECT_EQ(db.all().size(), 1u);
  // A second handle on the same file sees the update.
  EXPECT_EQ(TuningDb(db.file()).find_exact(key)->config, "tile_n_128");
  EXPECT_TRUE(db.erase(key));
  EXPECT_FALSE(db.erase(key));
  EXPECT_FALSE(db.find_exact(key).has_value());
}

TEST(TuningDb, BucketLookupPicksTheNearestShape) {
  ScratchDir scratch;
  TuningDb db(scratch / "tuning_db.json");
  db.store(record_for(key_for(2100, 4096, 4096, 1, "native", "4.2.0"), 64, 1.0));
  db.store(record_for(key_for(4000, 4096, 4096, 1, "native", "4.2.0"), 128, 1.0));
  db.store(record_for(key_for(1024, 4096, 4096, 1, "native", "4.2.0"), 32, 1.0));  // other bucket

  TuningKey unseen = key_for(3500, 4096, 4096, 1, "native", "4.2.0");
  EXPECT_FALSE(db.find_exact(unseen).has_value());
  auto near = db.find_in_bucket(unseen);
  ASSERT_TRUE(near.has_value());
  EXPECT_EQ(near->config, "tile_n_128");
  EXPECT_EQ(near->key.dims[0], 4000);

  TuningKey small = key_for(2049, 4096, 4096, 1, "native", "4.2.0");
  EXPECT_EQ(db.find_in_bucket(small)->config, "tile_n_64");

  TuningKey elsewhere = key_for(3500, 4096, 4096, 1, "native", "4.3.0");
  EXPECT_FALSE(db.find_in_bucket(elsewhere).has_value()) << "another CUTLASS version is another key";
}

TEST(TuningDb, ConcurrentWritersKeepEveryEntry) {
  ScratchDir scratch;
  auto file = scratch / "tuning_db.json";
  constexpr int kThreads = 4, kPerThread = 10, kProcesses = 2;
  auto write_entries = [&](int writer) {
    TuningDb db(file);
    for (int i = 0; i < kPerThread; ++i) {
      db.store(record_for(key_for(64 * (writer * kPerThread + i + 1), 64, 64, 1, "native", "4.2.0", "none"),
                          128, 1.0));
    }
  };
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      write_entries(kThreads + p);
      ::_exit(0);
    }
    children.push_back(child);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(write_entries, t);
  for (auto& thread : threads) thread.join();
  for (pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(TuningDb(file).all().size(), size_t((kThreads + kProcesses) * kPerThread));
}

TEST(TuningDb, MalformedFileIsMovedAsideNotFatal) {
  ScratchDir scratch;
  auto file = scratch / "tuning_db.json";
  util::write_file_atomically(file, "{ this is not json");
  TuningDb db(file);
  TuningKey key = key_for(128, 128, 128, 1, "native", "4.2.0", "none");
  EXPECT_FALSE(db.find_exact(key).has_value());
  EXPECT_TRUE(db.all().empty());
  db.store(record_for(key, 128, 0.01));
  EXPECT_TRUE(db.find_exact(key).has_value());
  int aside = 0;
  for (const auto& item : std::filesystem::directory_iterator(scratch.path())) {
    aside += item.path().filename().string().find(".corrupt-") != std::string::npos;
  }
  EXPECT_EQ(aside, 1);
}

}  // namespace
}  // namespace fact::realize
