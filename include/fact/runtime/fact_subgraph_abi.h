/* Forwarding header: the subgraph kernel ABI lives in fact/core/fact_subgraph_abi.h. This path
 * stays because kernels written by agents and stored in registries include it; engine code
 * includes fact/core/fact_subgraph_abi.h. */
#include "fact/core/fact_subgraph_abi.h"
