/* Forwarding header: the kernel C ABI lives in fact/core/fact_abi.h. This path stays because
 * pattern ABI headers, generated kernels and kernels stored in registries include it; engine code
 * includes fact/core/fact_abi.h. Kernel cache keys hash the header this path leads to
 * (src/realize/render.cpp). */
#include "fact/core/fact_abi.h"
