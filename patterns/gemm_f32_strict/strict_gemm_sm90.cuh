// Strict-float32 GEMM for Hopper (sm_90a): 3xTF32 split-operand products on wgmma tensor cores,
// with the float32 -> (hi, lo) TF32 split done inside the kernel.
//
//   D[l] = Chain(A[l] · B[l]), float32 in and out, D row-major, where Chain is an epilogue chain
//   of patterns/gemm/gemm_epilogue.cuh (alpha, then bias / activation / beta * C / * C in the
//   spec's order; strict_epilogue.cuh).
//
// Design (bench/strict_f32_notes.md has the numbers behind it):
//   - CUTLASS's warp-specialized cooperative persistent kernel (GemmUniversal with
//     KernelTmaWarpSpecializedCooperative) runs FACT's own collective mainloop,
//     Tf32x3Mainloop below; the epilogue and tile schedulers (persistent, stream-K) are
//     CUTLASS's.
//   - Producer warp: TMA loads the float32 A and B tiles unchanged (the TMA element type is
//     float32, not tf32: a tf32 tensor map would round the bits the lo parts need).
//   - Register operand ("A" of wgmma): each consumer warpgroup copies its rows of the A tile
//     from shared memory to registers and splits every value there:
//     hi = cvt.rna.tf32(x), lo = cvt.rna.tf32(x - hi).
//   - Shared-memory operand ("B" of wgmma, must be K-major for TF32): once per k-tile the two
//     consumer warpgroups split the B tile in place (hi, rounded to nearest) and write lo into a
//     second buffer of the same layout, each warpgroup half of the tile; a per-stage mbarrier
//     ("split ready") tells both warpgroups when the whole tile is split. The split of tile k+1
//     runs while the wgmmas of tile k are in flight.
//   - Per 8-deep k-block: wgmma(A_lo, B_hi) + wgmma(A_hi, B_lo) + wgmma(A_hi, B_hi), small
//     terms first.
//   - One TF32 product (the Products = 1 template argument, precision "tf32"): A is rounded to
//     TF32 in registers, B is read by wgmma as TMA stored it (the tensor cores ignore its low 13
//     bits), one wgmma per k-block; no split pass, no lo buffers, so more pipeline stages fit.
//     This is how FACT runs TF32 GEMMs whose layouts the CUTLASS TF32 kernels refuse (row-major
//     B: `x @ W`).
//   - Two-level accumulation: wgmma's float32 accumulation truncates (measured on an H200:
//     relative error growing as ~7e-9 x K with one accumulator, 2.9e-5 at K = 4096 and 3.7e-3
//     at K = 524288), so each warpgroup accumulates one k-tile of one 64 x 64 block in a
//     `partial` register fragment and adds it to the float32 accumulators with a rounded FADD.
//     With 2 x 2 such blocks per warpgroup the partial costs 32 registers, not 128; the other
//     warpgroup keeps the tensor cores busy while one waits for its block and folds it in.
//
// Epilogue: the chain's links read their constants and operands from FactGemmArgs::steps (ABI v2).
//
// Layouts: wgmma reads TF32 shared-memory operands K-major only, so B (the shared-memory
// operand) must be K-major; A may be either. Sm90StrictGemm maps the FACT problem onto that:
// B column-major runs as is; A row-major with B row-major runs transposed (D^T = B^T · A^T,
// the register operand is then B^T, MN-major). A column-major with B row-major has no K-major
// operand: Sm90StagedTransposeGemm (strict_staged_transpose.cuh) copies one operand transposed
// into the workspace first and runs the Sm90StrictGemm of the resulting layouts.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/arch/barrier.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "fact/runtime/fact_abi.h"
#include "patterns/gemm/gemm_prepared_launch.cuh"
#include "patterns/gemm_f32_strict/strict_epilogue.cuh"

namespace fact::strict {

// ------------------------------------------------------------------------------------------
// Split helpers.

// Round-to-nearest (ties away) float32 -> TF32, returned as float32 bits with the low 13
// mantissa bits zero.
CUTLASS_DEVICE uint32_t round_to_tf32(float x) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
  return bits;
}

// x = hi + lo (+ an error below 2^-22 |x|), both TF32.
CUTLASS_DEVICE void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = round_to_tf32(x);
  lo = round_to_tf32(x - __uint_as_float(hi));
}

// ------------------------------------------------------------------------------------------
// Pipeline: CUTLASS's TMA pipeline plus one "split ready" mbarrier per stage, completed when
// every consumer warp has written its part of that stage's B split.

template <int Stages_, int ConsumerWarps>
class SplitPipeline : public cutlass::PipelineTmaAsync<Stages_> {
 public:
  using Base = cutlass::PipelineTmaAsync<Stages_>;
  static constexpr uint32_t Stages = Stages_;
  using Params = typename Base::Params;

  struct SharedStorage {
    typename Base::SharedStorage base;
    cutlass::arch::ClusterBarrier split_ready[Stages_];
  };

  template <class ClusterShape>
  CUTLASS_DEVICE SplitPipeline(SharedStorage& storage, Params params, ClusterShape cluster_shape)
      : Base(storage.base, params, cluster_shape), split_ready_(&storage.split_ready[0]) {
    if (cutlass::canonical_warp_idx_sync() == params.initializing_warp && cute::elect_one_sync()) {
      CUTLASS_PRAGMA_UNROLL
      for (int stage = 0; stage < Stages_; ++stage) split_ready_[stage].init(ConsumerWarps);
    }
    cutlass::arch::fence_barrier_init();
  }

  // Called by every thread of every consumer warp after its split stores to `stage`.
  CUTLASS_DEVICE void split_arrive(int stage) {
    cutlass::arch::fence_view_async_shared();  // generic-proxy stores -> wgmma (async proxy)
    __syncwarp();
    if (cute::elect_one_sync()) split_ready_[stage].arrive();
  }

  CUTLASS_DEVICE void split_wait(int stage, uint32_t phase) { split_ready_[stage].wait(phase); }

 private:
  cutlass::arch::ClusterBarrier* split_ready_;
};

// ------------------------------------------------------------------------------------------
// Dispatch policy: selects CUTLASS's cooperative warp-specialized kernel for the collective.

// Products_: 3 = split-operand 3xTF32 (float32-accurate, precision "strict"); 1 = one TF32
// product per k-step (precision "tf32"): A rounded to TF32 in registers, B read by wgmma as
// stored (its low 13 bits ignored), no split pass and no lo buffers.
template <int Stages_, class ClusterShape_, int Products_ = 3>
struct MainloopSm90Tf32x3 {
  static constexpr int Stages = Stages_;
  static constexpr int Products = Products_;
  static_assert(Products_ == 3 || Products_ == 1, "3xTF32 or one TF32 product");
  using ClusterShape = ClusterShape_;
  using ArchTag = cutlass::arch::Sm90;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
};

// ------------------------------------------------------------------------------------------
// The collective mainloop. TileShape = Shape<BLK_M, BLK_N, _32>; StrideA: (M, K, L) with either
// mode unit-stride; StrideB: (N, K, L), K unit-stride.

template <class DispatchPolicy_, class TileShape_, class StrideA_, class StrideB_>
struct Tf32x3Mainloop {
  using DispatchPolicy = DispatchPolicy_;
  using TileShape = TileShape_;
  using ElementA = float;
  using ElementB = float;
  using StrideA = StrideA_;
  using StrideB = StrideB_;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using ArchTag = typename DispatchPolicy::ArchTag;
  static constexpr int Stages = DispatchPolicy::Stages;
  static constexpr int kProducts = DispatchPolicy::Products;
  static constexpr bool kSplit = kProducts == 3;  // hi/lo parts of both operands

  static_assert(cute::size(ClusterShape{}) == 1, "clusters are not used by this mainloop");
  static_assert(cutlass::gemm::detail::is_k_major<StrideB>(),
                "the shared-memory operand B must be K-major for TF32 wgmma");
  static constexpr bool kAIsKMajor = cutlass::gemm::detail::is_k_major<StrideA>();
  static constexpr int kBlockM = cute::size<0>(TileShape{});
  static constexpr int kBlockN = cute::size<1>(TileShape{});
  static constexpr int kBlockK = cute::size<2>(TileShape{});
  static_assert(kBlockK == 32, "one 128-byte swizzle row of float32 per k-tile");
  static_assert(kBlockM % 128 == 0, "two consumer warpgroups of 64-row wgmmas");

  // wgmma m64n64k8, A from registers, B from shared memory; two warpgroups along M. Each
  // warpgroup owns (BLK_M / 128) x (BLK_N / 64) blocks of 64 x 64 accumulators.
  using AtomMma = cute::SM90_64x64x8_F32TF32TF32_RS_TN<>;
  using TiledMma = decltype(cute::make_tiled_mma(AtomMma{}, cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));
  using ElementAccumulator = float;
  static constexpr int kConsumerThreads = cute::size(TiledMma{});
  static_assert(kConsumerThreads == 256);

  using SmemLayoutAtomA = std::conditional_t<kAIsKMajor, cute::GMMA::Layout_K_SW128_Atom<float>,
                                             cute::GMMA::Layout_MN_SW128_Atom<float>>;
  using SmemLayoutAtomB = cute::GMMA::Layout_K_SW128_Atom<float>;
  using SmemLayoutA = decltype(cute::tile_to_shape(
      SmemLayoutAtomA{},
      cute::make_shape(cute::Int<kBlockM>{}, cute::Int<kBlockK>{}, cute::Int<Stages>{}),
      std::conditional_t<kAIsKMajor, cute::Step<cute::_1, cute::_2, cute::_3>,
                         cute::Step<cute::_2, cute::_1, cute::_3>>{}));
  using SmemLayoutB = decltype(cute::tile_to_shape(
      SmemLayoutAtomB{},
      cute::make_shape(cute::Int<kBlockN>{}, cute::Int<kBlockK>{}, cute::Int<Stages>{}),
      cute::Step<cute::_1, cute::_2, cute::_3>{}));
  static constexpr int kBStageElements = kBlockN * kBlockK;
  static_assert(cute::cosize_v<SmemLayoutB> == kBStageElements * Stages);

  // Shared memory -> registers for the A operand: ldmatrix when K-major (one 16 x 8 TF32 block
  // per 8x8-b16 matrix quad), element-wise loads otherwise.
  using SmemCopyAtomA =
      std::conditional_t<kAIsKMajor, cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, cute::tfloat32_t>,
                         cute::Copy_Atom<cute::AutoVectorizingCopy, cute::tfloat32_t>>;

  using MainloopPipeline = SplitPipeline<Stages, kConsumerThreads / 32>;
  using PipelineState = cutlass::PipelineState<Stages>;
  using PipelineStorage = typename MainloopPipeline::SharedStorage;
  static constexpr int NumProducerThreadEvents = 1;

  struct SplitTensorStorage : cute::aligned_struct<1024, cute::_0> {
    cute::array_aligned<float, cute::cosize_v<SmemLayoutA>, 1024> smem_A;
    cute::array_aligned<float, cute::cosize_v<SmemLayoutB>, 1024> smem_B;     // raw, then hi
    cute::array_aligned<float, cute::cosize_v<SmemLayoutB>, 1024> smem_B_lo;  // lo parts
  };
  struct PlainTensorStorage : cute::aligned_struct<1024, cute::_0> {
    cute::array_aligned<float, cute::cosize_v<SmemLayoutA>, 1024> smem_A;
    cute::array_aligned<float, cute::cosize_v<SmemLayoutB>, 1024> smem_B;     // as loaded
  };
  using TensorStorage = std::conditional_t<kSplit, SplitTensorStorage, PlainTensorStorage>;

  struct Arguments {
    float const* ptr_A = nullptr;
    StrideA dA{};
    float const* ptr_B = nullptr;
    StrideB dB{};
  };

  using TmaA = decltype(cute::make_tma_copy_A_sm90(
      cute::SM90_TMA_LOAD{},
      cute::make_tensor(static_cast<float const*>(nullptr),
                        cute::repeat_like(StrideA{}, int32_t(0)), StrideA{}),
      SmemLayoutA{}(cute::_, cute::_, cute::Int<0>{}), TileShape{}, ClusterShape{}));
  using TmaB = decltype(cute::make_tma_copy_B_sm90(
      cute::SM90_TMA_LOAD{},
      cute::make_tensor(static_cast<float const*>(nullptr),
                        cute::repeat_like(StrideB{}, int32_t(0)), StrideB{}),
      SmemLayoutB{}(cute::_, cute::_, cute::Int<0>{}), TileShape{}, ClusterShape{}));

  static constexpr uint32_t kTmaTransactionBytes =
      uint32_t((kBlockM + kBlockN) * kBlockK * sizeof(float));

  struct Params {
    TmaA tma_load_a;
    TmaB tma_load_b;
    uint32_t tma_transaction_bytes = kTmaTransactionBytes;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        void* /*workspace*/) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    auto tensor_a = cute::make_tensor(args.ptr_A, cute::make_layout(cute::make_shape(M, K, L), args.dA));
    auto tensor_b = cute::make_tensor(args.ptr_B, cute::make_layout(cute::make_shape(N, K, L), args.dB));
    return {cute::make_tma_copy_A_sm90(cute::SM90_TMA_LOAD{}, tensor_a,
                                       SmemLayoutA{}(cute::_, cute::_, cute::Int<0>{}), TileShape{},
                                       ClusterShape{}),
            cute::make_tma_copy_B_sm90(cute::SM90_TMA_LOAD{}, tensor_b,
                                       SmemLayoutB{}(cute::_, cute::_, cute::Int<0>{}), TileShape{},
                                       ClusterShape{}),
            kTmaTransactionBytes};
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    constexpr int kTmaAlignment = 128 / cute::sizeof_bits_v<float>;
    return cutlass::detail::check_alignment<kTmaAlignment>(cute::make_shape(M, K, L), args.dA) &&
           cutlass::detail::check_alignment<kTmaAlignment>(cute::make_shape(N, K, L), args.dB);
  }

  template <class ProblemShape, class Args>
  static size_t get_workspace_size(ProblemShape const&, Args const&) { return 0; }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
  }

  // (BLK_M, BLK_K, m, k, l) and (BLK_N, BLK_K, n, k, l) views of the TMA tensors.
  template <class ProblemShapeMNKL>
  CUTLASS_DEVICE auto load_init(ProblemShapeMNKL const& problem_shape_mnkl, Params const& params) const {
    using X = cute::Underscore;
    auto [M, N, K, L] = problem_shape_mnkl;
    auto mA = params.tma_load_a.get_tma_tensor(cute::make_shape(M, K, L));
    auto mB = params.tma_load_b.get_tma_tensor(cute::make_shape(N, K, L));
    auto gA = cute::local_tile(mA, TileShape{}, cute::make_coord(cute::_, cute::_, cute::_), cute::Step<cute::_1, X, cute::_1>{});
    auto gB = cute::local_tile(mB, TileShape{}, cute::make_coord(cute::_, cute::_, cute::_), cute::Step<X, cute::_1, cute::_1>{});
    return cute::make_tuple(gA, gB);
  }

  // Producer: one elected thread of the producer warp issues both TMA loads of each k-tile.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int /*thread_idx*/,
                           uint32_t /*block_rank_in_cluster*/, TensorStorage& shared_tensors) {
    using namespace cute;
    if (!cute::elect_one_sync()) return;
    Tensor sA = as_position_independent_swizzle_tensor(
        make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{}));
    Tensor sB = as_position_independent_swizzle_tensor(
        make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{}));
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);  // (BLK_M, BLK_K, k)
    Tensor gB = get<1>(load_inputs)(_, _, n_coord, _, l_coord);  // (BLK_N, BLK_K, k)
    auto cta_tma_a = params.tma_load_a.get_slice(0);
    auto cta_tma_b = params.tma_load_b.get_slice(0);
    Tensor tAgA = cta_tma_a.partition_S(gA);
    Tensor tAsA = cta_tma_a.partition_D(sA);
    Tensor tBgB = cta_tma_b.partition_S(gB);
    Tensor tBsB = cta_tma_b.partition_D(sB);
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      auto* barrier = pipeline.producer_get_barrier(smem_pipe_write);
      int stage = smem_pipe_write.index();
      copy(params.tma_load_a.with(*barrier, 0), tAgA(_, _, _, *k_tile_iter), tAsA(_, _, _, stage));
      copy(params.tma_load_b.with(*barrier, 0), tBgB(_, _, _, *k_tile_iter), tBsB(_, _, _, stage));
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    if (cute::elect_one_sync()) pipeline.producer_tail(smem_pipe_write);
  }

  // Splits this thread's share of stage `stage` of B: hi in place, lo into smem_B_lo (3xTF32).
  CUTLASS_DEVICE static void split_b_stage(TensorStorage& shared_tensors, int stage, int thread_idx) {
    if constexpr (kSplit) {
    constexpr int kVectors = kBStageElements / 4;
    static_assert(kVectors % kConsumerThreads == 0);
    constexpr int kPerThread = kVectors / kConsumerThreads;
    float4* hi = reinterpret_cast<float4*>(shared_tensors.smem_B.data() + stage * kBStageElements);
    float4* lo = reinterpret_cast<float4*>(shared_tensors.smem_B_lo.data() + stage * kBStageElements);
    float4 v[kPerThread];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kPerThread; ++i) v[i] = hi[thread_idx + i * kConsumerThreads];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      uint4 h, l;
      split_tf32(v[i].x, h.x, l.x);
      split_tf32(v[i].y, h.y, l.y);
      split_tf32(v[i].z, h.z, l.z);
      split_tf32(v[i].w, h.w, l.w);
      reinterpret_cast<uint4*>(hi)[thread_idx + i * kConsumerThreads] = h;
      reinterpret_cast<uint4*>(lo)[thread_idx + i * kConsumerThreads] = l;
    }
    }
  }

  // Consumers: both warpgroups, accumulating the (BLK_M, BLK_N) tile over k_tile_count tiles.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors,
                          Params const& /*params*/) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "accumulators must be in registers");

    Tensor sA = as_position_independent_swizzle_tensor(make_tensor(
        make_smem_ptr(reinterpret_cast<tfloat32_t*>(shared_tensors.smem_A.data())), SmemLayoutA{}));
    Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<tfloat32_t*>(shared_tensors.smem_B.data())),
                            SmemLayoutB{});
    float* b_lo_data;  // the lo parts (3xTF32); one TF32 product reads none
    if constexpr (kSplit) {
      b_lo_data = shared_tensors.smem_B_lo.data();
    } else {
      b_lo_data = shared_tensors.smem_B.data();
    }
    Tensor sB_lo = make_tensor(make_smem_ptr(reinterpret_cast<tfloat32_t*>(b_lo_data)), SmemLayoutB{});

    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_thread_slice(thread_idx);
    const int warp_group = __shfl_sync(0xffffffff, thread_idx / 128, 0);
    auto warp_group_mma = tiled_mma.get_slice(warp_group * 128);

    Tensor tCrA_hi = thread_mma.partition_fragment_A(sA(_, _, Int<0>{}));  // (MMA, MMA_M, MMA_K)
    Tensor tCrA_lo = make_fragment_like(tCrA_hi);
    Tensor tCrB_hi = warp_group_mma.make_fragment_B(warp_group_mma.partition_B(sB));     // (MMA, MMA_N, MMA_K, PIPE)
    Tensor tCrB_lo = warp_group_mma.make_fragment_B(warp_group_mma.partition_B(sB_lo));  // (MMA, MMA_N, MMA_K, PIPE)

    auto smem_copy_a = make_tiled_copy_A(SmemCopyAtomA{}, tiled_mma);
    auto thread_copy_a = smem_copy_a.get_thread_slice(thread_idx);
    Tensor tCsA = thread_copy_a.partition_S(sA);        // (CPY, CPY_M, CPY_K, PIPE)
    Tensor tCrA_view = thread_copy_a.retile_D(tCrA_hi);  // (CPY, CPY_M, CPY_K)
    constexpr int kBlocks = size<2>(tCrA_hi);           // 8-deep k-blocks per k-tile
    static_assert(kBlocks == kBlockK / 8 && size<2>(tCrA_view) == kBlocks);
    CUTE_STATIC_ASSERT_V(size<1>(tCrA_hi) == size<1>(accum));
    CUTE_STATIC_ASSERT_V(size<1>(tCrA_view) == size<1>(accum));
    CUTE_STATIC_ASSERT_V(size<1>(tCrB_hi) == size<2>(accum));

    // Copies k-block `k_block` of m-block `m_block` of A from `stage` and splits it into
    // (hi, lo) in registers (3xTF32), or rounds it to TF32 (one product).
    auto load_split_a = [&](int m_block, int k_block, int stage) {
      copy(smem_copy_a, tCsA(_, m_block, k_block, stage), tCrA_view(_, m_block, k_block));
      Tensor hi = tCrA_hi(_, m_block, k_block);
      Tensor lo = tCrA_lo(_, m_block, k_block);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(hi); ++i) {
        if constexpr (kSplit) {
          uint32_t h, l;
          split_tf32(__uint_as_float(hi(i).raw()), h, l);
          hi(i) = tfloat32_t::bitcast(h);
          lo(i) = tfloat32_t::bitcast(l);
        } else {
          hi(i) = tfloat32_t::bitcast(round_to_tf32(__uint_as_float(hi(i).raw())));
        }
      }
    };

    // Two-level accumulation: wgmma accumulates one k-tile of one 64 x 64 block into
    // `partial` (the tensor cores truncate their float32 sums, so long sums there drift toward
    // zero); `accum` receives each partial with a rounded float32 add.
    Tensor partial = make_fragment_like(accum(_, 0, 0));  // (MMA)
    clear(accum);

    if constexpr (kSplit) {
      pipeline.consumer_wait(smem_pipe_read);
      split_b_stage(shared_tensors, smem_pipe_read.index(), thread_idx);
      pipeline.split_arrive(smem_pipe_read.index());
    }

    CUTLASS_PRAGMA_NO_UNROLL
    for (int k_tile = 0; k_tile < k_tile_count; ++k_tile) {
      const int stage = smem_pipe_read.index();
      PipelineState smem_pipe_next = smem_pipe_read;
      ++smem_pipe_next;
      const bool has_next = k_tile + 1 < k_tile_count;
      if constexpr (kSplit) {
        pipeline.split_wait(stage, smem_pipe_read.phase());
      } else {
        pipeline.consumer_wait(smem_pipe_read);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int m_block = 0; m_block < size<1>(accum); ++m_block) {
        CUTLASS_PRAGMA_UNROLL
        for (int k_block = 0; k_block < kBlocks; ++k_block) load_split_a(m_block, k_block, stage);
        CUTLASS_PRAGMA_UNROLL
        for (int n_block = 0; n_block < size<2>(accum); ++n_block) {
          warpgroup_fence_operand(partial);
          warpgroup_arrive();
          tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
          CUTLASS_PRAGMA_UNROLL
          for (int k_block = 0; k_block < kBlocks; ++k_block) {
            if constexpr (kSplit) {
              cute::gemm(tiled_mma, tCrA_lo(_, m_block, k_block), tCrB_hi(_, n_block, k_block, stage), partial);
              tiled_mma.accumulate_ = GMMA::ScaleOut::One;
              cute::gemm(tiled_mma, tCrA_hi(_, m_block, k_block), tCrB_lo(_, n_block, k_block, stage), partial);
            }
            cute::gemm(tiled_mma, tCrA_hi(_, m_block, k_block), tCrB_hi(_, n_block, k_block, stage), partial);
            tiled_mma.accumulate_ = GMMA::ScaleOut::One;
          }
          warpgroup_commit_batch();
          if (kSplit && m_block == 0 && n_block == 0 && has_next) {
            pipeline.consumer_wait(smem_pipe_next);
            split_b_stage(shared_tensors, smem_pipe_next.index(), thread_idx);
            pipeline.split_arrive(smem_pipe_next.index());
          }
          warpgroup_wait<0>();
          warpgroup_fence_operand(partial);
          Tensor block = accum(_, m_block, n_block);
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(partial); ++i) block(i) += partial(i);
        }
      }
      pipeline.consumer_release(smem_pipe_read);  // every wgmma of this k-tile is done
      ++smem_pipe_read;
    }
  }

  // mma() waits for its wgmmas and releases every stage it read.
  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) {}
};
// ------------------------------------------------------------------------------------------
// The part of the C ABI both Hopper entries share (Sm90StrictGemm, Sm90StagedTransposeGemm of
// strict_staged_transpose.cuh): the arguments checked for the call's layouts (a_row_major,
// b_row_major), the device and its SM count, then `run_slice(&slice, workspace, workspace_size,
// stream, device, sm_count)` once per outer batch (the slices differ only in their pointers,
// aligned alike), in order on the stream, sharing the workspace; a size query asks the first.
// Returns a FactStatus, never throws.
template <class Chain, class RunSlice>
int run_outer_batches(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                      cudaStream_t stream, bool a_row_major, bool b_row_major,
                      RunSlice run_slice) noexcept {
  try {
    const bool size_query = workspace_size != nullptr;
    const FactGemmArgs* args = nullptr;
    if (int status = validate_arguments<Chain>(header, size_query, a_row_major, b_row_major, &args);
        status != FACT_OK)
      return status;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      (void)cudaGetLastError();
      return FACT_ERR_LAUNCH;
    }
    const int sm_count = args->sm_count > 0
                             ? int(args->sm_count)
                             : cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
    const int64_t outer = fact_gemm_outer_count(args);
    for (int64_t o = 0; o < outer; ++o) {
      const FactGemmArgs slice = outer == 1 ? *args : fact_gemm_outer_slice(args, o);
      const int status = run_slice(&slice, workspace, workspace_size, stream, device, sm_count);
      if (status != FACT_OK || size_query) return status;
    }
    return FACT_OK;
  } catch (...) {
    return FACT_ERR_INTERNAL;
  }
}

// ------------------------------------------------------------------------------------------
// The FACT C ABI over one instantiation.
//   LayoutA, LayoutB: the FACT problem's layouts (cutlass::layout::RowMajor / ColumnMajor).
//   TileShape: Shape<BLK_M, BLK_N, _32> of the kernel (after the transposition, if any).
//   TileSchedulerTag: cutlass::gemm::PersistentScheduler or cutlass::gemm::StreamKScheduler.
//   Chain: the epilogue chain (gemm_epilogue.cuh) in the FACT problem's terms; transposed runs
//     evaluate it with the M×N operands column-major and the bias along the kernel's M mode.
//   Products: 3 (3xTF32, precision strict) or 1 (one TF32 product, precision tf32).
// run(): size query / validation / can_implement / launch; returns a FactStatus, never throws.
// K decomposition of a single GEMM (batch 1) whose tiles cannot fill the GPU:
//   - persistent kernels cut K into equal slices run as batches into a float32 workspace (the
//     epilogue writes raw accumulators: AccumulatorOr), then reduce_k_slices adds them in a
//     fixed order (deterministic, no serial fix-up chain) and applies the chain once;
//     FactGemmArgs::split_k > 1 asks for that many slices, split_k <= 1 lets the kernel choose.
//   - stream-K kernels take split_k > 1 as CUTLASS split-K slices; otherwise CUTLASS's
//     stream-K heuristic decomposes the work.

template <class LayoutA, class LayoutB, class TileShape, int Stages, class TileSchedulerTag,
          class Chain_ = fact::gemm::epilogue::ScaledAccumulator, int Products = 3>
struct Sm90StrictGemm {
  using Chain = Chain_;
  static constexpr int kProducts = Products;
  using RowMajor = cutlass::layout::RowMajor;
  using ColumnMajor = cutlass::layout::ColumnMajor;
  static constexpr bool kProblemARow = std::is_same_v<LayoutA, RowMajor>;
  static constexpr bool kProblemBRow = std::is_same_v<LayoutB, RowMajor>;
  static_assert(!(kProblemBRow && !kProblemARow),
                "A column-major with B row-major has no K-major operand: use the sm80 kernel");
  // Transposed run (D^T = B^T A^T) when B is row-major: B^T becomes the register operand.
  static constexpr bool kTransposed = kProblemBRow;
  using KernelLayoutA = std::conditional_t<kTransposed, ColumnMajor, LayoutA>;
  using KernelLayoutD = std::conditional_t<kTransposed, ColumnMajor, RowMajor>;
  using StrideA = cutlass::gemm::TagToStrideA_t<KernelLayoutA>;
  using StrideB = cutlass::gemm::TagToStrideB_t<ColumnMajor>;  // K-major
  using StrideD = cutlass::gemm::TagToStrideC_t<KernelLayoutD>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;

  using CollectiveMainloop =
      Tf32x3Mainloop<MainloopSm90Tf32x3<Stages, ClusterShape, Products>, TileShape, StrideA, StrideB>;
  static constexpr bool kReadsC = Chain::kReadsSource;
  using ElementC = std::conditional_t<kReadsC, float, void>;
  static constexpr int kAlignment = kFloatAlignment;
  // The chain in the kernel's terms: C (and D) column-major and the bias along M when transposed.
  using KernelConfig = fact::gemm::epilogue::Config<TileShape, float,
                                                    cutlass::FloatRoundStyle::round_to_nearest,
                                                    !kTransposed, kTransposed>;
  using FusionCallbacks = typename AccumulatorOr<Chain>::template Node<KernelConfig>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, KernelLayoutD,
      kAlignment, float, KernelLayoutD, kAlignment,
      cutlass::epilogue::TmaWarpSpecializedCooperative, FusionCallbacks>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue,
                                                          TileSchedulerTag>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  static constexpr int kSharedMemoryLimit = 232448;  // sm_90 opt-in per block
  static_assert(GemmKernel::SharedStorageSize <= kSharedMemoryLimit,
                "stages and epilogue exceed shared memory");

  // Rank-3 CUTLASS stride with `leading` in its dynamic (M/N or K) mode and `batch` last.
  template <class Stride>
  static Stride make_stride(int64_t leading, int64_t batch) {
    Stride stride{};
    if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(stride))>>) {
      cute::get<1>(stride) = leading;
    } else {
      cute::get<0>(stride) = leading;
    }
    cute::get<2>(stride) = batch;
    return stride;
  }

  // Where one launch reads and writes: the FACT problem mapped onto the kernel's operands,
  // optionally cut into `slices` equal K-slices that run as batches writing float32 partials.
  struct LaunchPlan {
    int slices = 1;     // > 1: K-sliced run into the workspace, then reduce_k_slices
    int64_t k = 0;      // K per launch batch
  };

  static constexpr bool kPersistent = !std::is_same_v<TileSchedulerTag, cutlass::gemm::StreamKScheduler>;

  // K-slices for a single GEMM whose output tiles cannot fill the GPU: FactGemmArgs::split_k
  // when > 1, else enough slices to give every SM a tile with at least 16 k-tiles per slice;
  // rounded down to a count that divides K into 16-byte aligned slices. Persistent kernels only
  // (stream-K kernels decompose K themselves).
  static LaunchPlan plan(const FactGemmArgs* args, int sm_count) {
    LaunchPlan p{1, args->k};
    if (!kPersistent || args->batch != 1) return p;
    constexpr int kBlockM = cute::size<0>(TileShape{}), kBlockN = cute::size<1>(TileShape{});
    const int64_t kernel_m = kTransposed ? args->n : args->m, kernel_n = kTransposed ? args->m : args->n;
    const int64_t tiles = ((kernel_m + kBlockM - 1) / kBlockM) * ((kernel_n + kBlockN - 1) / kBlockN);
    int64_t want = args->split_k > 1 ? args->split_k : (2 * tiles <= sm_count ? sm_count / tiles : 1);
    const int64_t k_tiles = (args->k + 31) / 32;
    if (want > k_tiles / 16) want = k_tiles / 16;
    for (int64_t slices = want; slices > 1; --slices) {
      if (args->k % slices == 0 && (args->k / slices) % kAlignment == 0) {
        p.slices = int(slices);
        p.k = args->k / slices;
        return p;
      }
    }
    return p;
  }

  // The K-stride of an operand's memory: 1 when K is contiguous, else its leading dimension.
  static int64_t k_stride(bool k_contiguous, int64_t ld) { return k_contiguous ? 1 : ld; }

  static typename Gemm::Arguments make_arguments(const FactGemmArgs* args, const LaunchPlan& p,
                                                 float* partials, int device, int sm_count) {
    typename Gemm::Arguments arguments{};
    const bool sliced = p.slices > 1;
    const int batches = sliced ? p.slices : int(args->batch);
    arguments.mode = batches > 1 ? cutlass::gemm::GemmUniversalMode::kBatched
                                 : cutlass::gemm::GemmUniversalMode::kGemm;
    // Batch strides: the FACT batch strides, or one K-slice apart.
    const int64_t stride_a = sliced ? p.k * k_stride(kProblemARow, args->lda) : args->stride_a;
    const int64_t stride_b = sliced ? p.k * k_stride(!kProblemBRow, args->ldb) : args->stride_b;
    if constexpr (kTransposed) {
      arguments.problem_shape = {int(args->n), int(args->m), int(p.k), batches};
      arguments.mainloop.ptr_A = static_cast<const float*>(args->b);
      arguments.mainloop.dA = make_stride<StrideA>(args->ldb, stride_b);
      arguments.mainloop.ptr_B = static_cast<const float*>(args->a);
      arguments.mainloop.dB = make_stride<StrideB>(args->lda, stride_a);
    } else {
      arguments.problem_shape = {int(args->m), int(args->n), int(p.k), batches};
      arguments.mainloop.ptr_A = static_cast<const float*>(args->a);
      arguments.mainloop.dA = make_stride<StrideA>(args->lda, stride_a);
      arguments.mainloop.ptr_B = static_cast<const float*>(args->b);
      arguments.mainloop.dB = make_stride<StrideB>(args->ldb, stride_b);
    }
    auto& epilogue = arguments.epilogue;
    // Sliced runs write raw partials[l][m][n]; the reduction applies the chain. The chain's
    // operands still point at valid memory with batch stride 0 (every slice reads the same
    // tile; the operands past CUTLASS's C are not read at all), only its value is not selected.
    FactGemmArgs chain_args = *args;
    if (sliced) {
      for (int i = 0; i < chain_args.num_steps; ++i) {
        FactGemmStep& step = chain_args.steps[i];
        step.batch_stride = 0;
        const bool matrix = step.kind == FACT_STEP_RESIDUAL || step.kind == FACT_STEP_MULTIPLY;
        if (matrix && i != Chain::kSourceStep) step.operand = nullptr;  // loads skipped
      }
    }
    epilogue.thread = AccumulatorOr<Chain>::template arguments<KernelConfig>(chain_args, sliced);
    if constexpr (kReadsC) {
      const FactGemmStep& source = chain_args.steps[Chain::kSourceStep];
      epilogue.ptr_C = static_cast<const float*>(source.operand);
      epilogue.dC = make_stride<StrideD>(source.ld, source.batch_stride);
    } else {
      epilogue.ptr_C = nullptr;
      epilogue.dC = make_stride<StrideD>(args->ldd, args->stride_d);
    }
    if (sliced) {
      epilogue.ptr_D = partials;
      epilogue.dD = make_stride<StrideD>(args->n, args->m * args->n);
    } else {
      epilogue.ptr_D = static_cast<float*>(args->d);
      epilogue.dD = make_stride<StrideD>(args->ldd, args->stride_d);
    }
    arguments.hw_info.device_id = device;
    arguments.hw_info.sm_count = sm_count;
    if constexpr (!kPersistent) {
      if (args->split_k > 1) {
        arguments.scheduler.splits = int(args->split_k);
        arguments.scheduler.decomposition_mode =
            decltype(arguments.scheduler.decomposition_mode)::SplitK;
      }
    }
    return arguments;
  }

  static size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

  // The C ABI: run_unpadded behind the GEMM pattern's zero padding (a call whose rows are not
  // 16-byte aligned runs padded through the workspace: patterns/gemm/gemm_padding.h).
  static int run(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                 cudaStream_t stream) noexcept {
    return fact::gemm::padding::run_padded(header, workspace, workspace_size, stream, false,
                                           &run_unpadded);
  }

  static int run_unpadded(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                          cudaStream_t stream) noexcept {
    return run_outer_batches<Chain>(header, workspace, workspace_size, stream, kProblemARow,
                                    kProblemBRow, &run_slice);
  }

  // What one launch of a slice is made from (gemm_prepared_launch.cuh keeps the last few).
  struct Prepared {
    LaunchPlan plan;
    typename Gemm::Arguments arguments;
    typename Gemm::GemmKernel::Params params;
  };

  // One launch (and its K-slice reduction) for the call of one outer batch. A slice equal to
  // one this thread prepared before launches that preparation.
  static int run_slice(const FactGemmArgs* args, void* workspace, size_t* workspace_size,
                       cudaStream_t stream, int device, int sm_count) {
    using GemmKernel = typename Gemm::GemmKernel;
    static thread_local fact::gemm::PreparedLaunches<Prepared> prepared_launches;
    const bool size_query = workspace_size != nullptr;
    if (!size_query) {
      if (Prepared* kept = prepared_launches.find(*args, device, workspace)) {
        return launch(*kept, args, workspace, stream);
      }
    }
    Prepared prepared{plan(args, sm_count), {}, {}};
    const LaunchPlan& p = prepared.plan;
    const size_t partial_bytes = partials_bytes(args, p);
    float* partials = reinterpret_cast<float*>(workspace);
    void* gemm_workspace = workspace ? static_cast<char*>(workspace) + partial_bytes : nullptr;
    prepared.arguments = make_arguments(args, p, partials, device, sm_count);
    const size_t needed = partial_bytes + Gemm::get_workspace_size(prepared.arguments);
    if (size_query) {
      *workspace_size = needed;
      return FACT_OK;
    }
    if (Gemm::can_implement(prepared.arguments) != cutlass::Status::kSuccess) return FACT_ERR_CANNOT_IMPLEMENT;
    if (needed > 0 && !workspace) return FACT_ERR_WORKSPACE;
    prepared.params = GemmKernel::to_underlying_arguments(prepared.arguments, gemm_workspace);
    if (!fact::gemm::ensure_shared_memory_attribute<GemmKernel>(device)) return FACT_ERR_INITIALIZE;
    const int status = launch(prepared, args, workspace, stream);
    if (status == FACT_OK) prepared_launches.keep(*args, device, workspace, prepared);
    return status;
  }

  // Bytes of float32 K-slice partials at the front of the workspace (0 unsliced).
  static size_t partials_bytes(const FactGemmArgs* args, const LaunchPlan& p) {
    return p.slices > 1 ? round_up(size_t(p.slices) * size_t(args->m) * size_t(args->n) * sizeof(float)) : 0;
  }

  // The prepared kernel on the stream, then the K-slice reduction of a sliced run.
  static int launch(Prepared& prepared, const FactGemmArgs* args, void* workspace, cudaStream_t stream) {
    using GemmKernel = typename Gemm::GemmKernel;
    const LaunchPlan& p = prepared.plan;
    void* gemm_workspace = workspace ? static_cast<char*>(workspace) + partials_bytes(args, p) : nullptr;
    if (GemmKernel::initialize_workspace(prepared.arguments, gemm_workspace, stream) != cutlass::Status::kSuccess)
      return FACT_ERR_INITIALIZE;
    if (Gemm::run(prepared.params, stream) != cutlass::Status::kSuccess) return FACT_ERR_LAUNCH;
    if (p.slices > 1) {
      const int64_t count = args->m * args->n;
      const int threads = 256;
      const int64_t blocks = (count + threads - 1) / threads;
      reduce_k_slices<Chain><<<unsigned(blocks < 65535 * 8 ? blocks : 65535 * 8), threads, 0, stream>>>(
          reinterpret_cast<float*>(workspace), p.slices, *args);
    }
    return cudaGetLastError() == cudaSuccess ? FACT_OK : FACT_ERR_LAUNCH;
  }
};

}  // namespace fact::strict
