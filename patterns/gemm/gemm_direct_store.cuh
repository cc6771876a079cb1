// The direct-store epilogue: FACT's own collective epilogue for a D whose rows are not 16-byte
// aligned (no TMA store can address them), run by the sm90 warp-specialized kernels through
// CUTLASS's Sm90TmaWarpSpecializedAdapter (the adapter CUTLASS's NoSmem epilogues use).
//
// Each consumer thread takes its accumulator fragment as the MMA partitions it, computes every
// element's D value with the chain's per-element formula (Chain::reference: alpha, then each
// step with its constants and operands read from the call's FactGemmArgs, the same function the
// standalone runner checks against) and stores it to global memory one element at a time,
// predicated by the problem's bounds (a ragged last tile writes nothing past M or N). No
// shared memory, no TMA, no workspace. Epilogue operands are read element-wise from global
// memory (a bias row through the cache; an M×N operand at its own ld).
//
// Not for a chain whose last link stores D itself (kStoresD): the rules refuse it. The call's
// FactGemmArgs travels in the kernel parameters (Arguments::thread).
#pragma once
#include <cstddef>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/layout.hpp"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"

#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/gemm_epilogue.cuh"

namespace fact::gemm::epilogue {

// Chain: the rendered epilogue chain (gemm_epilogue.cuh); Cfg: its Config; ElementD_: D's
// element type; StrideD_: D's CUTLASS 3 rank-3 stride (TagToStrideC_t of D's layout).
template <class Chain, class Cfg, class ElementD_, class StrideD_>
class DirectStore {
 public:
  static_assert(!Chain::kStoresD, "a chain whose last link stores D takes a TMA epilogue");
  using EpilogueSchedule = cutlass::gemm::EpilogueDefault;
  using DispatchPolicy = EpilogueSchedule;
  using ElementOutput = ElementD_;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementScalar = float;
  using ElementC = void;  // operands are read through the call's arguments
  using StrideC = StrideD_;
  using ElementD = ElementD_;
  using StrideD = StrideD_;
  using GmemElementC = ElementD;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  static_assert(cute::rank(StrideD{}) == 3, "StrideD must be rank-3: [M, N, L]");
  // What GemmUniversalAdapter names as the epilogue's output op (a description: the chain is
  // the computation).
  struct ThreadEpilogueOp {
    using ElementOutput = ElementD_;
    using ElementD = ElementD_;
    using ElementAccumulator = float;
    using ElementCompute = float;
    static constexpr int kCount = 1;
  };

  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  // The field names of CUTLASS's epilogue arguments (the entry fills ptr_C / dC for every
  // kernel; this epilogue ignores them).
  struct Arguments {
    FactGemmArgs thread{};  // the call: alpha, every step's constants and operands
    void const* ptr_C = nullptr;
    StrideC dC{};
    ElementD* ptr_D = nullptr;
    StrideD dD{};
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  // Any D stride: the stores are element-wise.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr_D != nullptr;
  }

  CUTLASS_HOST_DEVICE
  DirectStore(Params const& params, SharedStorage const& = SharedStorage()) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_MNK,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value, "the CTA tile shape must be static");
    static_assert(is_static<FrgLayout>::value, "the accumulator layout must be static");
    const int M = static_cast<int>(get<0>(problem_shape_mnkl));
    const int N = static_cast<int>(get<1>(problem_shape_mnkl));
    const int L = static_cast<int>(get<3>(problem_shape_mnkl));
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;

    // D of this CTA's tile and the absolute (m, n) of each element, both partitioned like the
    // accumulators.
    Tensor mD = make_tensor(make_gmem_ptr(params_.ptr_D), make_shape(M, N, L), params_.dD);
    Tensor gD = local_tile(mD, blk_shape_MNK, make_coord(_, _, _), Step<_1, _1, X>{})(
        _, _, m_coord, n_coord, l_coord);
    Tensor cD = local_tile(make_identity_tensor(make_shape(M, N)), take<0, 2>(blk_shape_MNK),
                           make_coord(m_coord, n_coord));
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tCgD = thr_mma.partition_C(gD);
    Tensor tCcD = thr_mma.partition_C(cD);
    CUTE_STATIC_ASSERT_V(size(tCgD) == size(accumulators), "one D element per accumulator");

    const int64_t l = static_cast<int64_t>(l_coord);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); ++i) {
      const int m = get<0>(tCcD(i));
      const int n = get<1>(tCcD(i));
      if (m < M && n < N) {
        const float value = Chain::template reference<Cfg>(
            params_.thread, static_cast<float>(accumulators(i)), m, n, l);
        tCgD(i) = static_cast<ElementD>(value);
      }
    }
  }

 private:
  Params params_;
};

// The collective epilogue a rendered direct-store kernel names.
template <class Chain, class Cfg, class ElementD, class LayoutD>
using DirectStoreCollective = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
    DirectStore<Chain, Cfg, ElementD, cutlass::detail::TagToStrideC_t<LayoutD>>>;

}  // namespace fact::gemm::epilogue
