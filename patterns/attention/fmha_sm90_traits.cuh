// What a Config fixes for the attention kernel (fmha_sm90.cuh) before any code runs: warpgroup
// counts and register budgets, the warpgroup MMAs, the shared-memory layouts and storage, the
// TMA copy types and the kernel's Params. Every part of the kernel (mainloop, softmax, mask,
// epilogue, tile scheduler) reads its sizes from here.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/atom/copy_traits_sm90_tma.hpp"
#include "cute/atom/mma_traits_sm90_gmma.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/collective/builders/sm90_common.inl"
#include "patterns/attention/fmha_sm90_config.cuh"
#include "patterns/attention/fmha_sm90_shared_storage.cuh"
#include "patterns/attention/kernel_problem.cuh"

namespace fact::attention {

using namespace cute;

template <class Cfg>
struct Sm90FmhaTraits {
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
  static constexpr bool kKeyMask = Cfg::kKeyMask;
  static constexpr bool kDynamic = Cfg::kDynamicSchedule;
  static constexpr int kQStages = Cfg::kQStages;
  static constexpr bool kOAliasQ = Cfg::kOAliasQ;
  static constexpr int kTileOrder = Cfg::kTileOrder;
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
  // Every causal kernel takes a sliding window (the entry's can_implement).
  static constexpr bool kWindows = kCausal;

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

  using SharedStorage = FmhaSharedStorage<Element, int(cosize_v<SmemLayoutQ>), int(cosize_v<SmemLayoutK>),
                                          int(cosize_v<SmemLayoutV>), kOAliasQ ? 0 : int(cosize_v<SmemLayoutO>),
                                          kQStages, kStages>;
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
    uint8_t const* key_mask;  // kKeyMask: KernelProblem's key mask
    int64_t key_mask_batch_stride, key_mask_seq_stride;
    int key_mask_keep;
  };
};

}  // namespace fact::attention
