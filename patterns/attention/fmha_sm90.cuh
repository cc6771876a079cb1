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
// the diagonal (and the key-tail block); a kernel built for a key mask (a padding mask) masks
// every key block from one bit per column, loaded while the block's QK^T runs; a persistent grid walks tiles longest-first within
// L2-sized sections of (batch, head) pairs, statically or through an atomic counter.
// Tails in either sequence are handled by TMA bounds (zero fill on load, clipping on store) and
// masking; nothing is padded or refused.
//
// Template parameters (the tuner's space): element type, head dim, tile M (64 rows per consumer
// warpgroup), tile N, pipeline stages, causal, dynamic or static schedule, persistent grid, Q
// stages, L2 share, tile order, O staged in the Q buffer, padded tile head dim.
#pragma once
//
// Its parts, one header each:
//   fmha_sm90_config.cuh          Config: the template parameters (type choices only)
//   fmha_sm90_traits.cuh          what a Config fixes: MMAs, shared-memory layouts, TMA types, Params
//   fmha_sm90_shared_storage.cuh  the shared memory: Q/K/V rings, O staging, the mbarriers
//   fmha_sm90_barriers.cuh        named barrier ids, mbarrier arrive, ring positions
//   fmha_sm90_tile_scheduler.cuh  tile index -> (m block, head, batch), static or dynamic walk
//   fmha_sm90_key_blocks.cuh      the key blocks a tile sees and which of them need a mask
//   fmha_sm90_mainloop.cuh        the producer's TMA loads, the ring views, the warpgroup GEMM
//   fmha_sm90_mask.cuh            the key tail, causal diagonal and sliding-window mask
//   fmha_sm90_softmax.cuh         the online softmax (row maxima and sums, O rescale, LSE)
//   fmha_sm90_epilogue.cuh        LSE and O stores (stmatrix + TMA), O = 0 for rows with no key
//   fmha_sm90_fragments.cuh       accumulator views and float32 -> bf16/fp16 packing
// This file keeps the host-side Params and the kernel's orchestration: barrier set-up, the
// producer's and the consumers' walk over the tiles, and the consumers' pipelined step over the
// key blocks.

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cute/tensor.hpp"
#include "cute/arch/cluster_sm90.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "patterns/attention/fmha_sm90_barriers.cuh"
#include "patterns/attention/fmha_sm90_config.cuh"
#include "patterns/attention/fmha_sm90_epilogue.cuh"
#include "patterns/attention/fmha_sm90_fragments.cuh"
#include "patterns/attention/fmha_sm90_key_blocks.cuh"
#include "patterns/attention/fmha_sm90_mainloop.cuh"
#include "patterns/attention/fmha_sm90_mask.cuh"
#include "patterns/attention/fmha_sm90_softmax.cuh"
#include "patterns/attention/fmha_sm90_tile_scheduler.cuh"
#include "patterns/attention/fmha_sm90_traits.cuh"
#include "patterns/attention/kernel_problem.cuh"

namespace fact::attention {

using namespace cute;

// ------------------------------------------------------------------------------------------------
template <class Cfg>
struct Sm90Fmha : Sm90FmhaTraits<Cfg> {
  using Traits = Sm90FmhaTraits<Cfg>;
  using Element = typename Traits::Element;
  using Params = typename Traits::Params;
  using SharedStorage = typename Traits::SharedStorage;
  using Scheduler = TileScheduler<Traits>;
  using KBlocks = KeyBlocks<Traits>;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int D = Traits::D;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr bool kCausal = Traits::kCausal;
  static constexpr bool kKeyMask = Traits::kKeyMask;
  static constexpr bool kWindows = Traits::kWindows;
  static constexpr int kNumWG = Traits::kNumWG;
  static constexpr int kRows = Traits::kRows;
  static constexpr int kCols = Traits::kCols;
  static constexpr int kStages = Traits::kStages;
  static constexpr int kQStages = Traits::kQStages;
  static constexpr int kQkKBlocks = Traits::kQkKBlocks;
  static constexpr bool kOAliasQ = Traits::kOAliasQ;
  using MmaQK = typename Traits::MmaQK;
  using MmaPV = typename Traits::MmaPV;
  using SmemLayoutQ1 = typename Traits::SmemLayoutQ1;
  using SmemLayoutK = typename Traits::SmemLayoutK;
  using SmemLayoutV = typename Traits::SmemLayoutV;
  using SmemLayoutO1 = typename Traits::SmemLayoutO1;

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
                  p.o, p.o_stride[0], p.o_stride[1], p.o_stride[2],
                  p.key_mask, p.key_mask_stride[0], p.key_mask_stride[1], p.key_mask_keep ? 1 : 0};
  }

  // ----------------------------------------------------------------------------------------------
  // Device side.
  CUTE_DEVICE static void run(Params const& params, char* smem_raw) {
    SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem_raw);
    int const warp = __shfl_sync(0xffffffff, int(threadIdx.x) / 32, 0);
    int const wg = warp / 4;
    int const lane = int(threadIdx.x) % 32;

    if (threadIdx.x == 0) {
      cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_o.get_tma_descriptor());
      ss.init_barriers(kNumWG);
    }
    __syncthreads();

    if (wg == 0) {
      cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
      if (warp != 0) return;
      produce(params, ss, lane);
    } else {
      cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
      consume(params, ss, wg - 1);
    }
  }

  // The producer warp: every tile's Q, K and V through TMA; with the dynamic schedule it also
  // takes the next tile.
  CUTE_DEVICE static void produce(Params const& params, SharedStorage& ss, int lane) {
    detail::PipeState qw, kw, vw;
    int tile = Scheduler::first_tile();
    ProducerMainloop<Traits> mainloop{lane, qw, kw, vw};
    while (tile < params.total_tiles) {
      TileCoord const c = Scheduler::tile_coord(params, tile);
      int const n_max = KBlocks::n_block_max(params, c.m);
      int const n_min = KBlocks::n_block_min(params, c.m);
      if (n_max > n_min) mainloop.load_tile(params, ss, c, n_min, n_max);
      tile = Scheduler::producer_next_tile(params, ss.next_tile, tile, lane);
    }
  }

  // Consumer warpgroup cwg: its 64 rows of every tile. The warpgroup's state (MMAs, operands,
  // ring positions, O, P, softmax rows) lives here; the mask, the softmax and the epilogue work on
  // views of it. The pipelined step over the key blocks stays here as lambdas: moved into a
  // struct of its own it changed where ptxas places the loop's index arithmetic (KERNEL.md).
  CUTE_DEVICE static void consume(Params const& params, SharedStorage& ss, int const cwg) {
    using namespace detail;
    Tensor sQ = smem_q<Traits>(ss);  // (64, D, stage*WG)
    Tensor sK = smem_k<Traits>(ss);  // (N, D, stage)
    Tensor sV = smem_v<Traits>(ss);  // (D, N, stage)
    // O staging (64, D, slab): its own buffer, or the Q slabs (kOAliasQ: the tile's Q stage).
    Tensor sO = make_tensor(make_smem_ptr(kOAliasQ ? ss.q.data() : ss.o.data()), typename Traits::SmemLayoutOStage{});
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

    Scheduler::consumer_start();

    auto release = [&](uint64_t* bar) { mbar_arrive_if(bar, tid == 0); };

    // kOAliasQ with several Q stages: the Q stage whose staged O is still being stored; released
    // to the producer after the next tile's first QK^T (the store is long done by then), so
    // the next Q loads are not held up behind this tile's epilogue.
    int q_pending = -1;

    // The running tile's accumulator and online-softmax state.
    Tensor tOrO = partition_fragment_C(mma_pv, Shape<_64, Int<D>>{});
    float row_max[kRows], row_sum[kRows];

    // A thread's columns are its first column plus offsets that are the same for every thread
    // (thread 0's): compared as immediates, they hold no registers across the loop.
    Tensor tScS0 = mma_qk.get_thread_slice(0).partition_C(make_identity_tensor(Shape<_64, Int<kBlockN>>{}));
    Tensor tScS0_rc = make_tensor(tScS0.data(), acc_rowcol(tScS0.layout()));
    int const col_first = int(get<1>(tScS_rc(0, 0)));
    ScoreMask<Traits, decltype(tScS_rc)> const mask{params, tScS_rc, tScS0_rc, col_first};
    using KeyMaskT = KeyMask<Traits, decltype(tScS0_rc)>;
    KeyMaskT const key_mask{params, tScS0_rc};
    int tile_batch = 0;  // the running tile's batch entry (the key mask's row)
    OnlineSoftmax<Traits> softmax{row_max, row_sum, scale_log2};

    Tensor tSrS0 = partition_fragment_C(mma_qk, Shape<_64, Int<kBlockN>>{});
    auto const p_layout = acc_as_operand_a(tSrS0.layout());
    Tensor tOrP0 = make_tensor<Element>(p_layout);  // P as the A operand of PV
    float o_scale[kRows];

    // Step n: QK^T(n) and PV(n+1) issued together; softmax(n) after QK^T(n) completes, then the
    // wait for PV(n+1). tSrQ: the tile's Q (descriptors), row0: the warpgroup's first row.
    auto step = [&](auto const& tSrQ, int n, int row0, auto masked_tag) {
      constexpr bool kMasked = decltype(masked_tag)::value;
      Tensor tSrS = partition_fragment_C(mma_qk, Shape<_64, Int<kBlockN>>{});
      typename KeyMaskT::Bits key_bits{~0u, true};
      if constexpr (kKeyMask) key_bits = key_mask.load(n, tile_batch);  // its loads overlap the GEMMs
      cutlass::arch::ClusterBarrier::wait(&ss.k_full[kr.index], kr.phase);
      wg_gemm<true, -1, kQkKBlocks>(mma_qk, tSrQ, tSrK(_, _, _, kr.index), tSrS);
      cutlass::arch::ClusterBarrier::wait(&ss.v_full[vr.index], vr.phase);
      wg_gemm<false, -1>(mma_pv, tOrP0, tOrV(_, _, _, vr.index), tOrO);
      warpgroup_wait<1>();  // S ready; PV still running
      warpgroup_fence_operand(tSrS);
      release(&ss.k_empty[kr.index]);
      kr.template advance<kStages>();
      if constexpr (kKeyMask) {
        key_mask.apply(tSrS, key_bits);
      } else if constexpr (kMasked) {
        mask.template apply<true, false>(tSrS, n, row0);
      }
      softmax.template update<false, kMasked>(tSrS, o_scale);
      // ptxas hoists this wait into the softmax (36-72 instructions after the QK^T wait) to
      // pack P early.
      warpgroup_wait<0>();  // PV done: P and V free
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP0);
      release(&ss.v_empty[vr.index]);
      vr.template advance<kStages>();
      pack_accumulator<Element>(tSrS, tOrP0);
      softmax.rescale_o(tOrO, o_scale);
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
        int const n_win = max(n_min, KBlocks::n_block_window(params, c.m));
        run(n_mask, cute::true_type{});
        run(n_win, cute::false_type{});
        run(n_min, cute::true_type{});
      } else {
        // A key mask may hide every key of a block from a row: its softmax checks for -inf rows.
        run(0, std::integral_constant<bool, kKeyMask>{});
      }
    };

    Epilogue<Traits, decltype(sO), decltype(tOcO_rc)> epilogue{ss, sO, tOcO_rc, mma_pv, cwg, tid, q_pending};

    int tile = int(blockIdx.x);
    while (tile < params.total_tiles) {
      TileCoord const c = Scheduler::tile_coord(params, tile);
      int const n_max = KBlocks::n_block_max(params, c.m);
      int const n_min = KBlocks::n_block_min(params, c.m);
      int q_stage = 0;  // this tile's Q stage (O is staged there with kOAliasQ)
      int const row0 = c.m * kBlockM + cwg * 64;  // first query row of this warpgroup
      float lse_rows[kRows];
      tile_batch = c.b;

      if (n_max > n_min) {
        cutlass::arch::ClusterBarrier::wait(&ss.q_full[qr.index], qr.phase);
        Tensor tSrQ = thr_qk.partition_fragment_A(sQ(_, _, qr.index * kNumWG + cwg));  // descriptors

        // First (right-most) key block: always masked (tail and/or diagonal).
        {
          int const n = n_max - 1;
          typename KeyMaskT::Bits key_bits{~0u, true};
          if constexpr (kKeyMask) key_bits = key_mask.load(n, c.b);
          cutlass::arch::ClusterBarrier::wait(&ss.k_full[kr.index], kr.phase);
          wg_gemm<true, 0, kQkKBlocks>(mma_qk, tSrQ, tSrK(_, _, _, kr.index), tSrS0);
          release(&ss.k_empty[kr.index]);
          kr.template advance<kStages>();
          epilogue.release_q_pending();
          if constexpr (kCausal) {
            mask.template apply<true, true>(tSrS0, n, row0);
          } else if constexpr (kKeyMask) {
            key_mask.apply(tSrS0, key_bits);  // hides the key tail too
          } else {
            if (params.seq_k % kBlockN != 0) mask.template apply<false, true>(tSrS0, n, row0);
          }
          softmax.template update<true, true>(tSrS0, o_scale);
          pack_accumulator<Element>(tSrS0, tOrP0);
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
        softmax.finish_rows(params.scale, o_scale, lse_rows);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrO);
        release(&ss.v_empty[vr.index]);
        vr.template advance<kStages>();
        softmax.rescale_o(tOrO, o_scale);
      } else {
        clear(tOrO);
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) lse_rows[r] = -INFINITY;
      }

      int const next_tile = Scheduler::consumer_next_tile(ss.next_tile, tile);
      epilogue.store(params, c, row0, q_stage, n_max > n_min, lse_rows, tOrO);
      tile = next_tile;
    }
    epilogue.drain();
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

template <class E, int D, int M, int N, int S, bool C, bool DS, bool PE, int QS, int L2, int TO, bool OA, int TD,
          bool KM>
struct KernelOf<Config<E, D, M, N, S, C, DS, PE, QS, L2, TO, OA, TD, KM>> {
  using type = Sm90Fmha<Config<E, D, M, N, S, C, DS, PE, QS, L2, TO, OA, TD, KM>>;
  static constexpr auto function() { return &fmha_sm90_kernel<type>; }
  static constexpr const char* precision() { return "native"; }
};

}  // namespace fact::attention
