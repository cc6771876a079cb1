/* Test data: the fake "axpby" kind of fake_kind.c as a CUDA kernel library, for the GPU tests
 * of fact::launch's CUDA implementations (tests/python/test_compose_gpu.py). Same argument
 * struct, same kinds ("axpby_half" writes only the first half); it exports what every FACT
 * kernel library exports (docs/abi.md): fact_kernel_info and an entry with the size-query /
 * launch convention. It asks for workspace so that the op's workspace path is exercised.
 * Built at test time with nvcc. */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "fact/runtime/fact_abi.h"

struct AxpbyArgs {
  FactCallHeader header;
  int64_t n;
  int32_t dtype;
  int32_t reserved;
  double a, b;
  const void* x;
  int64_t x_stride;
  const void* z;
  int64_t z_stride;
  void* y;
  int64_t y_stride;
  void* w;
  int64_t w_stride;
};
static_assert(sizeof(AxpbyArgs) == 112, "the tests pack 112 bytes");

template <typename T>
__global__ void axpby(AxpbyArgs args, int64_t count, unsigned int* workspace) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i == 0) workspace[0] = 1u;  // touches the workspace: it must be there
  if (i >= count) return;
  const double x = static_cast<const T*>(args.x)[i * args.x_stride];
  const double z = static_cast<const T*>(args.z)[i * args.z_stride];
  static_cast<T*>(args.y)[i * args.y_stride] = static_cast<T>(args.a * x + args.b * z);
  if (args.w) static_cast<T*>(args.w)[i * args.w_stride] = static_cast<T>(x * z);
}

extern "C" const char* fact_kernel_info(void) {
  return "{\"kind\": \"axpby\", \"abi_version\": 2, \"entry\": \"fact_axpby_cuda\", "
         "\"key\": \"00axpby00cuda00\", \"name\": \"axpby_cuda\", \"spec\": {}}";
}

extern "C" int fact_axpby_cuda(const FactCallHeader* header, void* workspace,
                               size_t* workspace_size, void* stream) {
  if (!header || header->abi_version != FACT_ABI_VERSION || header->size != sizeof(AxpbyArgs)) {
    return FACT_ERR_INVALID_ARGS;
  }
  const bool half = header->kind == fact_kind_id("axpby_half");
  if (!half && header->kind != fact_kind_id("axpby")) return FACT_ERR_INVALID_ARGS;
  if (workspace_size) {
    *workspace_size = 256;
    return FACT_OK;
  }
  const AxpbyArgs* args = reinterpret_cast<const AxpbyArgs*>(header);
  if (!workspace) return FACT_ERR_WORKSPACE;
  if (!args->x || !args->z || !args->y || args->n < 0) return FACT_ERR_INVALID_ARGS;
  const int64_t count = half ? args->n / 2 : args->n;
  const unsigned int blocks = static_cast<unsigned int>((count + 255) / 256);
  auto* scratch = static_cast<unsigned int*>(workspace);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (args->dtype == 0) {
    axpby<float><<<blocks > 0 ? blocks : 1, 256, 0, s>>>(*args, count, scratch);
  } else if (args->dtype == 1) {
    axpby<double><<<blocks > 0 ? blocks : 1, 256, 0, s>>>(*args, count, scratch);
  } else {
    return FACT_ERR_INVALID_ARGS;
  }
  return cudaGetLastError() == cudaSuccess ? FACT_OK : FACT_ERR_LAUNCH;
}
