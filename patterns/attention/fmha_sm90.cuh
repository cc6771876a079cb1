// FACT's fused attention forward kernel for Hopper (sm_90a), written on CuTe.
//
// One CTA computes a tile of kBlockM query rows of one (batch, head) against all the key blocks it
// may see. Warp specialization:
//   warpgroup 0        producer: one warp issues every TMA load (Q once per tile, then K and V
//                      block by block into a kStages-deep ring) and, with the dynamic schedule,
//                      fetches the next tile; it gives its registers away (setmaxnreg.dec).
//   warpgroups 1..W    consumers, W = kBlockM / 64: each owns 64 query rows of the tile, keeps
//                      S = Q K^T, P and O in registers (P is the A operand of the P V wgmma, never
//                      written to shared memory), and runs the online softmax in float32.
// Inside a consumer warpgroup the loop is software-pipelined: the QK^T of block n-1 and the PV
// of block n are issued together and the softmax of block n-1 waits only for the first (ptxas
// moves the PV's wait 36-72 instructions into that softmax, to pack P early). The consumer
// warpgroups issue their GEMMs independently (cooperative): their GEMMs fill each other's softmax.
// Causal tiles skip fully masked key blocks and apply the mask only on the blocks that cross
// the diagonal (and the key-tail block); a persistent grid walks tiles longest-first within
// L2-sized sections of (batch, head) pairs, statically or through an atomic counter.
// Tails in either sequence are handled by TMA bounds (zero fill on load, clipping on store) and
// masking; nothing is padded or refused.
//
// Template parameters (the tuner's space): element type, head dim, tile M (64 rows per consumer
// warpgroup), tile N, pipeline stages, causal, dynamic or static schedule, persistent grid, Q
// stages, L2 share, tile order, O staged in the Q buffer, padded tile head dim.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cute/tensor.hpp"
#include "cute/arch/cluster_sm90.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/atom/copy_traits_sm90_tma.hpp"
#include "cute/atom/mma_traits_sm90_gmma.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/collective/builders/sm90_common.inl"
#include "patterns/attention/kernel_problem.cuh"

namespace fact::attention {

using namespace cute;

// ------------------------------------------------------------------------------------------------
// Configuration: type choices only (DESIGN.md rule 5). An instantiation file names one.
template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kCausal_,
          bool kDynamicSchedule_ = false, bool kPersistent_ = true, int kQStages_ = 2, int kL2Percent_ = 40,
          int kTileOrder_ = 0, bool kOAliasQ_ = false, int kTileHeadDim_ = 0>
struct Config {
  using Element = Element_;                         // cutlass::bfloat16_t or cutlass::half_t
  static constexpr int kHeadDim = kHeadDim_;        // head dim of Q, K and V
  static constexpr int kBlockM = kBlockM_;          // query rows per CTA tile (64 per consumer WG)
  static constexpr int kBlockN = kBlockN_;          // key rows per block
  static constexpr int kStages = kStages_;          // K and V ring depth
  static constexpr bool kCausal = kCausal_;         // built for causal masks (either alignment)
  static constexpr bool kDynamicSchedule = kDynamicSchedule_;  // atomic tile counter (workspace)
  static constexpr bool kPersistent = kPersistent_; // grid = SMs (else one CTA per tile)
  static constexpr int kQStages = kQStages_;        // Q buffers: 2 loads the next tile's Q early
  static constexpr int kL2Percent = kL2Percent_;    // share of L2 one section's K and V may fill
  static constexpr int kTileOrder = kTileOrder_;    // 0: L2 sections, longest first; 1: head-major
  static constexpr bool kOAliasQ = kOAliasQ_;       // O staged in the tile's Q stage (frees smem)
  // Head dim of the shared-memory tiles (0: kHeadDim). Wider than kHeadDim (a multiple of 64):
  // rows load with 128-byte swizzle boxes, TMA zero-fills the columns past kHeadDim, the stores
  // clip them; the GEMMs run over the padded width.
  static constexpr int kTileHeadDim = kTileHeadDim_ ? kTileHeadDim_ : kHeadDim_;
};

namespace detail {

// Named barrier ids (0 is __syncthreads; 1-4 unused). 16 exist in hardware.
enum : int {
  kBarTileFull = 5,    // dynamic schedule: next tile index written to smem
  kBarTileEmpty = 6,   // dynamic schedule: next tile index read
  kBarEpilogue0 = 7,   // 7, 8, 9: per consumer WG epilogue
};

CUTE_DEVICE void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
CUTE_DEVICE void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

CUTE_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <class Element>
CUTE_DEVICE uint32_t pack2(float lo, float hi) {
  uint32_t d;
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  } else {
    static_assert(std::is_same_v<Element, cutlass::half_t>, "bf16 or fp16");
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  }
  return d;
}

// Accumulator layout ((2,2,V), MMA_M, MMA_N) of a 64xN wgmma viewed as (rows, cols):
// value mode 0 = column pair, mode 1 = row +8, mode 2 = 8-column groups.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_rowcol(Layout l) {
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                     make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// The same registers as the A operand of a k16 wgmma: ((2,2,2), MMA_M, N/16). Two consecutive
// 8-column groups of the accumulator form one 16-wide k block.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_as_operand_a(Layout l) {
  auto groups = logical_divide(get<0, 2>(l), Tile<_2>{});  // (2, V/2)
  return make_layout(make_layout(get<0, 0>(l), get<0, 1>(l), get<0, 0>(groups)), get<1>(l),
                     coalesce(make_layout(get<0, 1>(groups), get<2>(l))));
}

// One warpgroup GEMM: C (+)= A B over all k blocks, as one wgmma batch.
// kKBlocks > 0: only the first kKBlocks k-blocks (a padded tile's zero columns are skipped).
template <bool kZeroInit, int kWait, int kKBlocks = 0, class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void wg_gemm(TiledMma& mma, TA const& a, TB const& b, TC& c) {
  constexpr bool kRegA = !cute::is_base_of<GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value;
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(a));
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < (kKBlocks > 0 ? kKBlocks : int(size<2>(a))); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(c);
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(a));
}

// mbarrier arrive by the threads with `pred`, without a branch around it (a branch splits the
// scheduling region between a wgmma's issue and its wait).
CUTE_DEVICE void mbar_arrive_if(uint64_t* bar, bool pred) {
  uint32_t const addr = cute::cast_smem_ptr_to_uint(bar);
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\t@p mbarrier.arrive.shared::cta.b64 _, [%0];\n\t}"
      ::"r"(addr), "r"(int(pred)) : "memory");
}

struct PipeState {
  int index = 0;
  uint32_t phase = 0;
  template <int kStages>
  CUTE_DEVICE void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

CUTE_HOST_DEVICE int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace detail

// ------------------------------------------------------------------------------------------------
template <class Cfg>
struct Sm90Fmha {
  using Element = typename Cfg::Element;
  static constexpr int kHeadDim = Cfg::kHeadDim;  // of the problem's Q, K, V and O
  static constexpr int D = Cfg::kTileHeadDim;     // of the shared-memory tiles and the GEMMs
  static_assert(D == kHeadDim || (D > kHeadDim && D % 64 == 0), "a padded tile head dim is a multiple of 64");
  // QK^T runs over the head dim's k-blocks only: a padded tile's columns past it are zero.
  static constexpr int kQkKBlocks = kHeadDim / 16;
  static constexpr int kBlockM = Cfg::kBlockM;
  static constexpr int kBlockN = Cfg::kBlockN;
  static constexpr int kStages = Cfg::kStages;
  static constexpr bool kCausal = Cfg::kCausal;
  static constexpr bool kDynamic = Cfg::kDynamicSchedule;
  static constexpr int kQStages = Cfg::kQStages;
  static constexpr bool kOAliasQ = Cfg::kOAliasQ;
  static constexpr int kNumWG = kBlockM / 64;                  // consumer warpgroups
  static constexpr int kMmaThreads = kNumWG * 128;
  static constexpr int kThreads = kMmaThreads + 128;
  static constexpr int kProducerSyncThreads = kMmaThreads + 32;  // consumers + producer warp
  static constexpr int kRows = 2;                 // accumulator rows per thread (64-row wgmma)
  static constexpr int kCols = kBlockN / 4;       // score columns per thread and row
  // Registers after setmaxnreg. One consumer WG: 24 + 232 fills a CTA's 32 K registers, so two
  // such CTAs share an SM where their shared memory fits (kCtasPerSm below).
  static constexpr int kProducerRegs = kNumWG == 3 ? 32 : 24;
  static constexpr int kConsumerRegs = kNumWG == 1 ? 232 : kNumWG == 2 ? 240 : 160;

  static_assert(kBlockM % 64 == 0 && kNumWG >= 1 && kNumWG <= 3, "tile M: 64, 128 or 192");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "tile N: multiple of 16, at most 256");
  static_assert(D % 16 == 0 && D <= 256, "head dim: multiple of 16");

  using TileQK = Shape<_64, Int<kBlockN>, Int<D>>;  // per consumer WG: (rows, keys, dim)
  using TilePV = Shape<_64, Int<D>, Int<kBlockN>>;  // (rows, dim, keys)
  using MmaQK = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileQK>()));
  using MmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TilePV, GMMA::Major::K, GMMA::Major::MN>()));

  // Shared memory layouts (swizzled for wgmma and TMA).
  using AtomQ = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, _64, Int<D>>());
  using SmemLayoutQ1 = decltype(tile_to_shape(AtomQ{}, Shape<_64, Int<D>>{}));             // one WG
  // Q: one 64-row slab per consumer WG and Q stage, slab index = stage * kNumWG + WG.
  using SmemLayoutQ = decltype(tile_to_shape(AtomQ{}, Shape<_64, Int<D>, Int<kNumWG * kQStages>>{}));
  using AtomK = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, Int<kBlockN>, Int<D>>());
  using SmemLayoutK = decltype(tile_to_shape(AtomK{}, Shape<Int<kBlockN>, Int<D>, Int<kStages>>{}));
  // V^T: (dim, keys), dim contiguous (V is [keys, dim] row-major in memory): MN-major B of PV.
  using AtomV = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::MN, Element, Int<D>, Int<kBlockN>>());
  using SmemLayoutV = decltype(tile_to_shape(AtomV{}, Shape<Int<D>, Int<kBlockN>, Int<kStages>>{},
                                             Step<_1, _2, _3>{}));
  using SmemLayoutO1 = SmemLayoutQ1;
  using SmemLayoutO = decltype(tile_to_shape(AtomQ{}, Shape<_64, Int<D>, Int<kNumWG>>{}));
  // Where O is staged: its own slabs (one per WG), or the tile's Q slabs (stage * kNumWG + WG).
  using SmemLayoutOStage = std::conditional_t<kOAliasQ, SmemLayoutQ, SmemLayoutO>;

  struct SharedStorage {
    cute::array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cosize_v<SmemLayoutV>, 1024> v;
    cute::array_aligned<Element, kOAliasQ ? 0 : cosize_v<SmemLayoutO>, 1024> o;
    alignas(8) uint64_t q_full[kQStages];
    uint64_t q_empty[kQStages];
    uint64_t k_full[kStages];
    uint64_t k_empty[kStages];
    uint64_t v_full[kStages];
    uint64_t v_empty[kStages];
    int next_tile;
  };
  // +1 KB: the kernel aligns the dynamic shared memory base to 1024 bytes (128B swizzles).
  static constexpr int kSmemBytes = int(sizeof(SharedStorage)) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
  // CTAs resident per SM: two for one consumer WG where two fit in the SM's 228 KB (1 KB of it
  // reserved per CTA), so one CTA's per-tile prologue and epilogue overlap the other's GEMMs;
  // the persistent grid launches this many per SM (the entry), __launch_bounds__ caps the
  // registers at entry to match.
  static constexpr int kCtasPerSm = (kNumWG == 1 && 2 * (kSmemBytes + 1024) <= 228 * 1024) ? 2 : 1;
  static_assert(kCtasPerSm * (kNumWG * 128 * kConsumerRegs + 128 * kProducerRegs) <= 65536, "register file");

  static constexpr uint32_t kBytesQ = uint32_t(kBlockM * D * sizeof(Element));  // one Q stage
  static constexpr uint32_t kBytesK = uint32_t(size(take<0, 2>(SmemLayoutK{})) * sizeof(Element));
  static constexpr uint32_t kBytesV = uint32_t(size(take<0, 2>(SmemLayoutV{})) * sizeof(Element));

  // Global views: (seq, dim, head, batch) with dim contiguous; V as (dim, seq, head, batch).
  using ShapeT = Shape<int, int, int, int>;
  using StrideT = Stride<int64_t, _1, int64_t, int64_t>;
  using StrideVt = Stride<_1, int64_t, int64_t, int64_t>;
  using GmemT = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeT{}, StrideT{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemT{}, SmemLayoutQ1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemT{}, take<0, 2>(SmemLayoutK{})));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeT{}, StrideVt{}),
                                      take<0, 2>(SmemLayoutV{})));
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{},
                                      make_tensor(make_gmem_ptr(static_cast<Element*>(nullptr)), ShapeT{}, StrideT{}),
                                      SmemLayoutO1{}));

  struct Params {
    TmaQ tma_q;
    TmaK tma_k;
    TmaV tma_v;
    TmaO tma_o;
    int batch, heads, kv_heads, group, seq_q, seq_k;
    int num_m_blocks, num_n_blocks, total_tiles, hb_total, section;
    int diag_offset;  // causal: key j is visible to query i iff j <= i + diag_offset
    int window;       // causal sliding window: and iff j > i + diag_offset - window (0: none)
    float scale_log2;
    float scale;
    float* lse;
    int64_t lse_batch_stride, lse_head_stride;
    int* tile_counter;  // dynamic schedule: zero at launch
    Element* o;         // for tiles whose rows see no key (written with plain stores)
    int64_t o_batch_stride, o_seq_stride, o_head_stride;
  };

  // Host: everything but the TMA descriptors is plain arithmetic.
  using Problem = KernelProblem<Element>;

  static int num_m_blocks(int seq_q) { return (seq_q + kBlockM - 1) / kBlockM; }
  static int total_tiles(Problem const& p) { return num_m_blocks(p.seq_q) * p.heads * p.batch; }

  static Params make_params(Problem const& p) {
    auto q = make_tensor(make_gmem_ptr(p.q), make_shape(p.seq_q, kHeadDim, p.heads, p.batch),
                         make_stride(p.q_stride[1], _1{}, p.q_stride[2], p.q_stride[0]));
    auto k = make_tensor(make_gmem_ptr(p.k), make_shape(p.seq_k, kHeadDim, p.kv_heads, p.batch),
                         make_stride(p.k_stride[1], _1{}, p.k_stride[2], p.k_stride[0]));
    auto vt = make_tensor(make_gmem_ptr(p.v), make_shape(kHeadDim, p.seq_k, p.kv_heads, p.batch),
                          make_stride(_1{}, p.v_stride[1], p.v_stride[2], p.v_stride[0]));
    auto o = make_tensor(make_gmem_ptr(p.o), make_shape(p.seq_q, kHeadDim, p.heads, p.batch),
                         make_stride(p.o_stride[1], _1{}, p.o_stride[2], p.o_stride[0]));
    int const group = p.heads / p.kv_heads;
    int const m_blocks = num_m_blocks(p.seq_q);
    int const hb_total = p.heads * p.batch;
    // L2 sections: as many (batch, head) pairs as keep their K and V within kL2Percent of L2,
    // a power of two; query heads sharing a KV head count once.
    double const kv_bytes = double(p.seq_k) * 2.0 * kHeadDim * sizeof(Element) / double(group);
    double const budget = 0.01 * Cfg::kL2Percent * double(p.l2_bytes > 0 ? p.l2_bytes : (int64_t(50) << 20));
    int section = 1;
    while (section * 2 <= hb_total && double(section * 2) * kv_bytes <= budget) section *= 2;
    return Params{make_tma_copy(SM90_TMA_LOAD{}, q, SmemLayoutQ1{}),
                  make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(SmemLayoutK{})),
                  make_tma_copy(SM90_TMA_LOAD{}, vt, take<0, 2>(SmemLayoutV{})),
                  make_tma_copy(SM90_TMA_STORE{}, o, SmemLayoutO1{}),
                  p.batch, p.heads, p.kv_heads, group, p.seq_q, p.seq_k,
                  m_blocks, (p.seq_k + kBlockN - 1) / kBlockN, m_blocks * hb_total, hb_total, section,
                  p.diag_offset,
                  kWindows ? p.window : 0,
                  float(double(p.scale) * 1.4426950408889634),  // scale * log2(e)
                  p.scale,
                  p.lse, p.lse_batch_stride, p.lse_head_stride,
                  p.tile_counter,
                  p.o, p.o_stride[0], p.o_stride[1], p.o_stride[2]};
  }

  // ----------------------------------------------------------------------------------------------
  // Device side.
  struct TileCoord {
    int m, h, b;
  };

  // Tile index -> (m block, head, batch): sections of `section` (batch, head) pairs in order;
  // inside a section the heads vary fastest and the m blocks go longest-first (causal).
  CUTE_DEVICE static TileCoord tile_coord(Params const& p, int t) {
    if constexpr (Cfg::kTileOrder == 1) {
      // Head-major: each (batch, head)'s m blocks back to back (longest first), so the CTAs that
      // share K and V run at the same time and meet in L2; heads sharing a KV head are adjacent.
      int const hb = t / p.num_m_blocks;
      int const m_rev = t - hb * p.num_m_blocks;
      int const b = hb / p.heads;
      TileCoord c;
      c.b = b;
      c.h = hb - b * p.heads;
      c.m = kCausal ? p.num_m_blocks - 1 - m_rev : m_rev;
      return c;
    }
    int const sec_tiles = p.section * p.num_m_blocks;
    int const s = t / sec_tiles;
    int const r = t - s * sec_tiles;
    int const start = s * p.section;
    int const here = min(p.section, p.hb_total - start);
    int const m_rev = r / here;
    int const hb = start + (r - m_rev * here);
    int const b = hb / p.heads;
    TileCoord c;
    c.b = b;
    c.h = hb - b * p.heads;
    c.m = kCausal ? p.num_m_blocks - 1 - m_rev : m_rev;
    return c;
  }

  // Every causal kernel takes a sliding window (the entry's can_implement).
  static constexpr bool kWindows = kCausal;

  // Key blocks [n_min, n_max) this tile sees; n_max <= n_min: none (rows that see no key).
  CUTE_DEVICE static int n_block_min(Params const& p, int m) {
    if constexpr (!kWindows) {
      return 0;
    } else {
      if (p.window <= 0) return 0;
      return max(0, detail::floor_div(m * kBlockM + p.diag_offset - p.window + 1, kBlockN));
    }
  }
  // Sliding window: blocks n < n_block_window hold keys below some row's window (masked there).
  CUTE_DEVICE static int n_block_window(Params const& p, int m) {
    if constexpr (!kWindows) {
      return 0;
    } else {
      if (p.window <= 0) return 0;
      int const last_row = min((m + 1) * kBlockM, p.seq_q) - 1;
      return max(0, detail::floor_div(last_row + p.diag_offset - p.window + kBlockN, kBlockN));
    }
  }
  CUTE_DEVICE static int n_block_max(Params const& p, int m) {
    if constexpr (!kCausal) {
      return p.num_n_blocks;
    } else {
      int const last_row = min((m + 1) * kBlockM, p.seq_q) - 1;
      return min(p.num_n_blocks, detail::floor_div(last_row + p.diag_offset, kBlockN) + 1);
    }
  }

  CUTE_DEVICE static void run(Params const& params, char* smem_raw) {
    using namespace detail;
    SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem_raw);
    int const warp = __shfl_sync(0xffffffff, int(threadIdx.x) / 32, 0);
    int const wg = warp / 4;
    int const lane = int(threadIdx.x) % 32;

    if (threadIdx.x == 0) {
      cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_o.get_tma_descriptor());
      CUTE_UNROLL
      for (int s = 0; s < kQStages; ++s) {
        cutlass::arch::ClusterBarrier::init(&ss.q_full[s], 1);
        cutlass::arch::ClusterBarrier::init(&ss.q_empty[s], kNumWG);
      }
      CUTE_UNROLL
      for (int s = 0; s < kStages; ++s) {
        cutlass::arch::ClusterBarrier::init(&ss.k_full[s], 1);
        cutlass::arch::ClusterBarrier::init(&ss.v_full[s], 1);
        cutlass::arch::ClusterBarrier::init(&ss.k_empty[s], kNumWG);
        cutlass::arch::ClusterBarrier::init(&ss.v_empty[s], kNumWG);
      }
      cutlass::arch::fence_barrier_init();
    }
    __syncthreads();

    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), SmemLayoutQ{});  // (64, D, stage*WG)
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), SmemLayoutK{});  // (N, D, stage)
    Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), SmemLayoutV{});  // (D, N, stage)
    // O staging (64, D, slab): its own buffer, or the Q slabs (kOAliasQ: the tile's Q stage).
    Tensor sO = make_tensor(make_smem_ptr(kOAliasQ ? ss.q.data() : ss.o.data()), SmemLayoutOStage{});

    if (wg == 0) {
      // ---------------------------------------------------------------- producer
      cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
      if (warp != 0) return;
      PipeState qw, kw, vw;
      int tile = int(blockIdx.x);
      Tensor mQ = params.tma_q.get_tma_tensor(make_shape(params.seq_q, int(D), params.heads, params.batch));
      Tensor mK = params.tma_k.get_tma_tensor(make_shape(params.seq_k, int(D), params.kv_heads, params.batch));
      Tensor mVt = params.tma_v.get_tma_tensor(make_shape(int(D), params.seq_k, params.kv_heads, params.batch));
      auto cta_q = params.tma_q.get_slice(0);
      auto cta_k = params.tma_k.get_slice(0);
      auto cta_v = params.tma_v.get_slice(0);
      Tensor tQsQ = group_modes<0, 3>(cta_q.partition_D(sQ));  // (TMA, stage*WG)
      Tensor tKsK = group_modes<0, 3>(cta_k.partition_D(sK));  // (TMA, stage)
      Tensor tVsV = group_modes<0, 3>(cta_v.partition_D(sV));  // (TMA, stage)

      while (tile < params.total_tiles) {
        TileCoord const c = tile_coord(params, tile);
        int const n_max = n_block_max(params, c.m);
        int const n_min = n_block_min(params, c.m);
        if (n_max > n_min) {
          int const hk = c.h / params.group;
          Tensor gQ = local_tile(mQ(_, _, c.h, c.b), Shape<_64, Int<D>>{}, make_coord(_, 0));
          Tensor gK = local_tile(mK(_, _, hk, c.b), Shape<Int<kBlockN>, Int<D>>{}, make_coord(_, 0));
          Tensor gV = local_tile(mVt(_, _, hk, c.b), Shape<Int<D>, Int<kBlockN>>{}, make_coord(0, _));
          Tensor tQgQ = group_modes<0, 3>(cta_q.partition_S(gQ));  // (TMA, 64-row block)
          Tensor tKgK = group_modes<0, 3>(cta_k.partition_S(gK));  // (TMA, key block)
          Tensor tVgV = group_modes<0, 3>(cta_v.partition_S(gV));  // (TMA, key block)
          auto load_k = [&](int n) {
            if (lane == 0) {
              cutlass::arch::ClusterBarrier::wait(&ss.k_empty[kw.index], kw.phase ^ 1u);
              cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.k_full[kw.index], kBytesK);
              copy(params.tma_k.with(ss.k_full[kw.index], 0, TMA::CacheHintSm90::EVICT_LAST), tKgK(_, n),
                   tKsK(_, kw.index));
            }
            kw.template advance<kStages>();
          };
          auto load_v = [&](int n) {
            if (lane == 0) {
              cutlass::arch::ClusterBarrier::wait(&ss.v_empty[vw.index], vw.phase ^ 1u);
              cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.v_full[vw.index], kBytesV);
              copy(params.tma_v.with(ss.v_full[vw.index], 0, TMA::CacheHintSm90::EVICT_LAST), tVgV(_, n),
                   tVsV(_, vw.index));
            }
            vw.template advance<kStages>();
          };
          // The tile's Q first, then its first key block: Q's slot frees at the end of the tile
          // before last (two Q stages), K's only as this tile's blocks are consumed; 0.6-1% faster
          // than K first (H200, bench/results/attention-nvidia-h200-2026-11-27-qfirst.json).
          if (lane == 0) {
            cutlass::arch::ClusterBarrier::wait(&ss.q_empty[qw.index], qw.phase ^ 1u);
            cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.q_full[qw.index], kBytesQ);
            CUTE_UNROLL
            for (int w = 0; w < kNumWG; ++w) {
              copy(params.tma_q.with(ss.q_full[qw.index], 0, TMA::CacheHintSm90::EVICT_FIRST),
                   tQgQ(_, c.m * kNumWG + w), tQsQ(_, qw.index * kNumWG + w));
            }
          }
          qw.template advance<kQStages>();
          load_k(n_max - 1);
          // Consumers use K(n-1) before V(n): keep that order in the ring.
          for (int n = n_max - 2; n >= n_min; --n) {
            load_k(n);
            load_v(n + 1);
          }
          load_v(n_min);
        }
        if constexpr (kDynamic) {
          int next = 0;
          if (lane == 0) next = atomicAdd(params.tile_counter, 1) + int(gridDim.x);
          next = __shfl_sync(0xffffffff, next, 0);
          named_sync(kBarTileEmpty, kProducerSyncThreads);
          if (lane == 0) ss.next_tile = next;
          named_arrive(kBarTileFull, kProducerSyncThreads);
          tile = next;
        } else {
          tile += int(gridDim.x);
        }
      }
    } else {
      // ---------------------------------------------------------------- consumers
      cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
      int const cwg = wg - 1;
      int const tid = int(threadIdx.x) % 128;
      MmaQK mma_qk;
      MmaPV mma_pv;
      auto thr_qk = mma_qk.get_thread_slice(tid);
      auto thr_pv = mma_pv.get_thread_slice(tid);
      Tensor tSrK = thr_qk.partition_fragment_B(sK);             // (MMA, N, K, stage)
      Tensor tOrV = thr_pv.partition_fragment_B(sV);             // (MMA, D, K, stage)
      // Coordinates of this thread's accumulator elements.
      Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<_64, Int<kBlockN>>{}));
      Tensor tScS_rc = make_tensor(tScS.data(), acc_rowcol(tScS.layout()));
      Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<_64, Int<D>>{}));
      Tensor tOcO_rc = make_tensor(tOcO.data(), acc_rowcol(tOcO.layout()));
      static_assert(decltype(size<0>(tScS_rc))::value == kRows, "two rows per thread");

      float const scale_log2 = params.scale_log2;
      PipeState qr, kr, vr;

      if constexpr (kDynamic) named_arrive(kBarTileEmpty, kProducerSyncThreads);

      auto release = [&](uint64_t* bar) { mbar_arrive_if(bar, tid == 0); };

      // kOAliasQ with several Q stages: the Q stage whose staged O is still being stored; released
      // to the producer after the next tile's first QK^T (the store is long done by then), so
      // the next Q loads are not held up behind this tile's epilogue.
      int q_pending = -1;
      auto release_q_pending = [&]() {
        if constexpr (kOAliasQ && kQStages > 1) {
          if (q_pending >= 0) {
            if (tid == 0) {
              tma_store_wait<0>();  // the previous tile's O has left its Q stage
              cutlass::arch::ClusterBarrier::arrive(&ss.q_empty[q_pending]);
            }
            q_pending = -1;
          }
        }
      };

      // The running tile's accumulator and online-softmax state.
      Tensor tOrO = partition_fragment_C(mma_pv, Shape<_64, Int<D>>{});
      float row_max[kRows], row_sum[kRows];

      // Masks: key tail (cols >= seq_k), causal (col > row + diag_offset) and, with a sliding
      // window, the keys below it (col <= row + diag_offset - window). row0: the warpgroup's first
      // query row.
      // A thread's columns are its first column plus offsets that are the same for every thread
      // (thread 0's): compared as immediates, they hold no registers across the loop.
      Tensor tScS0 = mma_qk.get_thread_slice(0).partition_C(make_identity_tensor(Shape<_64, Int<kBlockN>>{}));
      Tensor tScS0_rc = make_tensor(tScS0.data(), acc_rowcol(tScS0.layout()));
      int const col_first = int(get<1>(tScS_rc(0, 0)));
      auto apply_mask = [&](auto& tSrS, int n, int row0, auto causal_tag, auto tail_tag) {
        constexpr bool kMaskCausal = decltype(causal_tag)::value;
        constexpr bool kMaskTail = decltype(tail_tag)::value;
        Tensor s = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));
        int const col0 = n * kBlockN + col_first;
        // limit and lower are relative to the thread's first column, like the offsets compared
        // with them (0 to kBlockN - 1): kBlockN and -kBlockN bound nothing.
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          int limit = kMaskTail ? params.seq_k - col0 : kBlockN;
          int lower = -kBlockN;
          if constexpr (kMaskCausal) {
            int const row = row0 + int(get<0>(tScS_rc(r, 0)));
            limit = min(limit, row + params.diag_offset + 1 - col0);
            if (params.window > 0) lower = row + params.diag_offset + 1 - params.window - col0;
          }
          CUTE_UNROLL
          for (int j = 0; j < kCols; ++j) {
            int const col = int(get<1>(tScS0_rc(r, j)));  // a constant
            if (col >= limit || col < lower) s(r, j) = -INFINITY;
          }
        }
      };

      // Online softmax on this block's scores: P = exp2(S*scale_log2 - max*scale_log2).
      // Returns the factor by which O (and the running sum) must be rescaled.
      auto softmax = [&](auto& tSrS, auto first_tag, auto check_inf_tag, float* o_scale) {
        constexpr bool kFirst = decltype(first_tag)::value;
        constexpr bool kCheckInf = decltype(check_inf_tag)::value;
        Tensor s = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));
        // Phase 1: row maxima (both rows, then the quad shuffles), rescale factors.
        float mx[kRows], max_scaled[kRows];
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          mx[r] = kFirst ? -INFINITY : row_max[r];
          CUTE_UNROLL
          for (int j = 0; j < kCols; ++j) mx[r] = fmaxf(mx[r], s(r, j));
        }
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 1));
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 2));
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          float const cur = (kCheckInf && mx[r] == -INFINITY) ? 0.f : mx[r];
          o_scale[r] = kFirst ? 1.f : fast_exp2((row_max[r] - cur) * scale_log2);
          row_max[r] = mx[r];
          max_scaled[r] = cur * scale_log2;
        }
        // Phase 2: P = exp2(S*scale_log2 - max*scale_log2) and the running row sums.
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          float sum = 0.f;
          CUTE_UNROLL
          for (int j = 0; j < kCols; ++j) {
            float const p = fast_exp2(fmaf(s(r, j), scale_log2, -max_scaled[r]));
            s(r, j) = p;
            sum += p;
          }
          row_sum[r] = kFirst ? sum : fmaf(row_sum[r], o_scale[r], sum);
        }
      };

      auto rescale_o = [&](float const* o_scale) {
        Tensor o = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          CUTE_UNROLL
          for (int j = 0; j < size<1>(o); ++j) o(r, j) *= o_scale[r];
        }
      };

      // The finished tile's rows: the factor 1/rowsum for O and the LSE (rows that see no key:
      // 0 and -inf). Shuffles only: may run while a wgmma is in flight.
      auto finish_rows = [&](float* o_final, float* lse_rows) {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          float s = row_sum[r];
          s += __shfl_xor_sync(0xffffffff, s, 1);
          s += __shfl_xor_sync(0xffffffff, s, 2);
          bool const empty = (s == 0.f || s != s);
          o_final[r] = empty ? 0.f : 1.f / s;
          lse_rows[r] = empty ? -INFINITY : row_max[r] * params.scale + __logf(s);
        }
      };

      Tensor tSrS0 = partition_fragment_C(mma_qk, Shape<_64, Int<kBlockN>>{});
      auto const p_layout = acc_as_operand_a(tSrS0.layout());
      Tensor tOrP0 = make_tensor<Element>(p_layout);  // P as the A operand of PV
      auto to_p = [&](auto const& tSrS, auto& tOrP) {
        float const* src = raw_pointer_cast(tSrS.data());
        uint32_t* dst = reinterpret_cast<uint32_t*>(raw_pointer_cast(tOrP.data()));
        CUTE_UNROLL
        for (int i = 0; i < int(size(tSrS)) / 2; ++i) dst[i] = pack2<Element>(src[2 * i], src[2 * i + 1]);
      };
      float o_scale[kRows];

      // Step n: QK^T(n) and PV(n+1) issued together; softmax(n) after QK^T(n) completes, then the
      // wait for PV(n+1). tSrQ: the tile's Q (descriptors), row0: the warpgroup's first row.
      auto step = [&](auto const& tSrQ, int n, int row0, auto masked_tag) {
        constexpr bool kMasked = decltype(masked_tag)::value;
        Tensor tSrS = partition_fragment_C(mma_qk, Shape<_64, Int<kBlockN>>{});
        cutlass::arch::ClusterBarrier::wait(&ss.k_full[kr.index], kr.phase);
        wg_gemm<true, -1, kQkKBlocks>(mma_qk, tSrQ, tSrK(_, _, _, kr.index), tSrS);
        cutlass::arch::ClusterBarrier::wait(&ss.v_full[vr.index], vr.phase);
        wg_gemm<false, -1>(mma_pv, tOrP0, tOrV(_, _, _, vr.index), tOrO);
        warpgroup_wait<1>();  // S ready; PV still running
        warpgroup_fence_operand(tSrS);
        release(&ss.k_empty[kr.index]);
        kr.template advance<kStages>();
        if constexpr (kMasked) apply_mask(tSrS, n, row0, cute::true_type{}, cute::false_type{});
        softmax(tSrS, cute::false_type{}, cute::bool_constant<kMasked>{}, o_scale);
        // ptxas hoists this wait into the softmax (36-72 instructions after the QK^T wait) to
        // pack P early.
        warpgroup_wait<0>();  // PV done: P and V free
        warpgroup_fence_operand(tOrO);
        warpgroup_fence_operand(tOrP0);
        release(&ss.v_empty[vr.index]);
        vr.template advance<kStages>();
        to_p(tSrS, tOrP0);
        rescale_o(o_scale);
      };
      // The key blocks of a tile after its first one, n = n_max - 2 down to n_min, through `step`.
      auto steps = [&](auto const& tSrQ, TileCoord const& c, int n_max, int n_min, int row0) {
        int n = n_max - 2;
        auto run = [&](int n_end, auto masked_tag) {
          CUTE_NO_UNROLL
          for (; n >= n_end; --n) step(tSrQ, n, row0, masked_tag);
        };
        if constexpr (kCausal) {
          // Blocks n >= n_mask cross the diagonal for some row of the tile. Sliding window: blocks
          // n_min <= n < n_win cross its lower edge; the blocks between are not masked.
          int const n_mask = max(n_min, floor_div(c.m * kBlockM + params.diag_offset + 1, kBlockN));
          int const n_win = max(n_min, n_block_window(params, c.m));
          run(n_mask, cute::true_type{});
          run(n_win, cute::false_type{});
          run(n_min, cute::true_type{});
        } else {
          run(0, cute::false_type{});
        }
      };

      // The next tile: from the producer (dynamic schedule) or by stride.
      auto next_tile_after = [&](int tile) {
        if constexpr (kDynamic) {
          named_sync(kBarTileFull, kProducerSyncThreads);
          int const next = ss.next_tile;
          named_arrive(kBarTileEmpty, kProducerSyncThreads);
          return next;
        } else {
          return tile + int(gridDim.x);
        }
      };

      // Epilogue of a finished tile whose O (tOrO) is normalized: LSE, then O through shared
      // memory (stmatrix) and one TMA store per warpgroup; rows that see no key get O = 0.
      auto epilogue = [&](TileCoord const& c, int row0, int q_stage, bool has_keys, float const* lse_rows) {
        if (params.lse != nullptr && (tid % 4) == 0) {
          float* lse = params.lse + int64_t(c.b) * params.lse_batch_stride + int64_t(c.h) * params.lse_head_stride;
          CUTE_UNROLL
          for (int r = 0; r < kRows; ++r) {
            int const row = row0 + int(get<0>(tOcO_rc(r, 0)));
            if (row < params.seq_q) lse[row] = lse_rows[r];
          }
        }
        if (!has_keys) {
          // Rows that see no key: O = 0, written directly (no Q stage is held for this tile).
          Element* o = params.o + int64_t(c.b) * params.o_batch_stride + int64_t(c.h) * params.o_head_stride;
          for (int i = tid; i < 64 * (kHeadDim / 8); i += 128) {
            int const row = row0 + i / (kHeadDim / 8);
            if (row < params.seq_q) {
              *reinterpret_cast<uint4*>(o + int64_t(row) * params.o_seq_stride + (i % (kHeadDim / 8)) * 8) = make_uint4(0, 0, 0, 0);
            }
          }
          return;
        }
        int const slab = kOAliasQ ? q_stage * kNumWG + cwg : cwg;  // kOAliasQ: this WG's Q slab
        Tensor tOrOe = make_tensor<Element>(tOrO.layout());
        {
          float const* src = raw_pointer_cast(tOrO.data());
          uint32_t* dst = reinterpret_cast<uint32_t*>(raw_pointer_cast(tOrOe.data()));
          CUTE_UNROLL
          for (int i = 0; i < int(size(tOrO)) / 2; ++i) dst[i] = pack2<Element>(src[2 * i], src[2 * i + 1]);
        }
        if constexpr (!kOAliasQ) {
          if (tid == 0) tma_store_wait<0>();  // the previous tile's store has read sO
        }
        named_sync(kBarEpilogue0 + cwg, 128);
        auto r2s = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_pv);
        auto thr_r2s = r2s.get_thread_slice(tid);
        Tensor src = thr_r2s.retile_S(tOrOe);
        Tensor dst = thr_r2s.partition_D(sO(_, _, slab));
        copy(r2s, src, dst);
        cutlass::arch::fence_view_async_shared();
        named_sync(kBarEpilogue0 + cwg, 128);
        if (tid == 0) {
          Tensor mO = params.tma_o.get_tma_tensor(make_shape(params.seq_q, int(D), params.heads, params.batch));
          Tensor gO = local_tile(mO(_, _, c.h, c.b), Shape<_64, Int<D>>{}, make_coord(_, 0));
          auto cta_o = params.tma_o.get_slice(0);
          Tensor tOsO = group_modes<0, 3>(cta_o.partition_S(sO));  // (TMA, slab)
          Tensor tOgO = group_modes<0, 3>(cta_o.partition_D(gO));  // (TMA, 64-row block)
          copy(params.tma_o, tOsO(_, slab), tOgO(_, c.m * kNumWG + cwg));
          tma_store_arrive();
          if constexpr (kOAliasQ && kQStages == 1) {
            tma_store_wait<0>();  // O has left the Q slab: the next Q may land there
            cutlass::arch::ClusterBarrier::arrive(&ss.q_empty[0]);
          }
        }
        if constexpr (kOAliasQ && kQStages > 1) q_pending = q_stage;
      };

      int tile = int(blockIdx.x);
      while (tile < params.total_tiles) {
        TileCoord const c = tile_coord(params, tile);
        int const n_max = n_block_max(params, c.m);
        int const n_min = n_block_min(params, c.m);
        int q_stage = 0;  // this tile's Q stage (O is staged there with kOAliasQ)
        int const row0 = c.m * kBlockM + cwg * 64;  // first query row of this warpgroup
        float lse_rows[kRows];

        if (n_max > n_min) {
          cutlass::arch::ClusterBarrier::wait(&ss.q_full[qr.index], qr.phase);
          Tensor tSrQ = thr_qk.partition_fragment_A(sQ(_, _, qr.index * kNumWG + cwg));  // descriptors

          // First (right-most) key block: always masked (tail and/or diagonal).
          {
            int const n = n_max - 1;
            cutlass::arch::ClusterBarrier::wait(&ss.k_full[kr.index], kr.phase);
            wg_gemm<true, 0, kQkKBlocks>(mma_qk, tSrQ, tSrK(_, _, _, kr.index), tSrS0);
            release(&ss.k_empty[kr.index]);
            kr.template advance<kStages>();
            release_q_pending();
            if constexpr (kCausal) {
              apply_mask(tSrS0, n, row0, cute::true_type{}, cute::true_type{});
            } else {
              if (params.seq_k % kBlockN != 0) apply_mask(tSrS0, n, row0, cute::false_type{}, cute::true_type{});
            }
            softmax(tSrS0, cute::true_type{}, cute::true_type{}, o_scale);
            to_p(tSrS0, tOrP0);
            clear(tOrO);
          }

          steps(tSrQ, c, n_max, n_min, row0);

          // The last QK^T of this tile is done: its Q stage may be refilled (with kOAliasQ only
          // once the O staged there has been stored).
          if constexpr (!kOAliasQ) release(&ss.q_empty[qr.index]);
          q_stage = qr.index;
          qr.template advance<kQStages>();
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          cutlass::arch::ClusterBarrier::wait(&ss.v_full[vr.index], vr.phase);
          wg_gemm<false, -1>(mma_pv, tOrP0, tOrV(_, _, _, vr.index), tOrO);
          finish_rows(o_scale, lse_rows);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          release(&ss.v_empty[vr.index]);
          vr.template advance<kStages>();
          rescale_o(o_scale);
        } else {
          clear(tOrO);
          CUTE_UNROLL
          for (int r = 0; r < kRows; ++r) lse_rows[r] = -INFINITY;
        }

        int const next_tile = next_tile_after(tile);
        epilogue(c, row0, q_stage, n_max > n_min, lse_rows);
        tile = next_tile;
      }
      if (tid == 0) tma_store_wait<0>();
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, Kernel::kCtasPerSm)
    fmha_sm90_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char smem_raw[];
  char* smem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  Kernel::run(params, smem);
#endif
}

// Which kernel a Config builds, for the shared C entry (attention_entry.cuh): the kernel class,
// its __global__ function and the precision of its products. fmha_f32_sm90.cuh specializes it
// for F32Config.
template <class Cfg>
struct KernelOf;

template <class E, int D, int M, int N, int S, bool C, bool DS, bool PE, int QS, int L2, int TO, bool OA, int TD>
struct KernelOf<Config<E, D, M, N, S, C, DS, PE, QS, L2, TO, OA, TD>> {
  using type = Sm90Fmha<Config<E, D, M, N, S, C, DS, PE, QS, L2, TO, OA, TD>>;
  static constexpr auto function() { return &fmha_sm90_kernel<type>; }
  static constexpr const char* precision() { return "native"; }
};

}  // namespace fact::attention
