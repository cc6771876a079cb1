/* The GEMM kind's argument struct (FACT C ABI version 2, docs/abi.md):
 *
 *   D[o, l] = epilogue(alpha · A[o, l] · B[o, l]),  A: M×K, B: K×N, D: M×N,
 *             l < batch (the kernel's batch mode), o < outer_batch (a second batch mode)
 *
 * FactGemmStep grew operand2 / period / period_stride / group / interleaved for a step over two
 * tables (OPERAND TABLES in ops.def): the struct's size (FactCallHeader::size) tells images of
 * either layout apart.
 *
 * The epilogue is data: `steps[0..num_steps)` applied in order to alpha·A·B, each with its own
 * constants and operand. A kernel is compiled for one sequence of step kinds (and activations);
 * it refuses (FACT_ERR_INVALID_ARGS) a call whose steps differ in kind, and reads every
 * constant and pointer from the call, so one kernel serves every constant.
 *
 * Leading dimensions are in elements for the layouts the kernel was built for (its
 * fact_kernel_info spec); batch strides are elements between consecutive batches (0 = the same
 * matrix for every batch).
 */
#ifndef FACT_GEMM_ABI_H
#define FACT_GEMM_ABI_H
#include "fact/runtime/fact_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FACT_GEMM_KIND_NAME "gemm"
#define FACT_GEMM_MAX_STEPS 8

/* Operands the plan padded once (weights): the entry reads them in place instead of staging
 * them (gemm_padding.h). A flagged operand's leading dimension and batch strides are 16-byte
 * aligned and it holds zeros from the call's extents up to the padded ones.
 * FACT_GEMM_PADDED_D: D's rows hold the padded extent (a result allocated with padded rows and
 * handed on as its [..., :N] view, docs/plan.md "alloc_shape"): ldd and D's batch stride are
 * 16-byte aligned and the kernel may write every row's columns up to N padded, so the entry
 * writes D in place instead of staging it; what it writes past N is not part of the result. */
typedef enum FactGemmPadded {
  FACT_GEMM_PADDED_A = 1,
  FACT_GEMM_PADDED_B = 2,
  FACT_GEMM_PADDED_D = 4,
} FactGemmPadded;

typedef enum FactLayout {
  FACT_ROW_MAJOR = 0,     /* the second mode is contiguous (A: K, B: N) */
  FACT_COLUMN_MAJOR = 1,  /* the first mode is contiguous (A: M, B: K) */
} FactLayout;

/* Step kinds and activations: one entry each in the table patterns/gemm/epilogue/ops.def
 * declares (its abi_id column; values never change). What the first steps compute:
 *   SCALE          x *= value
 *   ADD_SCALAR     x += value
 *   BIAS           x += value · operand[n]    (a length-N vector; batch_stride per batch)
 *   ACTIVATION     x = act(x; p0, p1)
 *   RESIDUAL       x += value · operand[m, n] (an M×N tensor in D's layout)
 *   MULTIPLY       x *= operand[m, n]         (an M×N tensor in D's layout)
 * The steps pattern folders register are documented in their epilogue_steps.def (ops.def
 * includes them; the STORES_D column says which step writes D itself, and with how many columns).
 * Activations: LEAKY_RELU's slope is p0; HARDTANH clamps to [p0, p1] (±inf for a one-sided
 * clamp); the others take no parameter. Ops added later are documented at their entries in
 * ops.def. */
typedef enum FactGemmStepKind {
#define FACT_GEMM_STEP(C_NAME, CPP, ID, ...) FACT_STEP_##C_NAME = ID,
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_STEP
} FactGemmStepKind;

typedef enum FactActivation {
#define FACT_GEMM_ACTIVATION(C_NAME, CPP, ID, ...) FACT_ACT_##C_NAME = ID,
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_ACTIVATION
} FactActivation;

typedef struct FactGemmStep {
  int32_t kind;          /* FactGemmStepKind */
  int32_t activation;    /* FactActivation for ACTIVATION steps, else 0 */
  float value;           /* SCALE factor, ADD_SCALAR addend, RESIDUAL beta, BIAS multiplier
                            (addmm's beta; 1 for a plain bias); else 0 */
  float p0, p1;          /* ACTIVATION parameters; else 0 */
  int32_t operand_type;  /* FactDType of `operand` (a step with an operand, OPERAND in ops.def),
                            else 0 */
  const void* operand;   /* COLUMN_VECTOR / ROW_VECTOR vector, MATRIX tensor, TABLES first table;
                            else NULL */
  int64_t ld;            /* MATRIX: leading dimension in D's layout; TABLES: elements between
                            positions; else 0 */
  int64_t batch_stride;  /* vectors and MATRIX: elements between batches (0 = shared) */
  int64_t outer_batch_stride; /* any operand: elements between outer batches */
  const void* operand2;  /* TABLES: the second table (same dtype and strides as operand); else
                            NULL */
  int64_t period;        /* TABLES: rows of M per sequence (position = m % period); else 0 */
  int64_t period_stride; /* TABLES: elements between the tables of consecutive sequences (0: one
                            table for every sequence); else 0 */
  int32_t group;         /* TABLES: columns per head (even); else 0 */
  int32_t interleaved;   /* TABLES: 1 pairs (2p, 2p+1), 0 pairs (p, p + group/2); else 0 */
} FactGemmStep;

typedef struct FactGemmArgs {
  FactCallHeader header;     /* {FACT_ABI_VERSION, fact_kind_id("gemm"), sizeof(FactGemmArgs), 0} */
  int64_t m, n, k, batch;
  int64_t outer_batch;             /* the second batch mode (>= 1; 0 reads as 1) */
  int32_t a_type, b_type, d_type;  /* FactDType of A, B, D (a kernel checks them against its build) */
  int32_t a_layout, b_layout;      /* FactLayout of A (M×K) and B (K×N); D is row-major */
  int32_t padded;                  /* FactGemmPadded bits: operands that already hold zeros up to
                                      the extents the kernel runs (gemm_padding.h); 0: none */
  const void* a; int64_t lda, stride_a, outer_stride_a;
  const void* b; int64_t ldb, stride_b, outer_stride_b;
  void* d;       int64_t ldd, stride_d, outer_stride_d;
  float alpha;               /* scale of A·B */
  int32_t split_k;           /* split-K slices for split-K kernels (>= 1; 0 = the kernel's own) */
  int32_t sm_count;          /* SMs for persistent kernels; 0 = all */
  int32_t num_steps;         /* entries of `steps` in use */
  FactGemmStep steps[FACT_GEMM_MAX_STEPS];
} FactGemmArgs;

/* The STORES_D column (ops.def) of a step kind: 0 when the collective stores D (or the kind is
 * unknown), 1 when the step writes D itself, 2 when it writes D with N/2 columns. */
static inline int fact_gemm_step_stores_d(int32_t kind) {
  switch (kind) {
#define FACT_GEMM_STEP(C_NAME, CPP, ID, NAME, TOKEN, LINK, OPERAND, CONSTANTS, STORES_D, ...) \
    case ID: return STORES_D;
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_STEP
    default: return 0;
  }
}

/* The call's FactGemmArgs when its header says it is one (ABI version, kind "gemm", size), else
 * NULL: the first check of every GEMM entry, and what a launch may be compared by. */
static inline const FactGemmArgs* fact_gemm_args_of(const FactCallHeader* header) {
  if (header == NULL || header->abi_version != FACT_ABI_VERSION ||
      header->kind != fact_kind_id(FACT_GEMM_KIND_NAME) || header->size != sizeof(FactGemmArgs)) {
    return NULL;
  }
  return (const FactGemmArgs*)header;
}

/* fact_gemm_step_stores_d of the last step (0 without steps). */
static inline int fact_gemm_last_step_stores_d(const FactGemmArgs* args) {
  if (args->num_steps <= 0 || args->num_steps > FACT_GEMM_MAX_STEPS) return 0;
  return fact_gemm_step_stores_d(args->steps[args->num_steps - 1].kind);
}

/* Columns of D: N, or N/2 when the last step pairs product columns into one (STORES_D 2). */
static inline int64_t fact_gemm_d_cols(const FactGemmArgs* args) {
  return fact_gemm_last_step_stores_d(args) == 2 ? args->n / 2 : args->n;
}

/* Bytes of one element of a FactDType (0 for NONE / unknown). */
static inline int64_t fact_gemm_dtype_bytes(int32_t type) {
  return type == FACT_DTYPE_F32 ? 4 : type == FACT_DTYPE_F64 ? 8
         : (type == FACT_DTYPE_F16 || type == FACT_DTYPE_BF16) ? 2 : 0;
}

/* The outer batches a call runs (outer_batch, 0 read as 1). */
static inline int64_t fact_gemm_outer_count(const FactGemmArgs* args) {
  return args->outer_batch > 1 ? args->outer_batch : 1;
}

static inline const void* fact_gemm_advance(const void* p, int64_t elements, int32_t type) {
  return p ? (const void*)((const char*)p + elements * fact_gemm_dtype_bytes(type)) : p;
}

/* The call of outer batch `o` of `args`: A, B, D and every step's operand advanced by o outer
 * strides, outer_batch 1 and outer strides 0; everything else as in `args` (NULL pointers stay
 * NULL, as in a size query). */
static inline FactGemmArgs fact_gemm_outer_slice(const FactGemmArgs* args, int64_t o) {
  FactGemmArgs s = *args;
  int i;
  s.outer_batch = 1;
  s.a = fact_gemm_advance(args->a, o * args->outer_stride_a, args->a_type);
  s.b = fact_gemm_advance(args->b, o * args->outer_stride_b, args->b_type);
  s.d = (void*)fact_gemm_advance(args->d, o * args->outer_stride_d, args->d_type);
  s.outer_stride_a = s.outer_stride_b = s.outer_stride_d = 0;
  for (i = 0; i < FACT_GEMM_MAX_STEPS && i < args->num_steps; ++i) {
    s.steps[i].operand = fact_gemm_advance(args->steps[i].operand,
                                           o * args->steps[i].outer_batch_stride,
                                           args->steps[i].operand_type);
    s.steps[i].operand2 = fact_gemm_advance(args->steps[i].operand2,
                                            o * args->steps[i].outer_batch_stride,
                                            args->steps[i].operand_type);
    s.steps[i].outer_batch_stride = 0;
  }
  return s;
}

#ifdef __cplusplus
}
#endif
#endif /* FACT_GEMM_ABI_H */
