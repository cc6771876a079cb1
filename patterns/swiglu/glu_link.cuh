// The SwiGLU pattern's epilogue link (registered in epilogue_steps.def, included by
// patterns/gemm/gemm_epilogue.cuh at its end, which defines the link helpers used here).
#pragma once
#include "patterns/gemm/gemm_epilogue.cuh"
#include "patterns/swiglu/glu_store.cuh"

namespace fact::gemm::epilogue {

// act(x[m, 2j]) · x[m, 2j+1] -> D[m, j]: a gated linear unit over interleaved gate / up columns,
// the chain's last link (FACT_STEP_GLU; glu_store.cuh). D is M×(N/2) and written by this link
// (the kernel's collective epilogue has a void D); `reference` is the value before the gate (per
// column), `gate` the pair's product. Activations: SiLu, GELU, GELU_taylor, Sigmoid, ReLu.
template <template <class> class ActivationFn, class Prev>
struct Glu : detail::LinkBase<Prev> {
  using Base = detail::LinkBase<Prev>;
  static constexpr bool kHalvesColumns = true;
  static constexpr bool kStoresD = true;
  static constexpr int32_t kActivation = detail::ActivationId<ActivationFn>::value;
  static_assert(detail::activation_gates(kActivation),
                "a gate takes an activation without parameters (ops.def's GATES column)");
  static_assert(!Prev::kReadsSource, "no M×N operand before a gate (the kernel has no C)");

  template <class Cfg, class ElementOut>
  using Store = detail::Sm90GluStore<typename Cfg::CtaTile, typename Cfg::EpilogueTile, ElementOut,
                                     typename Cfg::ElementCompute, ActivationFn, Cfg::kRound>;
  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<Store<Cfg, ElementOut>,
                                       typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    typename Store<Cfg, ElementOut>::Arguments store{static_cast<ElementOut*>(args.d), args.ldd,
                                                     args.stride_d};
    return {Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args), store};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    return Prev::template reference<Cfg>(args, accumulator, m, n, l);
  }
  CUTLASS_HOST_DEVICE static float gate(float gate_value, float up_value) {
    return ActivationFn<float>{}(gate_value) * up_value;
  }
  // D[m, j] from the values `pre(column)` of row m before the gate.
  template <class Pre>
  CUTLASS_HOST_DEVICE static float stored(const FactGemmArgs&, int64_t, int64_t j, Pre pre) {
    return gate(pre(2 * j), pre(2 * j + 1));
  }

  static bool matches(const FactGemmArgs& args) {
    const FactGemmStep& s = Base::step(args);
    return Prev::matches(args) && s.kind == FACT_STEP_GLU && s.activation == kActivation;
  }
  static void describe(FactGemmStep* steps) {
    Base::describe_step(steps, FACT_STEP_GLU, kActivation, FACT_DTYPE_NONE);
  }

  template <class Cfg>
  static int check_operands(const FactGemmArgs& args, bool size_query) {
    if (int status = Prev::template check_operands<Cfg>(args, size_query); status != FACT_OK) {
      return status;
    }
    if (args.n % 2 != 0 || !Cfg::kRowMajorC) return FACT_ERR_INVALID_ARGS;
    if (size_query) return FACT_OK;
    // TMA stores D: 16-byte rows and batches.
    const int64_t v = 16 / fact_gemm_dtype_bytes(args.d_type);
    if (args.ldd % v != 0 || args.stride_d % v != 0) return FACT_ERR_CANNOT_IMPLEMENT;
    return FACT_OK;
  }
};

}  // namespace fact::gemm::epilogue
