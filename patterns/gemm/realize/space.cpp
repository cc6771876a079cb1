// The GEMM pattern's parameter space: a curated default list and the exhaustive cross product,
// both pruned by the rules in space_rules.cpp.
#include "patterns/gemm/realize/space.hpp"

#include "patterns/gemm/epilogue/op_table.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace fact::gemm {
namespace {


// One configuration: the tuning fields of a GemmSpec.
struct Config {
  int tile_m, tile_n, k_steps;  // tile K = k_steps * (128 bytes of the A dtype)
  int cluster_m, cluster_n;
  MainloopSchedule mainloop;
  TileScheduler scheduler = TileScheduler::Persistent;
  int split_k = 1;
  RasterOrder raster = RasterOrder::Heuristic;
  int swizzle = 1;
  bool ordered_reduction = true;
};

// 128 bytes of K per step: 64 bf16/f16 elements, 32 float (tf32) elements.
int k_step_elements(const GemmSpec& spec) {
  const int bytes = graph::dtype_bytes(spec.a_dtype);
  return bytes > 0 ? 128 / bytes : 64;
}

GemmSpec with_config(const GemmSpec& problem_class, const Config& c) {
  GemmSpec s = problem_class;
  s.tile = Shape3{c.tile_m, c.tile_n, c.k_steps * k_step_elements(problem_class)};
  s.cluster = Shape3{c.cluster_m, c.cluster_n, 1};
  s.mainloop = c.mainloop;
  s.epilogue_schedule = EpilogueSchedule::Auto;
  s.scheduler = c.scheduler;
  s.split_k = c.split_k;
  s.raster = c.raster;
  s.swizzle = c.swizzle;
  s.ordered_reduction = c.ordered_reduction;
  s.stages = 0;
  return s;
}

int64_t output_tiles(const SpaceOptions& options, int tile_m, int tile_n);

// The share of the SM slots of its waves that a persistent kernel of tile_m x tile_n tiles
// fills: 1 when the output tiles are a whole number of waves, 0.73 for 192 tiles on 132 SMs.
double wave_fill(const SpaceOptions& options, int tile_m, int tile_n) {
  const int64_t tiles = output_tiles(options, tile_m, tile_n);
  const int64_t slots = std::max<int64_t>(options.sm_count, 1);
  const int64_t waves = (tiles + slots - 1) / slots;
  return waves > 0 ? static_cast<double>(tiles) / static_cast<double>(waves * slots) : 0.0;
}

// Whether 128x128 ping-pong opens the list for these sizes. Measured on an H200 (the tune
// reports behind bench/results/gemm-models-nvidia-h200-2026-11-28-max8-curated-order.json, the
// 17 GEMM calls of GPT-2, Llama, BERT and ViT): with many output tiles and a short K (at most
// 32 K steps: 2048 bf16 elements) 128x128 ping-pong with a 2-CTA cluster ran fastest in 9 of 11
// calls, 0.2-23% ahead of the wide cooperative tiles (one warp group's epilogue hides under the other's short
// mainloop); so did a deeper K whose 128x256 tiles fill their last wave badly (8192x768x3072:
// 1.45 waves, ping-pong 0.0593 ms against 0.0679); a deep K over well-filled waves went to the
// cooperative 128x256 / 256x128 tiles. The tuner tries the first configuration of each kernel
// family first, so with a budget of two it tries both kinds whatever this says.
bool pingpong_first(const GemmSpec& problem_class, const SpaceOptions& options) {
  if (options.m <= 0 || options.n <= 0 || options.k <= 0) return false;  // sizes unknown
  if (output_tiles(options, 128, 128) < options.sm_count) return false;  // few tiles
  const int64_t k_steps = options.k / k_step_elements(problem_class);
  return k_steps <= 32 || (wave_fill(options, 128, 256) < 0.8 && wave_fill(options, 128, 128) >= 0.9);
}

// Whether the cooperative 128x192 tile (no cluster) opens the list: N a multiple of 192 (768,
// 2304 and 3072 are; cuBLAS runs 192-wide tiles on such GEMMs), a deep K (more than 32 K steps,
// where the cooperative mainloop's one epilogue per tile is paid back) and output tiles that fill
// their waves to at least 95%. ViT-B/16's second feed-forward GEMM at batch 64 (12608x768x3072)
// makes 396 such tiles, three whole waves on 132 SMs, where 128x256 tiles fill 75% and 128x128
// ping-pong tiles 90% of theirs; GPT-2's (8192x768x3072) fills 97%. In the tune of the GEMM
// suite, 128x192 won both calls of this kind that it was offered.
bool cooperative_128x192_first(const GemmSpec& problem_class, const SpaceOptions& options) {
  if (options.m <= 0 || options.n <= 0 || options.k <= 0) return false;  // sizes unknown
  if (options.n % 192 != 0) return false;
  const int64_t k_steps = options.k / k_step_elements(problem_class);
  return k_steps > 32 && wave_fill(options, 128, 192) >= 0.95;
}

// Tiles, clusters and schedules that perform on H100/H200 for 16-bit and TF32 GEMMs, strongest
// first (a cut sweep takes them in this order, at most half from one kernel family): the wide
// cooperative tiles with a 2-CTA cluster, 128x192 cooperative tiles (a whole number of waves
// where N is a multiple of 192, as 768, 2304 and 3072 are; cuBLAS runs 192-wide tiles on such
// GEMMs), stream-K of the wide tiles (wave quantization), ping-pong (the epilogue of one warp
// group overlaps the other's mainloop: short-K problems), then the smaller tiles, split-K for
// few-tile problems, rasterization and swizzle variants. For the sizes
// cooperative_128x192_first picks, the 128x192 tile comes first; otherwise, for the sizes
// pingpong_first picks, the two ping-pong 128x128 tiles.
std::vector<Config> curated_configs(const GemmSpec& problem_class, const SpaceOptions& options) {
  using M = MainloopSchedule;
  using TS = TileScheduler;
  std::vector<Config> configs;
  auto add = [&](int tm, int tn, int ks, M mainloop, std::pair<int, int> cluster,
                 TS scheduler = TS::Persistent, int split = 1) {
    configs.push_back({tm, tn, ks, cluster.first, cluster.second, mainloop, scheduler, split});
  };
  if (cooperative_128x192_first(problem_class, options)) {
    add(128, 192, 1, M::Cooperative, {1, 1});
  } else if (pingpong_first(problem_class, options)) {
    add(128, 128, 1, M::Pingpong, {1, 2});
    add(128, 128, 1, M::Pingpong, {2, 1});
  }
  add(128, 256, 1, M::Cooperative, {2, 1});
  add(256, 128, 1, M::Cooperative, {1, 2});
  add(128, 192, 1, M::Cooperative, {2, 1});
  add(128, 192, 1, M::Cooperative, {1, 1});
  add(128, 256, 1, M::Cooperative, {1, 1});
  add(256, 128, 1, M::Cooperative, {2, 1});
  add(128, 256, 1, M::Cooperative, {1, 1}, TS::StreamK);
  add(256, 128, 1, M::Cooperative, {1, 1}, TS::StreamK);
  add(128, 128, 1, M::Pingpong, {1, 2});
  add(128, 128, 1, M::Pingpong, {2, 1});
  add(128, 256, 1, M::Cooperative, {1, 2});
  add(256, 128, 1, M::Cooperative, {1, 1});
  add(64, 256, 1, M::Pingpong, {1, 1});
  add(64, 256, 1, M::Pingpong, {1, 2});
  add(128, 128, 1, M::Pingpong, {1, 1});
  add(128, 128, 1, M::Cooperative, {1, 1});
  add(128, 128, 1, M::Cooperative, {2, 1});
  add(128, 128, 1, M::Cooperative, {1, 2});
  add(128, 128, 1, M::Cooperative, {1, 1}, TS::StreamK);
  add(64, 128, 1, M::Pingpong, {1, 1});
  add(64, 128, 1, M::Pingpong, {2, 1});
  add(64, 128, 1, M::Pingpong, {1, 2});
  add(128, 64, 1, M::Cooperative, {1, 1});
  add(64, 64, 1, M::Pingpong, {1, 1});
  add(128, 128, 2, M::Cooperative, {1, 1});
  add(64, 128, 2, M::Pingpong, {1, 1});
  // Split-K for problems with few output tiles (pruned where the tiles fill the SMs).
  for (int split : {2, 4}) add(128, 128, 1, M::Cooperative, {1, 1}, TS::StreamK, split);
  add(128, 256, 1, M::Cooperative, {1, 1}, TS::StreamK, 2);
  // Rasterization and swizzle of the strongest tile (L2 reuse of A or B panels).
  for (RasterOrder raster : {RasterOrder::AlongM, RasterOrder::AlongN}) {
    configs.push_back({128, 256, 1, 2, 1, M::Cooperative, TS::Persistent, 1, raster});
  }
  for (int swizzle : {2, 4, 8}) {
    configs.push_back({128, 256, 1, 2, 1, M::Cooperative, TS::Persistent, 1,
                       RasterOrder::Heuristic, swizzle});
  }
  return configs;
}

int64_t output_tiles(const SpaceOptions& options, int tile_m, int tile_n) {
  return ((options.m + tile_m - 1) / tile_m) * ((options.n + tile_n - 1) / tile_n) *
         std::max<int64_t>(options.batch, 1);
}

int64_t power_of_two_at_most(int64_t v) {
  int64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

// Split-K and stream-K candidates for a deep-K problem (none otherwise), best guesses first:
// 128x128 split-K with the partials summed in arrival order (an ordered sum chains the splits
// of a tile one after another: measured on an H200, 256x256x524288 bf16 split 32 took 0.206 ms
// ordered against the 0.13 ms memory floor), then
// 128x128 split-K (64 accumulator registers per thread, a 64 KiB partial tile per split),
// the wide tiles (fewer output tiles, A or B re-read less), 128x64 (twice the output tiles),
// half the split count for the small tiles (half the partial tiles to reduce), then stream-K
// (split 1), which the scheduler decomposes as pure stream-K since the output tiles fill less
// than half the SMs.
std::vector<Config> deep_k_configs(const GemmSpec& problem_class, const SpaceOptions& options) {
  using M = MainloopSchedule;
  using TS = TileScheduler;
  constexpr std::pair<int, int> kSplitTiles[] = {{128, 128}, {128, 256}, {128, 64}, {256, 128}};
  std::vector<Config> configs;
  std::vector<std::pair<std::pair<int, int>, int>> splits;
  for (auto [tm, tn] : kSplitTiles) {
    if (int split = deep_k_split_count(problem_class, options, tm, tn); split > 0) {
      splits.push_back({{tm, tn}, split});
    }
  }
  for (auto [tile, split] : splits) {
    if (tile.first * tile.second <= 128 * 128) {
      configs.push_back({tile.first, tile.second, 1, 1, 1, M::Cooperative, TS::StreamK, split,
                         RasterOrder::Heuristic, 1, /*ordered_reduction=*/false});
    }
  }
  for (auto [tile, split] : splits) {
    configs.push_back({tile.first, tile.second, 1, 1, 1, M::Cooperative, TS::StreamK, split});
  }
  for (auto [tile, split] : splits) {
    if (split / 2 >= kMinDeepSplits && tile.first * tile.second <= 128 * 128) {
      configs.push_back({tile.first, tile.second, 1, 1, 1, M::Cooperative, TS::StreamK, split / 2});
    }
  }
  if (!splits.empty()) {
    for (auto [tm, tn] : {std::pair{128, 128}, std::pair{128, 64}, std::pair{128, 256}}) {
      configs.push_back({tm, tn, 1, 1, 1, M::Cooperative, TS::StreamK});
    }
  }
  return configs;
}

std::vector<Config> exhaustive_configs() {
  using M = MainloopSchedule;
  std::vector<Config> configs;
  for (int tm : {64, 128, 256})
    for (int tn : {64, 128, 256})
      for (int ks : {1, 2})
        for (auto [cm, cn] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}})
          for (M mainloop : {M::Cooperative, M::Pingpong, M::TmaWarpSpecialized, M::Auto})
            for (TileScheduler scheduler : {TileScheduler::Persistent, TileScheduler::StreamK})
              for (int split : {1, 2, 4})
                for (RasterOrder raster :
                     {RasterOrder::Heuristic, RasterOrder::AlongM, RasterOrder::AlongN})
                  for (int swizzle : {1, 2, 4, 8})
                    configs.push_back({tm, tn, ks, cm, cn, mainloop, scheduler, split, raster, swizzle});
  return configs;
}

}  // namespace

GemmSpace gemm_space(const GemmSpec& problem_class, const SpaceOptions& options) {
  GemmSpace space;
  std::set<std::string> seen;
  std::vector<Config> configs = deep_k_configs(problem_class, options);
  const std::vector<Config> listed =
      options.exhaustive ? exhaustive_configs() : curated_configs(problem_class, options);
  configs.insert(configs.end(), listed.begin(), listed.end());
  for (const Config& config : configs) {
    GemmSpec spec = with_config(problem_class, config);
    if (!seen.insert(spec.name()).second) continue;
    if (auto reason = gemm_prune_reason(spec, options)) {
      space.pruned.push_back({std::move(spec), *reason});
    } else if (static_cast<int>(space.candidates.size()) >= options.max_candidates) {
      space.pruned.push_back({std::move(spec), "over the cap of " +
                                                   std::to_string(options.max_candidates) +
                                                   " candidates"});
    } else {
      space.candidates.push_back(std::move(spec));
    }
  }
  return space;
}

int deep_k_split_count(const GemmSpec& problem_class, const SpaceOptions& options, int tile_m,
                       int tile_n) {
  if (options.m <= 0 || options.n <= 0 || options.k <= 0 || tile_m <= 0 || tile_n <= 0) return 0;
  const int64_t tiles = output_tiles(options, tile_m, tile_n);
  const int64_t k_tiles = options.k / k_step_elements(problem_class);
  const int64_t fill = options.sm_count / tiles;
  const int64_t deep = k_tiles / kMinKTilesPerSplit;
  const int64_t split = std::min<int64_t>({power_of_two_at_most(std::max<int64_t>(fill, 1)),
                                           power_of_two_at_most(std::max<int64_t>(deep, 1)),
                                           kMaxDeepSplits});
  return fill >= kMinDeepSplits && deep >= kMinDeepSplits ? static_cast<int>(split) : 0;
}

void apply_default_config(GemmSpec& spec, int64_t m, int64_t n, int64_t k, int64_t batch) {
  SpaceOptions sizes;  // the problem's sizes; sm_count: H100 SXM / H200
  sizes.m = m;
  sizes.n = n;
  sizes.k = k;
  sizes.batch = std::max<int64_t>(batch, 1);
  auto tiles = [&](int64_t tm, int64_t tn) { return output_tiles(sizes, tm, tn); };
  // Many output tiles: measured on an H200 (bench/results/gemm-nvidia-h200-2026-11-22-max8.json
  // tune reports), a plain GEMM ran fastest as 128x256 cooperative with a 2x1 cluster, and GEMMs
  // with an epilogue (bias, GELU, residual; K 768..3072) as 128x128 ping-pong with a 1x2 or 2x1
  // cluster, 3-8% ahead of the cooperative tiles: one warp group's epilogue hides under the
  // other's mainloop.
  Config config{128, 256, 1, 1, 1, MainloopSchedule::Cooperative};
  const int64_t m_tiles = (m + 127) / 128;
  const int64_t n_tiles = (n + 127) / 128;
  if (!spec.epilogue.empty()) {
    config = {128, 128, 1, 1, n_tiles >= 2 ? 2 : 1, MainloopSchedule::Pingpong};
  } else if (m_tiles >= 2) {
    config = {128, 256, 1, 2, 1, MainloopSchedule::Cooperative};
  }
  if (m <= 64) {
    config = {64, 128, 1, 1, 1, MainloopSchedule::Pingpong};
  } else if (tiles(128, 256) < sizes.sm_count) {
    config = {128, 128, 1, 1, 1, MainloopSchedule::Cooperative};
    // Few output tiles over a deep K: split K so that every SM streams a share of it.
    // A step that stores D runs the persistent scheduler only (space_rules.cpp).
    // So does the direct-store variant (an unaligned D).
    const bool gated = (!spec.epilogue.empty() && step_op(spec.epilogue.back().kind).stores_d) ||
                       stores_d_directly(spec);
    if (const int split = gated ? 0 : deep_k_split_count(spec, sizes, 128, 128); split > 0) {
      config = {128, 128, 1, 1, 1, MainloopSchedule::Cooperative, TileScheduler::StreamK, split};
    }
  }
  spec = with_config(spec, config);
}

}  // namespace fact::gemm
