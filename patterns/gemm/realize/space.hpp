// The GEMM pattern's configuration rules and parameter space for sm90a (CUTLASS 3.x
// CollectiveBuilder kernels rendered by kernel_gemm.cpp).
//
// Two levels of "no":
//   gemm_spec_error    the template cannot instantiate the spec (nvcc would fail or the kernel
//                      would compute something else): render_kernel refuses it
//   gemm_prune_reason  a valid spec not worth compiling: too few pipeline stages fit in shared
//                      memory, too many accumulator registers, tiles far larger than the problem
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "patterns/gemm/realize/spec.hpp"
#include "fact/realize/param_space.hpp"

namespace fact::gemm {

// The mainloop schedule the sm90 builder picks for Auto (TMA-aligned operands): ping-pong for
// 64-row tiles, cooperative otherwise. Explicit schedules are returned as they are.
MainloopSchedule resolved_mainloop(const GemmSpec& spec);
// The epilogue schedule that pairs with the resolved mainloop when Auto: TmaCooperative with
// the cooperative kernel, TmaWarpSpecialized with ping-pong / TmaWarpSpecialized; NoSmem for a
// spec that stores D directly (below), whatever its mainloop.
EpilogueSchedule resolved_epilogue_schedule(const GemmSpec& spec);

// The direct-store variant: D's rows (its leading dimension, contiguous extent or batch
// strides: spec.align_d) are not 16-byte aligned, so no TMA store can address them. Such a spec
// resolves its epilogue schedule to NoSmem and runs FACT's DirectStore collective
// (gemm_direct_store.cuh, under CUTLASS's sm90 warp-specialized adapter): each consumer thread
// computes the chain per element and stores it straight to global memory, element by element,
// predicated by M and N. No step that stores D itself or reads tables; persistent scheduler
// only. A and B keep the TMA mainloop (their alignments are checked as ever).
bool stores_d_directly(const GemmSpec& spec);

// Shared memory as the sm90 builders lay it out (StageCountAutoCarveout): the epilogue's
// storage is carved out first, the rest holds as many A+B stages as fit.
struct SharedMemoryPlan {
  int capacity_bytes = 0;   // per-CTA opt-in maximum on sm90 (227 KiB)
  int stage_bytes = 0;      // one A tile + one B tile + the stage's pipeline barriers
  int epilogue_bytes = 0;   // C/D staging buffers, bias row, epilogue barriers (estimate)
  int stages = 0;           // spec.stages, or the stages that fit when it is 0 (auto)
  int total_bytes = 0;      // stages * stage_bytes + epilogue carve-out
};
SharedMemoryPlan plan_shared_memory(const GemmSpec& spec);

// float accumulators each consumer thread holds: tile M*N over the consumer threads of a tile
// (256 for the cooperative kernel, 128 for ping-pong and the basic warp-specialized one).
int accumulator_registers_per_thread(const GemmSpec& spec);
inline constexpr int kMaxAccumulatorRegisters = 128;

std::optional<std::string> gemm_spec_error(const GemmSpec& spec);
std::optional<std::string> gemm_prune_reason(const GemmSpec& spec,
                                             const SpaceOptions& options);

// Deep-K split-K: a problem whose tile_m x tile_n output tiles (times its batch) leave SMs idle
// and whose K is deep splits K over the idle SMs. Returns the split count for that tile: the
// largest power of two with tiles * splits <= options.sm_count (one wave), at most
// kMaxDeepSplits, and at most K / (kMinKTilesPerSplit * tile K) so each split streams at least
// kMinKTilesPerSplit K tiles (its partial tile, written and read back in f32, then costs at most
// a quarter of its mainloop traffic for 128x128 tiles). Returns 0 when that count is below
// kMinDeepSplits (the problem is not deep: the curated 2- and 4-way variants cover it) or when
// the problem sizes are unknown. The stream-K scheduler adjusts it again to the GPU's SMs.
inline constexpr int kMinKTilesPerSplit = 16;
inline constexpr int kMinDeepSplits = 8;
inline constexpr int kMaxDeepSplits = 64;
int deep_k_split_count(const GemmSpec& problem_class, const SpaceOptions& options,
                       int tile_m, int tile_n);

// The configurations worth compiling for the problem class of `problem_class` (its dtypes,
// layouts, alignments, batching, math mode and epilogue; its tuning fields are ignored).
// Default: a curated list of tiles, clusters and schedules known to perform on Hopper, plus
// stream-K / split-K and raster / swizzle variants of the strongest tiles; for deep-K problems
// (deep_k_split_count > 0: few output tiles, K >= kMinDeepSplits * kMinKTilesPerSplit K tiles)
// the list opens with split-K candidates of problem-derived split counts (128x128, 128x256,
// 128x64, 256x128 cooperative tiles) and stream-K of the smaller tiles (with fewer output tiles
// than half the SMs, the stream-K scheduler's heuristic decomposition is pure stream-K);
// `exhaustive`: the same deep-K opening, then every combination of tile (64/128/256 x
// 64/128/256 x 1-2 K steps), cluster (1x1, 2x1, 1x2, 2x2), mainloop (ws, coop, pp, auto),
// scheduler, split-K (1, 2, 4), raster (heuristic, M, N) and swizzle (1, 2, 4, 8). Candidates
// keep the order given; the first is the default.
GemmSpace gemm_space(const GemmSpec& problem_class,
                               const SpaceOptions& options = {});

// Sets the tuning fields of `spec` to a robust first configuration for an m x n x k (x batch)
// problem: 128x256 cooperative tiles when they fill the GPU, 128x128 when not, 64-row
// ping-pong tiles for short M; 128-byte K steps; 1x1 cluster; persistent scheduler, except
// for deep-K problems (deep_k_split_count > 0), which get 128x128 split-K with that count.
void apply_default_config(GemmSpec& spec, int64_t m, int64_t n, int64_t k, int64_t batch);

}  // namespace fact::gemm
