/* The "subgraph" argument struct of the kernel C ABI (docs/abi.md, docs/agent.md): a call that
 * computes a captured subgraph as a whole, described by its tensors alone. It is the ABI of
 * kernels that no pattern's kind describes, i.e. those an agent writes for a NEW match: the
 * kernel receives the tensors the subgraph reads from outside (in the order of the agent task's
 * "operands") and the tensors it hands back (the task's "results"), each with its element type,
 * shape and strides, and computes what the subgraph's reference semantics say (its constants
 * are part of the kernel). Knows no kind; the engine packs it for any match.
 *
 *   extern "C" int fact_<key>(const FactCallHeader* args, void* workspace,
 *                             size_t* workspace_size, void* stream);
 *
 * args->kind == fact_kind_id("subgraph"), args->size == sizeof(FactSubgraphArgs). The
 * calling convention is the common one (fact_abi.h): a size query when workspace_size is not
 * NULL, else check, can_implement, run on `stream`. A library compiled for the host (the CPU
 * path, `"device": "host"` in fact_kernel_info) runs on host pointers with stream == NULL and
 * must have written every result when it returns.
 */
#ifndef FACT_SUBGRAPH_ABI_H
#define FACT_SUBGRAPH_ABI_H
#include "fact/core/fact_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FACT_SUBGRAPH_MAX_RANK 8
#define FACT_SUBGRAPH_MAX_TENSORS 16

/* Element types beyond FactDType's floating ones (integer and boolean inputs of a subgraph). */
#define FACT_SUBGRAPH_DTYPE_I64 100
#define FACT_SUBGRAPH_DTYPE_I32 101
#define FACT_SUBGRAPH_DTYPE_BOOL 102

typedef struct FactTensor {
  void* data;                              /* element [0, ..., 0]; device or host memory */
  int32_t dtype;                           /* FactDType or FACT_SUBGRAPH_DTYPE_* */
  int32_t rank;                            /* 0..FACT_SUBGRAPH_MAX_RANK */
  int64_t shape[FACT_SUBGRAPH_MAX_RANK];   /* sizes; entries past rank are 0 */
  int64_t stride[FACT_SUBGRAPH_MAX_RANK];  /* in elements; entries past rank are 0 */
} FactTensor;

typedef struct FactSubgraphArgs {
  FactCallHeader header;
  int32_t num_operands;                           /* tensors read */
  int32_t num_results;                            /* tensors written */
  FactTensor operands[FACT_SUBGRAPH_MAX_TENSORS];
  FactTensor results[FACT_SUBGRAPH_MAX_TENSORS];
} FactSubgraphArgs;

#ifdef __cplusplus
}
#endif
#endif /* FACT_SUBGRAPH_ABI_H */
