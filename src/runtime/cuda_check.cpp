#include "fact/runtime/cuda_check.hpp"

#include <cublas_v2.h>

namespace fact::runtime {

static std::string where(const char* file, int line) {
  return " (" + std::string(file) + ":" + std::to_string(line) + ")";
}

void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw CudaError(std::string(what) + " failed: " + cudaGetErrorName(status) + ": " +
                  cudaGetErrorString(status) + where(file, line));
}

void check_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(what) + " failed: " + cublasGetStatusName(status) + ": " +
                  cublasGetStatusString(status) + where(file, line));
}

}  // namespace fact::runtime
