// The common part of the epilogue nodes that store D themselves (a step whose STORES_D column is
// 1 in the epilogue table), for CUTLASS's sm90 epilogue visitor tree (EVT). The kernel is built
// with a void D (the collective epilogue writes nothing itself) and such a node is the tree's
// root, owning the output as CUTLASS's Sm90AuxStore does:
//   - it stages its results in shared memory in blocks of EPI_M × EPI_N/2 elements (row-major,
//     no swizzle: TMA's SWIZZLE_NONE), kBlocks blocks per store stage, and the issuing warp
//     stores each block into D with TMA (tma_out, clipped at D's extent);
//   - the buffers follow the collective's TMA store pipeline (StagesD = min(epilogue subtiles, 2),
//     gemm_store_stages.cuh; the stage is store_iteration % StagesD);
//   - it loads nothing (no producer load, no C) and needs no workspace.
// A node derives from Sm90RootStore<CtaTile, EpilogueTile, ElementOut, kBlocks, OwnParams>
// (`using Base::Base;` for its constructor from Params and SharedStorage) and supplies its
// Arguments, to_underlying_arguments (Params: OwnParams's fields and tma_out, made by
// make_tma_out), can_implement (D's part: storable) and get_consumer_store_callbacks, whose
// element coordinates and staged blocks come from tile_coordinates and staged_blocks.
#pragma once
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"

#include "patterns/gemm/gemm_store_stages.cuh"

namespace fact::gemm::epilogue::detail {

struct NoOwnParams {};

template <class CtaTile, class EpilogueTile, class ElementOut, int kBlocksPerStage,
          class OwnParams = NoOwnParams>
struct Sm90RootStore {
  // The element the collective sizes its (unused) D staging by when D is void.
  using ElementAux = ElementOut;

  static constexpr int kTileM = cute::size<0>(CtaTile{});
  static constexpr int kTileN = cute::size<1>(CtaTile{});
  static constexpr int kEpiM = cute::size<0>(EpilogueTile{});
  static constexpr int kEpiN = cute::size<1>(EpilogueTile{});
  static constexpr int kHalfN = kEpiN / 2;         // a block's columns
  static constexpr int kBlocks = kBlocksPerStage;  // blocks per store stage
  static constexpr int kStages = store_stages<CtaTile, EpilogueTile>();  // the collective's StagesD
  static_assert(kHalfN * int(sizeof(ElementOut)) % 16 == 0, "a block holds whole 16-byte rows");
  static_assert(kTileN % kEpiN == 0 && kTileM % kEpiM == 0, "subtiles divide the CTA tile");

  using StrideOut = cute::Stride<int64_t, cute::_1, int64_t>;
  // One block, row-major, no swizzle (TMA's SWIZZLE_NONE).
  using SmemLayoutTma = cute::Layout<cute::Shape<cute::Int<kEpiM>, cute::Int<kHalfN>>,
                                     cute::Stride<cute::Int<kHalfN>, cute::_1>>;
  // (row, column, block + kBlocks · stage)
  using SmemLayout =
      cute::Layout<cute::Shape<cute::Int<kEpiM>, cute::Int<kHalfN>, cute::Int<kBlocks * kStages>>,
                   cute::Stride<cute::Int<kHalfN>, cute::_1, cute::Int<kEpiM * kHalfN>>>;
  using TmaOut = decltype(cute::make_tma_copy(
      cute::SM90_TMA_STORE{},
      cute::make_tensor(static_cast<ElementOut*>(nullptr),
                        cute::repeat_like(StrideOut{}, int32_t(0)), StrideOut{}),
      SmemLayoutTma{}));

  struct SharedStorage {
    alignas(128) cute::array_aligned<ElementOut, cute::cosize_v<SmemLayout>> smem_out;
  };

  // The node's own parameters and the TMA store into D.
  struct Params : OwnParams {
    TmaOut tma_out;
  };

  // The TMA store into D of `shape` (rows, columns, batches), row-major with leading dimension
  // `ld` and `batch_stride` elements between batches.
  template <class Shape>
  static TmaOut make_tma_out(ElementOut* out, Shape const& shape, int64_t ld, int64_t batch_stride) {
    StrideOut stride{};
    cute::get<0>(stride) = ld;
    cute::get<2>(stride) = batch_stride;
    return cute::make_tma_copy(cute::SM90_TMA_STORE{},
                               cute::make_tensor(out, cute::make_layout(shape, stride)), SmemLayoutTma{});
  }

  // D as TMA stores it: a 16-byte aligned start, the leading dimension and the batch stride
  // whole 16-byte vectors.
  static bool storable(ElementOut const* out, int64_t ld, int64_t batch_stride) {
    constexpr int64_t vector = 16 / int64_t(sizeof(ElementOut));
    return out != nullptr && (reinterpret_cast<uintptr_t>(out) % 16) == 0 && ld % vector == 0 &&
           batch_stride % vector == 0;
  }

  template <class ProblemShape, class Arguments>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }

  template <class ProblemShape, class Arguments>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Sm90RootStore() {}
  CUTLASS_HOST_DEVICE Sm90RootStore(Params const& params, SharedStorage const& shared_storage)
      : params_ptr(&params), smem_out(const_cast<ElementOut*>(shared_storage.smem_out.data())) {}

  Params const* params_ptr = nullptr;
  ElementOut* smem_out = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(
      cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  // The (m, n) coordinates in the CTA tile of every element this thread holds, partitioned as the
  // accumulator fragments are (element epi_v * FragmentSize + i of subtile (epi_m, epi_n) is
  // fragment element i of visit epi_v, as for every CUTLASS EVT node):
  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N).
  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE static auto tile_coordinates(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    static_assert(size<0>(decltype(args.epi_tile){}) == kEpiM &&
                      size<1>(decltype(args.epi_tile){}) == kEpiN,
                  "the epilogue subtile the kernel uses is the one this node was built for");
    Tensor cTile = make_identity_tensor(take<0, 2>(args.tile_shape_mnk));
    return cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        cTile, args.epi_tile, args.tiled_copy, args.thread_idx);
  }

  // This node's shared-memory blocks as the TMA store reads them: (TMA,TMA_M,TMA_N,BLOCK + kBlocks · PIPE).
  CUTLASS_DEVICE auto staged_blocks() const {
    using namespace cute;
    Tensor sOut = make_tensor(make_smem_ptr(smem_out), SmemLayout{});  // (EPI_M,EPI_N/2,BLOCK + kBlocks · PIPE)
    return params_ptr->tma_out.get_slice(_0{}).partition_S(sOut);
  }
};

}  // namespace fact::gemm::epilogue::detail
