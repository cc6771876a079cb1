// The RMSNorm pattern's epilogue link (registered in epilogue_steps.def, included by
// patterns/gemm/gemm_epilogue.cuh at its end, which defines the link helpers used here).
#pragma once
#include "patterns/gemm/gemm_epilogue.cuh"

namespace fact::gemm::epilogue {

// x · scale[m]: a length-M vector per batch (batch_stride 0: one for every batch) indexed by the
// problem's row (FACT_STEP_ROW_SCALE): RMSNorm's 1/rms when the norm's weight is folded into B
// (patterns/rmsnorm). A broadcast along the kernel's M mode (CUTLASS's Sm90ColBroadcast: each
// thread loads its rows straight from global memory, no shared memory), or along its N mode under
// a Config with kBiasAlongM (a kernel computing D^T, whose M is the problem's N). Composes with
// every link: before a Glu link it scales the gate and up columns alike, before a Rope link the
// pairs before their rotation.
template <class ElementScale, class Prev>
struct RowScale : detail::LinkBase<Prev> {
  using Base = detail::LinkBase<Prev>;

  template <class Cfg>
  using Broadcast = std::conditional_t<
      Cfg::kBiasAlongM,
      detail::fusion::Sm90RowBroadcast<0, typename Cfg::CtaTile, ElementScale,
                                       typename Cfg::ElementCompute, detail::ColumnVectorStride>,
      detail::fusion::Sm90ColBroadcast<0, typename Cfg::CtaTile, ElementScale,
                                       typename Cfg::ElementCompute, detail::RowVectorStride>>;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::multiplies, ElementOut, typename Cfg::ElementCompute,
                                  Cfg::kRound>,
      typename Prev::template Node<Cfg, typename Cfg::ElementCompute>, Broadcast<Cfg>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    using Stride = std::conditional_t<Cfg::kBiasAlongM, detail::ColumnVectorStride,
                                      detail::RowVectorStride>;
    Stride stride{};
    cute::get<2>(stride) = Base::step(args).batch_stride;
    return {Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args),
            {static_cast<const ElementScale*>(Base::step(args).operand), ElementScale(0), stride},
            {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    const FactGemmStep& s = Base::step(args);
    return Prev::template reference<Cfg>(args, accumulator, m, n, l) *
           detail::load_as_float<ElementScale>(s.operand,
                                               l * s.batch_stride + (Cfg::kBiasAlongM ? n : m));
  }

  static bool matches(const FactGemmArgs& args) {
    const FactGemmStep& s = Base::step(args);
    return Prev::matches(args) && s.kind == FACT_STEP_ROW_SCALE &&
           s.operand_type == detail::dtype_id<ElementScale>();
  }
  static void describe(FactGemmStep* steps) {
    Base::describe_step(steps, FACT_STEP_ROW_SCALE, FACT_ACT_IDENTITY, detail::dtype_id<ElementScale>());
  }

  template <class Cfg>
  static int check_operands(const FactGemmArgs& args, bool size_query) {
    if (int status = Prev::template check_operands<Cfg>(args, size_query); status != FACT_OK) {
      return status;
    }
    return detail::check_vector_operand<ElementScale>(Base::step(args), size_query);
  }
};

}  // namespace fact::gemm::epilogue
