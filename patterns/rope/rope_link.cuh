// The RoPE pattern's epilogue link (registered in epilogue_steps.def, included by
// patterns/gemm/gemm_epilogue.cuh at its end, which defines the link helpers used here).
#pragma once
#include "patterns/gemm/gemm_epilogue.cuh"
#include "patterns/rope/rope_store.cuh"

namespace fact::gemm::epilogue {

// Rotary position embedding over pairs of columns (2p, 2p+1) of each head, written to their
// original columns (FACT_STEP_ROPE; rope_store.cuh): the chain's last link; D is M×N, written by
// this link (the kernel's collective epilogue has a void D). The tables (cos = operand, sin =
// operand2) have element type ElementTable. `reference` is the value before the rotation (per
// accumulator column), `rotate` the rotation of one output element.
template <class ElementTable, class Prev>
struct Rope : detail::LinkBase<Prev> {
  using Base = detail::LinkBase<Prev>;
  static constexpr bool kStoresD = true;
  static_assert(!Prev::kReadsSource, "no M×N operand before a rope (the kernel has no C)");

  template <class Cfg, class ElementOut>
  using Store = detail::Sm90RopeStore<typename Cfg::CtaTile, typename Cfg::EpilogueTile, ElementOut,
                                      typename Cfg::ElementCompute, ElementTable, Cfg::kRound>;
  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<Store<Cfg, ElementOut>,
                                       typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    const FactGemmStep& s = Base::step(args);
    typename Store<Cfg, ElementOut>::Arguments store;
    store.ptr_out = static_cast<ElementOut*>(args.d);
    store.ld_out = args.ldd;
    store.cos = static_cast<const ElementTable*>(s.operand);
    store.sin = static_cast<const ElementTable*>(s.operand2);
    store.table_ld = s.ld;
    store.period = s.period;
    store.period_stride = s.period_stride;
    store.group = s.group;
    store.interleaved = s.interleaved;
    return {Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args), store};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    return Prev::template reference<Cfg>(args, accumulator, m, n, l);
  }
  // D[m, j] from the values `pre(column)` of row m before the rotation (j an original column).
  template <class Pre>
  CUTLASS_HOST_DEVICE static float rotate(const FactGemmArgs& args, int64_t m, int64_t j, Pre pre) {
    const FactGemmStep& s = Base::step(args);
    const int64_t c = j % s.group, head = j - c, half = s.group / 2;
    const int64_t pair = s.interleaved ? c / 2 : c % half;
    const bool second = s.interleaved ? (c % 2 == 1) : (c >= half);
    const float xa = pre(head + 2 * pair), xb = pre(head + 2 * pair + 1);
    const int64_t table = (m / s.period) * s.period_stride + (m % s.period) * s.ld + c;
    const float cos_c = detail::load_as_float<ElementTable>(s.operand, table);
    const float sin_c = detail::load_as_float<ElementTable>(s.operand2, table);
    return second ? xb * cos_c + xa * sin_c : xa * cos_c - xb * sin_c;
  }

  template <class Pre>
  CUTLASS_HOST_DEVICE static float stored(const FactGemmArgs& args, int64_t m, int64_t j, Pre pre) {
    return rotate(args, m, j, pre);
  }

  static bool matches(const FactGemmArgs& args) {
    const FactGemmStep& s = Base::step(args);
    return Prev::matches(args) && s.kind == FACT_STEP_ROPE &&
           s.operand_type == detail::dtype_id<ElementTable>();
  }
  static void describe(FactGemmStep* steps) {
    Base::describe_step(steps, FACT_STEP_ROPE, FACT_ACT_IDENTITY, detail::dtype_id<ElementTable>());
  }

  template <class Cfg>
  static int check_operands(const FactGemmArgs& args, bool size_query) {
    if (int status = Prev::template check_operands<Cfg>(args, size_query); status != FACT_OK) {
      return status;
    }
    const FactGemmStep& s = Base::step(args);
    if (!Cfg::kRowMajorC || args.batch != 1 || s.group <= 0 || s.group % 2 != 0 ||
        args.n % s.group != 0 || s.period <= 0 || args.m % s.period != 0 || s.ld < 0 ||
        s.period_stride < 0) {
      return FACT_ERR_INVALID_ARGS;
    }
    // Rotate-half pairs map a subtile onto two runs of original columns inside one head.
    constexpr int kEpiN = cute::size<1>(typename Cfg::EpilogueTile{});
    if (!s.interleaved && s.group % kEpiN != 0) return FACT_ERR_CANNOT_IMPLEMENT;
    if (size_query) return FACT_OK;
    if (s.operand == nullptr || s.operand2 == nullptr) return FACT_ERR_INVALID_ARGS;
    // TMA stores D: 16-byte rows.
    const int64_t v = 16 / fact_gemm_dtype_bytes(args.d_type);
    if (args.ldd % v != 0) return FACT_ERR_CANNOT_IMPLEMENT;
    return FACT_OK;
  }
};

}  // namespace fact::gemm::epilogue
