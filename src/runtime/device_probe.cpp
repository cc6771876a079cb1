#include "fact/runtime/device_probe.hpp"

#include <chrono>

#include <cublas_v2.h>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_kernels.hpp"
#include "fact/runtime/run_kernel.hpp"

namespace fact::runtime {

using core::PrecisionMode;
using core::DType;
using nlohmann::json;

namespace {

json describe_rate(const TimingStats& ms, double rate, const char* unit) {
  return {{"ms", to_json(ms)}, {unit, rate}};
}

// A cuBLAS handle for the rate measurements.
class CublasHandle {
 public:
  CublasHandle() { FACT_CUBLAS_CHECK(cublasCreate(&handle_)); }
  ~CublasHandle() { cublasDestroy(handle_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// D = A·B for square row-major matrices (computed column-major as Dᵀ = Bᵀ·Aᵀ): float32 with
// TF32 allowed or not, or bf16 with float32 accumulation.
void cublas_square_gemm(const CublasHandle& blas, DType dtype, PrecisionMode precision, int64_t size,
                        const void* a, const void* b, void* d, cudaStream_t stream) {
  const cudaDataType_t type = dtype == DType::Float32 ? CUDA_R_32F : CUDA_R_16BF;
  const cublasComputeType_t compute = dtype == DType::Float32 && precision == PrecisionMode::Tf32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  const float alpha = 1.0f, beta = 0.0f;
  const int n = static_cast<int>(size);
  FACT_CUBLAS_CHECK(cublasSetStream(blas.get(), stream));
  FACT_CUBLAS_CHECK(cublasGemmEx(blas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b, type, n,
                                 a, type, n, &beta, d, type, n, compute, CUBLAS_GEMM_DEFAULT));
}

struct GemmRate {
  double flops_per_s = 0;
  json detail;
};

GemmRate measure_gemm(const CublasHandle& blas, DType dtype, PrecisionMode precision, int64_t size,
                      const DeviceProbeOptions& options, L2Flusher& flusher, cudaStream_t stream) {
  const int bytes = element_bytes(dtype == DType::Float32 ? ElementType::F32 : ElementType::BF16);
  const size_t matrix_bytes = static_cast<size_t>(size * size) * static_cast<size_t>(bytes);
  DeviceBuffer a(matrix_bytes), b(matrix_bytes), d(matrix_bytes);
  const ElementType type = dtype == DType::Float32 ? ElementType::F32 : ElementType::BF16;
  launch_fill_uniform(a.data(), type, size * size, 0x1234, 1.0f, stream);
  launch_fill_uniform(b.data(), type, size * size, 0x5678, 1.0f, stream);
  FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const TimingStats ms = time_launches(
      [&](cudaStream_t s) {
        cublas_square_gemm(blas, dtype, precision, size, a.data(), b.data(), d.data(), s);
      },
      stream, options.timing, &flusher);
  GemmRate rate;
  rate.flops_per_s = 2.0 * double(size) * double(size) * double(size) / (ms.median * 1e-3);
  rate.detail = describe_rate(ms, rate.flops_per_s, "flops_per_s");
  rate.detail["size"] = size;
  rate.detail["dtype"] = core::dtype_name(dtype);
  rate.detail["compute"] = precision == PrecisionMode::Tf32 ? "CUBLAS_COMPUTE_32F_FAST_TF32"
                                                            : "CUBLAS_COMPUTE_32F";
  return rate;
}

}  // namespace

DeviceReport measure_device(const DeviceProbeOptions& options) {
  if (cuda_device_count() == 0) throw CudaError("no CUDA device is visible");
  FACT_CUDA_CHECK(cudaSetDevice(options.device));
  DeviceReport report;
  cudaDeviceProp prop{};
  FACT_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  report.device_index = options.device;
  report.profile.name = prop.name;
  report.sm_count = prop.multiProcessorCount;
  report.cc_major = prop.major;
  report.cc_minor = prop.minor;
  report.l2_bytes = prop.l2CacheSize;
  report.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  FACT_CUDA_CHECK(cudaDriverGetVersion(&report.driver_version));
  report.driver_release = nvidia_driver_release();
  FACT_CUDA_CHECK(cudaRuntimeGetVersion(&report.runtime_version));
  report.cublas_version = cublas_library_version();

  CudaStream stream;
  L2Flusher flusher;
  report.measurements["timing"] = describe(options.timing, &flusher);

  {  // Device-to-device copy bandwidth.
    DeviceBuffer src(options.copy_bytes), dst(options.copy_bytes);
    launch_fill_uniform(src.data(), ElementType::F32, static_cast<int64_t>(options.copy_bytes / 4),
                        0x9abc, 1.0f, stream.get());
    const TimingStats ms = time_launches(
        [&](cudaStream_t s) {
          FACT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), options.copy_bytes,
                                          cudaMemcpyDeviceToDevice, s));
        },
        stream.get(), options.timing, &flusher);
    report.profile.hbm_bytes_per_s = 2.0 * double(options.copy_bytes) / (ms.median * 1e-3);
    report.measurements["copy"] = describe_rate(ms, report.profile.hbm_bytes_per_s, "bytes_per_s");
    report.measurements["copy"]["bytes"] = options.copy_bytes;
  }

  CublasHandle blas;
  const GemmRate bf16 = measure_gemm(blas, DType::BFloat16, PrecisionMode::Native,
                                     options.gemm_size, options, flusher, stream.get());
  const GemmRate tf32 = measure_gemm(blas, DType::Float32, PrecisionMode::Tf32, options.gemm_size,
                                     options, flusher, stream.get());
  const GemmRate fp32 = measure_gemm(blas, DType::Float32, PrecisionMode::Strict,
                                     options.gemm_size, options, flusher, stream.get());
  report.profile.bf16_flops = bf16.flops_per_s;
  report.profile.tf32_flops = tf32.flops_per_s;
  report.profile.fp32_flops = fp32.flops_per_s;
  report.measurements["gemm_bf16"] = bf16.detail;
  report.measurements["gemm_tf32"] = tf32.detail;
  report.measurements["gemm_fp32"] = fp32.detail;

  {  // Launch overhead: GPU time per queued empty kernel, and host time per launch call.
    const int launches = std::max(1, options.launches);
    for (int i = 0; i < 100; ++i) launch_empty_kernel(stream.get());
    stream.synchronize();
    CudaEvent start, stop;
    const auto host_start = std::chrono::steady_clock::now();
    FACT_CUDA_CHECK(cudaEventRecord(start.get(), stream.get()));
    for (int i = 0; i < launches; ++i) launch_empty_kernel(stream.get());
    FACT_CUDA_CHECK(cudaEventRecord(stop.get(), stream.get()));
    const double host_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
    FACT_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    const double gpu_s = elapsed_ms(start, stop) * 1e-3;
    report.profile.launch_overhead_s = std::max(gpu_s, host_s) / launches;
    report.measurements["launch"] = {{"launches", launches},
                                     {"gpu_s_per_launch", gpu_s / launches},
                                     {"host_s_per_launch", host_s / launches}};
  }
  return report;
}

}  // namespace fact::runtime
