// The GEMM parameter space: sizes, validity of candidates, and the reasons configurations are
// pruned for.
#include <set>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "patterns/gemm/realize/space.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

GemmSpec bf16_class() {
  GemmSpec s;
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                {Kind::Activation, Activation::GeluTanh, DType::Unknown}};
  return s;
}

GemmSpec tf32_class() {
  GemmSpec s;
  s.a_dtype = s.b_dtype = s.d_dtype = DType::Float32;
  s.align_a = s.align_b = s.align_d = 4;
  s.math = MathMode::Tf32;
  s.batched = true;
  return s;
}

// A plain bf16 GEMM whose D rows are unaligned (N odd: align_d 1).
GemmSpec plain_direct_store_class() {
  GemmSpec s;
  s.align_d = 1;
  return s;
}

GemmSpec with(GemmSpec s, int tm, int tn, int tk, MainloopSchedule mainloop) {
  s.tile = {tm, tn, tk};
  s.mainloop = mainloop;
  return s;
}

std::string reason_of(const GemmSpec& s, SpaceOptions options = {}) {
  auto reason = gemm_prune_reason(s, options);
  return reason ? *reason : std::string();
}

TEST(GemmSpace, DefaultIsCuratedAndValid) {
  for (const GemmSpec& problem_class : {bf16_class(), tf32_class()}) {
    const GemmSpace space = gemm_space(problem_class);
    EXPECT_GE(space.candidates.size(), 20u) << problem_class.name();
    EXPECT_LE(space.candidates.size(), 60u) << problem_class.name();
    std::set<std::string> names;
    for (const auto& s : space.candidates) {
      EXPECT_FALSE(gemm_spec_error(s).has_value()) << s.name() << ": " << *gemm_spec_error(s);
      EXPECT_TRUE(names.insert(s.name()).second) << "duplicate " << s.name();
      EXPECT_EQ(s.epilogue, problem_class.epilogue);
      EXPECT_EQ(s.a_dtype, problem_class.a_dtype);
      EXPECT_EQ(s.tile.k * graph::dtype_bytes(s.a_dtype) % 128, 0) << s.name();
    }
    for (const auto& p : space.pruned) EXPECT_FALSE(p.reason.empty()) << p.spec.name();
  }
}

TEST(GemmSpace, Tf32UsesThirtyTwoWideKSteps) {
  const GemmSpace space = gemm_space(tf32_class());
  ASSERT_FALSE(space.candidates.empty());
  EXPECT_EQ(space.candidates.front().tile.k, 32);
}

TEST(GemmSpace, ExhaustiveRecordsWhyEachConfigurationWasPruned) {
  SpaceOptions options;
  options.exhaustive = true;
  options.max_candidates = 100000;
  const GemmSpace space = gemm_space(bf16_class(), options);
  EXPECT_GT(space.candidates.size(), 60u);
  EXPECT_GT(space.pruned.size(), space.candidates.size());
  std::set<std::string> kinds;
  for (const auto& p : space.pruned) {
    EXPECT_EQ(gemm_prune_reason(p.spec, options), p.reason) << p.spec.name();
    kinds.insert(p.reason.substr(0, p.reason.find(' ')));
  }
  EXPECT_GE(kinds.size(), 4u);
  for (const auto& s : space.candidates) {
    EXPECT_FALSE(gemm_prune_reason(s, options).has_value()) << s.name();
  }
}

TEST(GemmSpace, CapKeepsTheFirstCandidates) {
  SpaceOptions options;
  options.max_candidates = 5;
  const GemmSpace space = gemm_space(bf16_class(), options);
  EXPECT_EQ(space.candidates.size(), 5u);
  size_t capped = 0;
  for (const auto& p : space.pruned) capped += p.reason.find("cap") != std::string::npos;
  EXPECT_GT(capped, 10u);
}

TEST(GemmPruning, CooperativeNeedsTileMOf128) {
  EXPECT_NE(reason_of(with(bf16_class(), 64, 128, 64, MainloopSchedule::Cooperative))
                .find("cooperative"),
            std::string::npos);
  EXPECT_EQ(reason_of(with(bf16_class(), 128, 128, 64, MainloopSchedule::Cooperative)), "");
}

TEST(GemmPruning, PingpongTakesTileM64Or128) {
  EXPECT_NE(reason_of(with(bf16_class(), 256, 64, 64, MainloopSchedule::Pingpong)).find("64 or 128"),
            std::string::npos);
  EXPECT_EQ(reason_of(with(bf16_class(), 64, 256, 64, MainloopSchedule::Pingpong)), "");
}

TEST(GemmPruning, StreamKAndSplitKNeedTheCooperativeKernel) {
  GemmSpec s = with(bf16_class(), 128, 128, 64, MainloopSchedule::Pingpong);
  s.scheduler = TileScheduler::StreamK;
  EXPECT_NE(reason_of(s).find("stream-K"), std::string::npos);
  s.mainloop = MainloopSchedule::Cooperative;
  EXPECT_EQ(reason_of(s), "");
  s.scheduler = TileScheduler::Persistent;
  s.split_k = 2;
  EXPECT_NE(reason_of(s).find("split-K"), std::string::npos);
}

TEST(GemmPruning, SharedMemoryDecidesTheStageCount) {
  // 256x256x128 bf16: 128 KiB per stage, one stage fits.
  const GemmSpec huge = with(bf16_class(), 256, 256, 128, MainloopSchedule::Cooperative);
  const SharedMemoryPlan plan = plan_shared_memory(huge);
  EXPECT_EQ(plan.stage_bytes, 256 * 128 * 2 * 2 + 16);
  EXPECT_LT(plan.stages, 2);
  EXPECT_NE(reason_of(huge).find("stage"), std::string::npos);
  // 128x256x128: 96 KiB stages, two fit: valid, but below the default minimum of three.
  const GemmSpec deep = with(bf16_class(), 128, 256, 128, MainloopSchedule::Cooperative);
  EXPECT_EQ(plan_shared_memory(deep).stages, 2);
  EXPECT_FALSE(gemm_spec_error(deep).has_value());
  EXPECT_NE(reason_of(deep).find("want >= 3"), std::string::npos);
  SpaceOptions two_stages;
  two_stages.min_stages = 2;
  EXPECT_EQ(reason_of(deep, two_stages), "");
  // 128x128x64: 32 KiB stages, six fit next to the epilogue.
  EXPECT_EQ(plan_shared_memory(with(bf16_class(), 128, 128, 64, MainloopSchedule::Cooperative)).stages, 6);
  // Explicit stage counts beyond capacity are errors.
  GemmSpec explicit_stages = with(bf16_class(), 128, 256, 64, MainloopSchedule::Cooperative);
  explicit_stages.stages = 6;
  EXPECT_NE(reason_of(explicit_stages).find("shared memory"), std::string::npos);
}

TEST(GemmPruning, EpilogueReadingCTakesSharedMemory) {
  GemmSpec plain = with(bf16_class(), 128, 256, 64, MainloopSchedule::Cooperative);
  plain.epilogue.clear();
  GemmSpec residual = plain;
  residual.epilogue = {{Kind::Residual, Activation::Identity, DType::BFloat16}};
  EXPECT_GT(plan_shared_memory(residual).epilogue_bytes, plan_shared_memory(plain).epilogue_bytes);
  // Only the first M×N operand is staged (CUTLASS's C); the others load into registers.
  GemmSpec two_operands = residual;
  two_operands.epilogue.push_back({Kind::Multiply, Activation::Identity, DType::BFloat16});
  EXPECT_EQ(plan_shared_memory(two_operands).epilogue_bytes, plan_shared_memory(residual).epilogue_bytes);
  // Every bias broadcasts a row of the tile from shared memory.
  GemmSpec one_bias = plain, two_biases = plain;
  one_bias.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16}};
  two_biases.epilogue = {one_bias.epilogue[0], {Kind::Scale, Activation::Identity, DType::Unknown},
                         one_bias.epilogue[0]};
  EXPECT_EQ(plan_shared_memory(two_biases).epilogue_bytes - plan_shared_memory(one_bias).epilogue_bytes,
            256 * 2);
}

// ABI v2 carries the epilogue as data: any order and number of steps up to FACT_GEMM_MAX_STEPS
// is a valid spec (scales after other steps, several biases, activations, operands).
TEST(GemmPruning, AnyChainUpToEightSteps) {
  GemmSpec s = with(bf16_class(), 128, 128, 64, MainloopSchedule::Pingpong);
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                {Kind::Scale, Activation::Identity, DType::Unknown},
                {Kind::Activation, Activation::HardTanh, DType::Unknown},
                {Kind::Activation, Activation::GeluErf, DType::Unknown},
                {Kind::Residual, Activation::Identity, DType::BFloat16},
                {Kind::Multiply, Activation::Identity, DType::Float32},
                {Kind::AddScalar, Activation::Identity, DType::Unknown},
                {Kind::Bias, Activation::Identity, DType::Float32}};
  EXPECT_EQ(reason_of(s), "");
  s.epilogue.push_back({Kind::Activation, Activation::Tanh, DType::Unknown});
  EXPECT_NE(reason_of(s).find("at most 8"), std::string::npos) << reason_of(s);
  s.epilogue.pop_back();
  s.epilogue[2].activation = Activation::Identity;
  EXPECT_NE(reason_of(s).find("identity"), std::string::npos);
}

TEST(GemmPruning, AccumulatorRegisters) {
  const GemmSpec big = with(bf16_class(), 256, 256, 64, MainloopSchedule::Cooperative);
  EXPECT_EQ(accumulator_registers_per_thread(big), 256);
  EXPECT_NE(reason_of(big).find("accumulator registers"), std::string::npos);
  EXPECT_EQ(accumulator_registers_per_thread(with(bf16_class(), 128, 256, 64,
                                                  MainloopSchedule::Cooperative)),
            128);
  EXPECT_NE(reason_of(with(bf16_class(), 128, 256, 64, MainloopSchedule::Pingpong))
                .find("accumulator registers"),
            std::string::npos);
}

TEST(GemmPruning, AlignmentDtypeAndArch) {
  GemmSpec s = with(bf16_class(), 128, 128, 64, MainloopSchedule::Cooperative);
  s.align_b = 2;
  EXPECT_NE(reason_of(s).find("TMA"), std::string::npos);
  s = with(bf16_class(), 128, 128, 64, MainloopSchedule::Cooperative);
  s.a_dtype = s.b_dtype = DType::Float32;
  s.align_a = s.align_b = 4;
  EXPECT_NE(reason_of(s).find("tf32"), std::string::npos);
  s.math = MathMode::Tf32;
  s.d_dtype = DType::Float32;
  s.align_d = 4;
  s.tile.k = 32;
  s.epilogue.clear();
  EXPECT_EQ(reason_of(s), "");
  s.b_layout = Layout::RowMajor;
  EXPECT_NE(reason_of(s).find("K-major"), std::string::npos);
  s.math = MathMode::Simt;
  EXPECT_NE(reason_of(s).find("simt"), std::string::npos);
  s = with(bf16_class(), 128, 128, 64, MainloopSchedule::Multistage);
  EXPECT_NE(reason_of(s).find("multistage"), std::string::npos);
  s = with(bf16_class(), 128, 128, 64, MainloopSchedule::Cooperative);
  s.pattern = "attention";
  EXPECT_NE(reason_of(s).find("pattern"), std::string::npos);
}

// An unaligned D (align_d below 16 bytes) is the direct-store variant: the NoSmem schedule
// (FACT's direct-store collective), any chain computed per element, persistent scheduler; a TMA
// epilogue is refused for it, and the NoSmem schedule for an aligned D.
TEST(GemmPruning, UnalignedDRunsTheDirectStoreVariantOnly) {
  GemmSpec s = with(plain_direct_store_class(), 128, 256, 64, MainloopSchedule::Cooperative);
  EXPECT_TRUE(stores_d_directly(s));
  EXPECT_EQ(resolved_epilogue_schedule(s), EpilogueSchedule::NoSmem);
  EXPECT_EQ(reason_of(s), "");
  EXPECT_EQ(plan_shared_memory(s).epilogue_bytes, plan_shared_memory(with(GemmSpec{}, 128, 256, 64,
      MainloopSchedule::Cooperative)).epilogue_bytes - 2 * 128 * 32 * 2);  // no D staging
  GemmSpec pingpong = with(plain_direct_store_class(), 64, 128, 64, MainloopSchedule::Pingpong);
  EXPECT_EQ(reason_of(pingpong), "");
  GemmSpec tma = s;
  tma.epilogue_schedule = EpilogueSchedule::TmaCooperative;
  EXPECT_NE(reason_of(tma).find("NoSmem"), std::string::npos);
  GemmSpec steps = s;  // any chain runs per element
  steps.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                    {Kind::Activation, Activation::GeluTanh, DType::Unknown},
                    {Kind::Residual, Activation::Identity, DType::BFloat16}};
  EXPECT_EQ(reason_of(steps), "");
  EXPECT_EQ(resolved_epilogue_schedule(steps), EpilogueSchedule::NoSmem);
  GemmSpec stream_k = s;
  stream_k.scheduler = TileScheduler::StreamK;
  EXPECT_NE(reason_of(stream_k).find("persistent"), std::string::npos);
  GemmSpec aligned = with(GemmSpec{}, 128, 256, 64, MainloopSchedule::Cooperative);
  aligned.epilogue_schedule = EpilogueSchedule::NoSmem;
  EXPECT_NE(reason_of(aligned).find("aligned D"), std::string::npos);
  GemmSpec unaligned_a = s;
  unaligned_a.align_a = 1;  // A and B stay TMA-read
  EXPECT_NE(reason_of(unaligned_a).find("TMA"), std::string::npos);
  // The space of such a problem holds only configurations that run it.
  SpaceOptions sizes;
  sizes.m = 8192;
  sizes.n = 50257;
  sizes.k = 768;
  const GemmSpace space = gemm_space(plain_direct_store_class(), sizes);
  ASSERT_FALSE(space.candidates.empty());
  for (const GemmSpec& c : space.candidates) {
    EXPECT_EQ(resolved_epilogue_schedule(c), EpilogueSchedule::NoSmem) << c.name();
    EXPECT_EQ(c.scheduler, TileScheduler::Persistent) << c.name();
  }
}

TEST(GemmPruning, ProblemSizes) {
  SpaceOptions small;
  small.m = 64;
  small.n = 4096;
  small.k = 256;
  EXPECT_NE(reason_of(with(bf16_class(), 256, 128, 64, MainloopSchedule::Cooperative), small)
                .find("problem's M"),
            std::string::npos);
  EXPECT_EQ(reason_of(with(bf16_class(), 64, 128, 64, MainloopSchedule::Pingpong), small), "");
  GemmSpec split = with(bf16_class(), 128, 128, 64, MainloopSchedule::Cooperative);
  split.scheduler = TileScheduler::StreamK;
  split.split_k = 4;
  SpaceOptions shallow;
  shallow.k = 256;
  EXPECT_NE(reason_of(split, shallow).find("split"), std::string::npos);
  GemmSpec unordered_persistent = with(bf16_class(), 128, 128, 64, MainloopSchedule::Cooperative);
  unordered_persistent.ordered_reduction = false;
  EXPECT_NE(reason_of(unordered_persistent).find("unordered reduction needs the stream-K"), std::string::npos);
  GemmSpec cluster = with(bf16_class(), 64, 128, 64, MainloopSchedule::Pingpong);
  cluster.cluster = {2, 1, 1};
  EXPECT_NE(reason_of(cluster, small).find("cluster M"), std::string::npos);
}

SpaceOptions sized(int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
  SpaceOptions options;
  options.m = m;
  options.n = n;
  options.k = k;
  options.batch = batch;
  return options;
}

GemmSpec plain_bf16_class() { return GemmSpec{}; }

int64_t tiles_of(const GemmSpec& s, const SpaceOptions& o) {
  return ((o.m + s.tile.m - 1) / s.tile.m) * ((o.n + s.tile.n - 1) / s.tile.n) * o.batch;
}

TEST(GemmDeepK, SplitCountFillsTheSmsOnceAndKeepsSixteenKTilesPerSplit) {
  const GemmSpec bf16 = plain_bf16_class();
  const SpaceOptions large_k = sized(256, 256, 524288);
  EXPECT_EQ(deep_k_split_count(bf16, large_k, 128, 128), 32);  // 4 tiles, 132 / 4 = 33 -> 32
  EXPECT_EQ(deep_k_split_count(bf16, large_k, 128, 256), 64);  // 2 tiles, 66 -> 64 (cap 64)
  EXPECT_EQ(deep_k_split_count(bf16, large_k, 128, 64), 16);   // 8 tiles, 16
  SpaceOptions fewer_sms = large_k;
  fewer_sms.sm_count = 114;
  EXPECT_EQ(deep_k_split_count(bf16, fewer_sms, 128, 128), 16);  // 28 -> 16
  // K caps the split: 8192 / 64 = 128 K tiles, 16 per split -> 8.
  EXPECT_EQ(deep_k_split_count(bf16, sized(256, 256, 8192), 128, 128), 8);
  EXPECT_EQ(deep_k_split_count(bf16, sized(256, 256, 4096), 128, 128), 0);
  // TF32 K tiles are 32 elements: 4096 float K is as deep as 8192 bf16 K.
  EXPECT_EQ(deep_k_split_count(tf32_class(), sized(256, 256, 4096), 128, 128), 8);
  // The batch multiplies the output tiles.
  EXPECT_EQ(deep_k_split_count(bf16, sized(256, 256, 524288, 4), 128, 128), 8);
  EXPECT_EQ(deep_k_split_count(bf16, sized(256, 256, 524288, 8), 128, 128), 0);
  // Enough output tiles to fill the GPU: no split; unknown sizes: no split.
  EXPECT_EQ(deep_k_split_count(bf16, sized(4096, 4096, 524288), 128, 128), 0);
  EXPECT_EQ(deep_k_split_count(bf16, SpaceOptions{}, 128, 128), 0);
}

TEST(GemmDeepK, LargeKDefaultSpaceOpensWithProblemDerivedSplitK) {
  for (const GemmSpec& problem_class : {plain_bf16_class(), bf16_class(), tf32_class()}) {
    const SpaceOptions options = sized(256, 256, 524288);
    const GemmSpace space = gemm_space(problem_class, options);
    ASSERT_FALSE(space.candidates.empty());
    const GemmSpec& first = space.candidates.front();
    EXPECT_EQ(first.scheduler, TileScheduler::StreamK) << first.name();
    EXPECT_EQ(first.split_k, 32) << first.name();
    EXPECT_EQ(first.tile.m, 128);
    EXPECT_EQ(first.tile.n, 128);
    EXPECT_FALSE(first.ordered_reduction) << first.name();  // no serial chain of 32 partial sums
    EXPECT_NE(first.name().find("_unordered"), std::string::npos);
    bool ordered_split_128x128 = false;
    for (const GemmSpec& s : space.candidates) {
      ordered_split_128x128 |= s.split_k == 32 && s.tile.m == 128 && s.tile.n == 128 && s.ordered_reduction;
    }
    EXPECT_TRUE(ordered_split_128x128) << "the deterministic variant stays in the space";
    std::set<std::pair<int, int>> deep_tiles;
    bool stream_k_128x64 = false;
    for (const GemmSpec& s : space.candidates) {
      EXPECT_FALSE(gemm_spec_error(s).has_value()) << s.name();
      if (s.split_k >= 16) {
        deep_tiles.insert({s.tile.m, s.tile.n});
        EXPECT_LE(tiles_of(s, options) * s.split_k, options.sm_count) << s.name();
        EXPECT_GE(options.k / s.split_k, kMinKTilesPerSplit * s.tile.k) << s.name();
      }
      if (s.scheduler == TileScheduler::StreamK && s.split_k == 1 && s.tile.m == 128 &&
          s.tile.n == 64) {
        stream_k_128x64 = true;
      }
    }
    EXPECT_EQ(deep_tiles, (std::set<std::pair<int, int>>{{128, 128}, {128, 256}, {128, 64}, {256, 128}}))
        << problem_class.name();
    EXPECT_TRUE(stream_k_128x64) << problem_class.name();
  }
}

TEST(GemmDeepK, ShallowOrWideProblemsGetNoDeepSplits) {
  for (const SpaceOptions& options :
       {sized(256, 256, 4096), sized(4096, 4096, 524288), sized(8192, 8192, 8192), SpaceOptions{}}) {
    const GemmSpace space = gemm_space(plain_bf16_class(), options);
    ASSERT_FALSE(space.candidates.empty());
    EXPECT_EQ(space.candidates.front().scheduler, TileScheduler::Persistent);
    for (const GemmSpec& s : space.candidates) {
      EXPECT_LE(s.split_k, 4) << s.name() << " for k = " << options.k;
    }
  }
}

TEST(GemmDefaults, DeepKDefaultSplitsKAndOthersStayPersistent) {
  GemmSpec deep = plain_bf16_class();
  apply_default_config(deep, 256, 256, 524288, 1);
  EXPECT_EQ(deep.scheduler, TileScheduler::StreamK) << deep.name();
  EXPECT_EQ(deep.split_k, 32) << deep.name();
  EXPECT_EQ(deep.tile.m, 128);
  EXPECT_EQ(deep.tile.n, 128);
  EXPECT_FALSE(gemm_spec_error(deep).has_value()) << deep.name();
  for (auto [m, n, k] : {std::tuple{256, 256, 4096}, std::tuple{4096, 4096, 4096},
                         std::tuple{65536, 768, 3072}}) {
    GemmSpec s = plain_bf16_class();
    apply_default_config(s, m, n, k, 1);
    EXPECT_EQ(s.scheduler, TileScheduler::Persistent) << s.name();
    EXPECT_EQ(s.split_k, 1) << s.name();
    EXPECT_FALSE(gemm_spec_error(s).has_value()) << s.name();
  }
  // Many tiles: plain GEMMs take the cooperative 128x256 tile with a 2x1 cluster, GEMMs with an
  // epilogue the ping-pong 128x128 tile (the measured winners on an H200).
  GemmSpec plain = plain_bf16_class();
  apply_default_config(plain, 4096, 4096, 4096, 1);
  EXPECT_EQ(plain.mainloop, MainloopSchedule::Cooperative);
  EXPECT_EQ(plain.tile.n, 256);
  EXPECT_EQ(plain.cluster.m, 2);
  GemmSpec fused = bf16_class();
  ASSERT_FALSE(fused.epilogue.empty());
  apply_default_config(fused, 65536, 3072, 768, 1);
  EXPECT_EQ(fused.mainloop, MainloopSchedule::Pingpong) << fused.name();
  EXPECT_EQ(fused.tile.m, 128);
  EXPECT_EQ(fused.tile.n, 128);
  EXPECT_FALSE(gemm_spec_error(fused).has_value()) << fused.name();
}

TEST(GemmDefaults, ResolvedSchedulesPairMainloopAndEpilogue) {
  GemmSpec s = with(bf16_class(), 64, 128, 64, MainloopSchedule::Auto);
  EXPECT_EQ(resolved_mainloop(s), MainloopSchedule::Pingpong);
  EXPECT_EQ(resolved_epilogue_schedule(s), EpilogueSchedule::TmaWarpSpecialized);
  s.tile.m = 128;
  EXPECT_EQ(resolved_mainloop(s), MainloopSchedule::Cooperative);
  EXPECT_EQ(resolved_epilogue_schedule(s), EpilogueSchedule::TmaCooperative);
}


// The list's opening follows the sizes: ping-pong 128x128 for many output tiles over a short K
// or over 128x256 waves filled badly, the wide cooperative tiles otherwise.
TEST(GemmSpaceOrder, ShortKOrBadlyFilledWavesOpenWithPingPong) {
  auto first = [](int64_t m, int64_t n, int64_t k) {
    const GemmSpace space = gemm_space(plain_bf16_class(), sized(m, n, k));
    return space.candidates.front();
  };
  for (auto [m, n, k] : {std::tuple{8192, 768, 768}, std::tuple{12608, 2304, 768},
                         std::tuple{8192, 2048, 2048}, std::tuple{6144, 1024, 3072}}) {
    const GemmSpec s = first(m, n, k);
    EXPECT_EQ(s.mainloop, MainloopSchedule::Pingpong) << m << "x" << n << "x" << k << ": " << s.name();
    EXPECT_EQ(s.tile.m, 128);
    EXPECT_EQ(s.tile.n, 128);
  }
  // Deep K over well-filled waves, few output tiles, unknown sizes: the cooperative 128x256.
  for (auto [m, n, k] : {std::tuple{16384, 768, 3072}, std::tuple{8192, 2048, 5632},
                         std::tuple{1024, 1024, 768}}) {
    const GemmSpec s = first(m, n, k);
    EXPECT_EQ(s.mainloop, MainloopSchedule::Cooperative) << m << "x" << n << "x" << k << ": " << s.name();
  }
  EXPECT_EQ(gemm_space(plain_bf16_class()).candidates.front().mainloop, MainloopSchedule::Cooperative);
}

// N a multiple of 192 over a deep K, with 128x192 tiles filling their waves: that tile opens
// the list (ViT-B/16's and GPT-2's second feed-forward GEMMs); a short K, an N that 192 does not
// divide or badly filled waves keep the other openings.
TEST(GemmSpaceOrder, DeepKWithWholeWavesOf128x192TilesOpensWithThem) {
  auto first = [](int64_t m, int64_t n, int64_t k) {
    return gemm_space(plain_bf16_class(), sized(m, n, k)).candidates.front();
  };
  for (auto [m, n, k] : {std::tuple{12608, 768, 3072}, std::tuple{8192, 768, 3072},
                         std::tuple{16384, 768, 3072}}) {
    const GemmSpec s = first(m, n, k);
    EXPECT_EQ(s.mainloop, MainloopSchedule::Cooperative) << m << "x" << n << "x" << k << ": " << s.name();
    EXPECT_EQ(s.tile.m, 128) << s.name();
    EXPECT_EQ(s.tile.n, 192) << s.name();
    EXPECT_EQ(s.cluster.m * s.cluster.n, 1) << s.name();
  }
  // K = 768 (12 steps), N = 2048, and 8500 rows (67 x 4 = 268 tiles: 68% of three waves).
  for (auto [m, n, k] : {std::tuple{12608, 768, 768}, std::tuple{8192, 2048, 5632},
                         std::tuple{8500, 768, 3072}}) {
    const GemmSpec s = first(m, n, k);
    EXPECT_FALSE(s.tile.n == 192) << m << "x" << n << "x" << k << ": " << s.name();
  }
}

TEST(GemmSpaceOrder, ABudgetOfEightHoldsTheCooperative128x192Tiles) {
  SpaceOptions options = sized(12608, 768, 768);
  options.max_candidates = 8;
  int wide = 0;
  for (const GemmSpec& s : gemm_space(plain_bf16_class(), options).candidates) {
    EXPECT_FALSE(gemm_spec_error(s).has_value()) << s.name();
    if (s.tile.m == 128 && s.tile.n == 192 && s.mainloop == MainloopSchedule::Cooperative) ++wide;
  }
  EXPECT_EQ(wide, 2);
}

}  // namespace
}  // namespace fact::gemm
