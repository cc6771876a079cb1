/* Test data: a made-up problem kind for the Python tests, so that composition can be tested
 * without a GPU and without the engine. It exports what the engine library (libfact) exports
 * for the CPU path, `fact_reference_call`, for two kinds of its own:
 *
 *   "axpby"       y = a*x + b*z over n elements (and, when w != NULL, w = x*z)
 *   "axpby_half"  the same, but writes only the first half of y and w (a broken kernel)
 *
 * Its argument struct starts with FactCallHeader like every kind's (docs/abi.md). The tests
 * pack it with Python's struct module (tests/python/fake_kind.py); nothing in python/fact
 * knows it. Elements are addressed with element strides, so a dense tensor of any rank is read
 * as n elements with stride 1. dtype: 0 = float32, 1 = float64.
 *
 * It also exports a host-memory "kernel library" entry (fact_kernel_info and
 * fact_axpby_host) with the ABI's calling convention, for the ctypes loader's tests.
 */
#include <stddef.h>
#include <stdint.h>

#include "fact/runtime/fact_abi.h"

typedef struct AxpbyArgs {
  FactCallHeader header; /*   0 */
  int64_t n;             /*  16 */
  int32_t dtype;         /*  24 */
  int32_t reserved;      /*  28 */
  double a, b;           /*  32, 40 */
  const void* x;         /*  48 */
  int64_t x_stride;      /*  56 */
  const void* z;         /*  64 */
  int64_t z_stride;      /*  72 */
  void* y;               /*  80 */
  int64_t y_stride;      /*  88 */
  void* w;               /*  96 */
  int64_t w_stride;      /* 104 */
} AxpbyArgs;             /* 112 */

static double load(const void* base, int32_t dtype, int64_t i) {
  return dtype == 0 ? (double)((const float*)base)[i] : ((const double*)base)[i];
}

static void store(void* base, int32_t dtype, int64_t i, double value) {
  if (dtype == 0) {
    ((float*)base)[i] = (float)value;
  } else {
    ((double*)base)[i] = value;
  }
}

static int run(const AxpbyArgs* args, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double x = load(args->x, args->dtype, i * args->x_stride);
    const double z = load(args->z, args->dtype, i * args->z_stride);
    store(args->y, args->dtype, i * args->y_stride, args->a * x + args->b * z);
    if (args->w) store(args->w, args->dtype, i * args->w_stride, x * z);
  }
  return FACT_OK;
}

int fact_reference_call(const FactCallHeader* header) {
  if (!header || header->abi_version != FACT_ABI_VERSION) return FACT_ERR_INVALID_ARGS;
  if (header->size != sizeof(AxpbyArgs)) return FACT_ERR_INVALID_ARGS;
  const AxpbyArgs* args = (const AxpbyArgs*)header;
  if (args->n < 0 || (args->dtype != 0 && args->dtype != 1)) return FACT_ERR_INVALID_ARGS;
  if (!args->x || !args->z || !args->y) return FACT_ERR_INVALID_ARGS;
  if (header->kind == fact_kind_id("axpby")) return run(args, args->n);
  if (header->kind == fact_kind_id("axpby_half")) return run(args, args->n / 2);
  return FACT_ERR_INVALID_ARGS;
}

const char* fact_kernel_info(void) {
  return "{\"kind\": \"axpby\", \"abi_version\": 2, \"spec\": {\"entry\": \"nested\"},"
         " \"entry\": \"fact_axpby_host\", \"key\": \"00axpby00host00\", \"name\": \"axpby_host\"}";
}

/* The kernel-library convention on host memory: a size query, then a "launch" (stream unused). */
int fact_axpby_host(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                    void* stream) {
  (void)stream;
  if (!header || header->kind != fact_kind_id("axpby")) return FACT_ERR_INVALID_ARGS;
  if (workspace_size) {
    *workspace_size = 64;
    return FACT_OK;
  }
  if (!workspace) return FACT_ERR_WORKSPACE;
  return fact_reference_call(header);
}
