// The GEMM entries' launches prepared once per argument set (fact/runtime/prepared_launches.h):
// a call equal to one the entry prepared before skips the argument checks, can_implement and
// to_underlying_arguments (a TMA descriptor per operand) and launches the kept Params. The
// kernel's shared-memory attribute is set once per device, not on every call as CUTLASS's
// initialize does.
#pragma once
#include <atomic>

#include <cuda_runtime.h>

#include "cutlass/device_kernel.h"
#include "fact/runtime/prepared_launches.h"
#include "patterns/gemm/gemm_abi.h"

namespace fact::gemm {

template <class Prepared>
using PreparedLaunches = fact::runtime::PreparedLaunches<FactGemmArgs, Prepared>;

// cudaFuncSetAttribute for the kernel's dynamic shared memory, once per device.
template <class GemmKernel>
bool ensure_shared_memory_attribute(int device) {
  static std::atomic<bool> done[64];
  const bool cacheable = device >= 0 && device < 64;
  if (cacheable && done[device].load(std::memory_order_acquire)) {
    return true;
  }
  constexpr int smem_size = GemmKernel::SharedStorageSize;
  if (smem_size >= (48 << 10)) {
    if (cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_size) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
  }
  if (cacheable) {
    done[device].store(true, std::memory_order_release);
  }
  return true;
}

}  // namespace fact::gemm
