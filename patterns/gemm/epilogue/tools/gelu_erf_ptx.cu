// PTX instruction counts of the erf-GELU device functors (patterns/gemm/README.md, "erf-GELU
// epilogue cost"): one kernel per functor, y[i] = f(x[i]); the identity kernel is the load /
// store / indexing overhead the others share. Run patterns/gemm/epilogue/tools/gelu_erf_ptx.sh.
#include "cutlass/epilogue/thread/activation.h"
#include "patterns/gemm/epilogue/gelu_erf_fast.h"

#define FACT_PTX_KERNEL(name, expr)                                               \
  extern "C" __global__ void name(const float* __restrict__ x, float* __restrict__ y) { \
    const int i = blockIdx.x * blockDim.x + threadIdx.x;                         \
    const float v = x[i];                                                        \
    y[i] = (expr);                                                               \
  }

FACT_PTX_KERNEL(identity, v)
FACT_PTX_KERNEL(gelu_erff_cutlass, cutlass::epilogue::thread::GELU<float>{}(v))
FACT_PTX_KERNEL(gelu_tanh_approx_cutlass, cutlass::epilogue::thread::GELU_taylor<float>{}(v))
FACT_PTX_KERNEL(gelu_erf_fast, fact::gemm::approx::gelu_erf_fast(v))
