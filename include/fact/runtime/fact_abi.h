/* FACT kernel C ABI: every generated kernel library exports one entry point of this shape.
 *
 *   extern "C" int fact_<key>(const FactGemmArgs* args, void* workspace,
 *                             size_t* workspace_size, cudaStream_t stream);
 *
 * - workspace_size != NULL: a size query. Writes the bytes of device workspace the kernel needs
 *   for `args` and returns FACT_OK without launching (args pointers may be NULL then).
 * - workspace_size == NULL: checks can_implement, then launches on `stream`. `workspace` must
 *   hold at least the queried size (may be NULL when that size is 0).
 * - Returns a FactStatus; never throws across the boundary.
 *
 * Each library also exports `const char* fact_kernel_info(void)`: the KernelSpec as JSON
 * (including "entry": the symbol name above), so a loader needs no side files.
 *
 * Matrices: A is M×K, B is K×N, C and D are M×N, each `batch` times. `ld*` is the leading
 * dimension in elements for the layout the kernel was generated for, `stride_*` the distance
 * in elements between consecutive batches (0 = the same matrix for every batch).
 */
#ifndef FACT_ABI_H
#define FACT_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FACT_ABI_VERSION 1

typedef enum FactStatus {
  FACT_OK = 0,
  FACT_ERR_INVALID_ARGS = 1,    /* null pointer, wrong ABI version, non-positive size */
  FACT_ERR_CANNOT_IMPLEMENT = 2, /* CUTLASS can_implement refused (alignment, shape) */
  FACT_ERR_WORKSPACE = 3,       /* workspace missing or too small */
  FACT_ERR_INITIALIZE = 4,      /* kernel initialize() failed */
  FACT_ERR_LAUNCH = 5,          /* launch failed (cudaGetLastError after launch) */
  FACT_ERR_INTERNAL = 6,        /* unexpected failure inside the library (caught exception) */
} FactStatus;

typedef struct FactGemmArgs {
  int32_t abi_version; /* FACT_ABI_VERSION */
  int64_t m, n, k, batch;
  const void* a; int64_t lda, stride_a;
  const void* b; int64_t ldb, stride_b;
  const void* c; int64_t ldc, stride_c; /* residual (Residual step) or multiplier (Multiply) */
  void* d;       int64_t ldd, stride_d;
  const void* bias;                     /* length-N vector for the Bias step, else NULL */
  float alpha;                          /* scale of A·B */
  float beta;                           /* scale of C for the Residual step */
  float act_p0, act_p1;                 /* activation parameters (leaky slope; clamp bounds) */
  int32_t split_k;                      /* split-K slices for split-K kernels (>= 1) */
  int32_t sm_count;                     /* SMs to use for persistent kernels; 0 = all */
} FactGemmArgs;

typedef int (*FactGemmEntry)(const FactGemmArgs*, void*, size_t*, void* /* cudaStream_t */);
typedef const char* (*FactKernelInfo)(void);

#ifdef __cplusplus
}
#endif
#endif /* FACT_ABI_H */
