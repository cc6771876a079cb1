/* FACT kernel C ABI, version 2: what every generated kernel library exports, whatever the
 * problem kind (docs/abi.md).
 *
 *   extern "C" int fact_<key>(const FactCallHeader* args, void* workspace,
 *                             size_t* workspace_size, void* stream);   // stream: cudaStream_t
 *   extern "C" const char* fact_kernel_info(void);   // JSON: kind, abi_version, entry, key, name, spec
 *
 * `args` points at a kind's argument struct, whose first member is a FactCallHeader: the ABI
 * version, the kind's id (fact_kind_id of its name, e.g. "gemm") and the struct's size. The
 * kind's struct is declared by the pattern folder that owns the kind (patterns/KIND/KIND_abi.h);
 * this header knows no kind.
 *
 * - workspace_size != NULL: a size query. Writes the bytes of device workspace the kernel needs
 *   for `args` and returns FACT_OK without launching (pointers in args may be NULL then).
 * - workspace_size == NULL: checks the header (version, kind, size), then can_implement, then
 *   launches on `stream`. `workspace` holds at least the queried size (NULL when that is 0).
 * - Returns a FactStatus; never throws across the boundary.
 */
#ifndef FACT_ABI_H
#define FACT_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FACT_ABI_VERSION 2

typedef enum FactStatus {
  FACT_OK = 0,
  FACT_ERR_INVALID_ARGS = 1,     /* null pointer, wrong ABI version/kind/size, non-positive size,
                                    an epilogue step the kernel was not built for */
  FACT_ERR_CANNOT_IMPLEMENT = 2, /* can_implement refused (alignment, shape) */
  FACT_ERR_WORKSPACE = 3,        /* workspace missing or too small */
  FACT_ERR_INITIALIZE = 4,       /* kernel initialize() failed */
  FACT_ERR_LAUNCH = 5,           /* launch failed (cudaGetLastError after launch) */
  FACT_ERR_INTERNAL = 6,         /* unexpected failure inside the library (caught exception) */
} FactStatus;

/* Element types, for kinds whose arguments name them (kernels check them against their build;
 * the host reference reads by them). */
typedef enum FactDType {
  FACT_DTYPE_NONE = 0,
  FACT_DTYPE_F32 = 1,
  FACT_DTYPE_F16 = 2,
  FACT_DTYPE_BF16 = 3,
  FACT_DTYPE_F64 = 4,
} FactDType;

/* The first member of every kind's argument struct. */
typedef struct FactCallHeader {
  uint32_t abi_version; /* FACT_ABI_VERSION */
  uint32_t kind;        /* fact_kind_id("<kind name>") */
  uint32_t size;        /* sizeof the kind's whole argument struct, this header included */
  uint32_t reserved;    /* 0 */
} FactCallHeader;

typedef int (*FactEntry)(const FactCallHeader* args, void* workspace, size_t* workspace_size,
                         void* stream);
typedef const char* (*FactKernelInfo)(void);

/* A kind's id: FNV-1a (32 bit) of its name. Kinds are named by the pattern folders that own
 * them; no list of kinds exists outside them. */
#ifdef __cplusplus
constexpr
#else
static inline
#endif
uint32_t fact_kind_id(const char* name) {
  uint32_t hash = 2166136261u;
  for (; *name; ++name) hash = (hash ^ (uint32_t)(unsigned char)*name) * 16777619u;
  return hash;
}

#ifdef __cplusplus
}
#endif
#endif /* FACT_ABI_H */
