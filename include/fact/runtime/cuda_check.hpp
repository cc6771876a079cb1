// Error checking for CUDA runtime and cuBLAS calls: every failure becomes a CudaError that
// names the call, the error and the source line.
#pragma once
#include <stdexcept>
#include <string>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace fact::runtime {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throw CudaError("<what> failed: <error name>: <description> (<file>:<line>)") when the
// status is not success.
void check_cuda(cudaError_t status, const char* what, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* what, const char* file, int line);

}  // namespace fact::runtime

#define FACT_CUDA_CHECK(expr) ::fact::runtime::check_cuda((expr), #expr, __FILE__, __LINE__)
#define FACT_CUBLAS_CHECK(expr) ::fact::runtime::check_cublas((expr), #expr, __FILE__, __LINE__)
