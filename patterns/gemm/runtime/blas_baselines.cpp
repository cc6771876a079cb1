#include "patterns/gemm/runtime/blas_baselines.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <stdexcept>

#include "patterns/gemm/runtime/blas_mapping.hpp"
#include "fact/runtime/cuda_check.hpp"

namespace fact::gemm {

using runtime::check_cublas;
using runtime::CudaError;

namespace {

constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return CUDA_R_32F;
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float16: return CUDA_R_16F;
    default:
      throw std::invalid_argument("no cuBLAS data type for " + std::string(graph::dtype_name(dtype)));
  }
}

cublasComputeType_t compute_type(PrecisionMode precision, DType operands) {
  if (operands == DType::Float32 && precision == PrecisionMode::Tf32) {
    return CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return CUBLAS_COMPUTE_32F;
}

const char* compute_type_name(cublasComputeType_t t) {
  return t == CUBLAS_COMPUTE_32F_FAST_TF32 ? "CUBLAS_COMPUTE_32F_FAST_TF32" : "CUBLAS_COMPUTE_32F";
}

cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

struct GemmExCall {
  ColumnMajorGemm map;
  cudaDataType_t first_type, second_type, out_type;
  cublasComputeType_t compute;
  int64_t batch;
};

GemmExCall gemm_ex_call(const GemmProblem& p, PrecisionMode precision) {
  if (p.a.dtype != p.b.dtype) {
    throw std::invalid_argument("cuBLAS baseline needs A and B of one dtype");
  }
  GemmExCall call;
  call.map = map_to_column_major(p);
  call.first_type = cuda_type(call.map.first_is_b ? p.b.dtype : p.a.dtype);
  call.second_type = cuda_type(call.map.first_is_b ? p.a.dtype : p.b.dtype);
  call.out_type = cuda_type(p.d.dtype);
  call.compute = compute_type(precision, p.a.dtype);
  call.batch = p.batch;
  return call;
}

void run_gemm_ex(cublasHandle_t handle, const GemmExCall& call, float alpha, const void* a,
                 const void* b, void* d, cudaStream_t stream) {
  const ColumnMajorGemm& g = call.map;
  const void* first = g.first_is_b ? b : a;
  const void* second = g.first_is_b ? a : b;
  const float beta = 0.0f;
  FACT_CUBLAS_CHECK(cublasSetStream(handle, stream));
  FACT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, op(g.transpose_first), op(g.transpose_second), static_cast<int>(g.m),
      static_cast<int>(g.n), static_cast<int>(g.k), &alpha, first, call.first_type,
      static_cast<int>(g.ld_first), g.stride_first, second, call.second_type,
      static_cast<int>(g.ld_second), g.stride_second, &beta, d, call.out_type,
      static_cast<int>(g.ld_out), g.stride_out, static_cast<int>(call.batch), call.compute,
      CUBLAS_GEMM_DEFAULT));
}

// Also refuses a gated problem (its last step writes D with N/2 columns): cuBLAS would write
// M × N into its M × N/2 output.
void require_int32(const GemmProblem& p) {
  if (p.gated()) {
    throw std::invalid_argument("cuBLAS baseline: a gated epilogue has no cuBLAS equivalent (D is M x N/2)");
  }
  for (int64_t v : {p.m, p.n, p.k, p.batch, p.a.ld, p.b.ld, p.d.ld}) {
    if (v > INT32_MAX) throw std::invalid_argument("cuBLAS baseline: dimension exceeds int32");
  }
}

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::Default: return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::Relu: return CUBLASLT_EPILOGUE_RELU;
    case LtEpilogue::ReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case LtEpilogue::Gelu: return CUBLASLT_EPILOGUE_GELU;
    case LtEpilogue::GeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

const char* lt_epilogue_name(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::Default: return "DEFAULT";
    case LtEpilogue::Bias: return "BIAS";
    case LtEpilogue::Relu: return "RELU";
    case LtEpilogue::ReluBias: return "RELU_BIAS";
    case LtEpilogue::Gelu: return "GELU";
    case LtEpilogue::GeluBias: return "GELU_BIAS";
  }
  return "DEFAULT";
}

bool has_bias(LtEpilogue e) {
  return e == LtEpilogue::Bias || e == LtEpilogue::ReluBias || e == LtEpilogue::GeluBias;
}

// Descriptors of one cuBLASLt problem; destroyed with the baseline.
struct LtState {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_needed = 0;
  ~LtState() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  FACT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                               static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof count);
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &stride, sizeof stride);
    }
    if (s != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatrixLayoutDestroy(layout);
      check_cublas(s, "cublasLtMatrixLayoutSetAttribute(batch)", __FILE__, __LINE__);
    }
  }
  return layout;
}

std::string algo_description(const cublasLtMatmulAlgo_t& algo, float waves) {
  int32_t id = -1, splitk = -1;
  uint32_t tile = 0, stages = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, nullptr);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, nullptr);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages,
                                       nullptr);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                       sizeof splitk, nullptr);
  return "algo_id=" + std::to_string(id) + " tile_id=" + std::to_string(tile) +
         " stages_id=" + std::to_string(stages) + " splitk=" + std::to_string(splitk) +
         " waves=" + std::to_string(waves);
}

}  // namespace

BlasContext::BlasContext() : workspace_(kBlasWorkspaceBytes) {
  cublasHandle_t handle = nullptr;
  FACT_CUBLAS_CHECK(cublasCreate(&handle));
  cublas_ = handle;
  cublasLtHandle_t lt = nullptr;
  const cublasStatus_t lt_status = cublasLtCreate(&lt);
  if (lt_status != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle);
    check_cublas(lt_status, "cublasLtCreate", __FILE__, __LINE__);
  }
  cublaslt_ = lt;
  const cublasStatus_t ws = cublasSetWorkspace(handle, workspace_.data(), workspace_.bytes());
  const cublasStatus_t math = cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);
  if (ws != CUBLAS_STATUS_SUCCESS || math != CUBLAS_STATUS_SUCCESS) {
    cublasLtDestroy(lt);
    cublasDestroy(handle);
    check_cublas(ws != CUBLAS_STATUS_SUCCESS ? ws : math, "cublasSetWorkspace/MathMode", __FILE__,
                 __LINE__);
  }
}

BlasContext::~BlasContext() {
  if (cublaslt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(cublaslt_));
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
}

Baseline make_cublas_baseline(BlasContext& context, const GemmCase& gemm_case) {
  const GemmProblem p = as_one_batch_mode(gemm_case.problem);
  require_int32(p);
  const GemmExCall call = gemm_ex_call(p, gemm_case.precision);
  Baseline baseline;
  baseline.name = "cublas";
  baseline.computes = with_epilogue_prefix(p, 0);
  baseline.fused = p.epilogue.empty();
  baseline.config = std::string("cublasGemmStridedBatchedEx ") + compute_type_name(call.compute) +
                    " CUBLAS_GEMM_DEFAULT";
  auto handle = static_cast<cublasHandle_t>(context.cublas());
  baseline.launch = [handle, call](const FactGemmArgs& args, cudaStream_t stream) {
    run_gemm_ex(handle, call, args.alpha, args.a, args.b, args.d, stream);
    return static_cast<int>(FACT_OK);
  };
  return baseline;
}

Baseline make_cublaslt_baseline(BlasContext& context, const GemmCase& gemm_case,
                                const FactGemmArgs& sample) {
  const GemmProblem p = as_one_batch_mode(gemm_case.problem);
  require_int32(p);
  const GemmExCall call = gemm_ex_call(p, gemm_case.precision);
  const ColumnMajorGemm& g = call.map;
  const LtEpiloguePlan plan = plan_cublaslt_epilogue(p);

  auto state = std::make_shared<LtState>();
  FACT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&state->desc, call.compute, CUDA_R_32F));
  const int32_t trans_first = op(g.transpose_first), trans_second = op(g.transpose_second);
  FACT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(state->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                   &trans_first, sizeof trans_first));
  FACT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(state->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                   &trans_second, sizeof trans_second));
  const uint32_t epilogue = lt_epilogue(plan.epilogue);
  FACT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(state->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                   &epilogue, sizeof epilogue));
  const bool bias = has_bias(plan.epilogue);
  const int bias_index = plan.bias_step;
  const int residual_index = plan.residual_step;
  if (bias) {
    const EpilogueStep& step = p.epilogue[bias_index];
    if (step.operand_dtype != p.d.dtype) {
      const int32_t bias_type = cuda_type(step.operand_dtype);
      FACT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          state->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    }
    const int64_t bias_stride = step.operand_batch_stride;  // 0: one vector for every batch
    FACT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        state->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride, sizeof bias_stride));
    const void* pointer = sample.steps[bias_index].operand;
    FACT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(state->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &pointer, sizeof pointer));
  }
  state->first = make_layout(call.first_type, g.first_rows(), g.first_cols(), g.ld_first, p.batch,
                             g.stride_first);
  state->second = make_layout(call.second_type, g.second_rows(), g.second_cols(), g.ld_second,
                              p.batch, g.stride_second);
  const cudaDataType_t c_type =
      plan.uses_c ? cuda_type(p.epilogue[residual_index].operand_dtype) : call.out_type;
  state->c = make_layout(c_type, g.m, g.n, g.ld_out, p.batch, g.stride_out);
  state->d = make_layout(call.out_type, g.m, g.n, g.ld_out, p.batch, g.stride_out);

  FACT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&state->preference));
  const uint64_t max_workspace = context.workspace_bytes();
  FACT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      state->preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
      sizeof max_workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  auto lt = static_cast<cublasLtHandle_t>(context.cublaslt());
  FACT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, state->desc, state->first, state->second,
                                                   state->c, state->d, state->preference, 1,
                                                   &result, &returned));
  if (returned < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
    throw CudaError(std::string("cublasLtMatmulAlgoGetHeuristic found no algorithm for epilogue ") +
                    lt_epilogue_name(plan.epilogue));
  }
  state->algo = result.algo;
  state->workspace_needed = result.workspaceSize;

  Baseline baseline;
  baseline.name = "cublaslt";
  baseline.computes = with_epilogue_prefix(p, plan.fused_steps);
  baseline.fused = plan.fused_steps == p.epilogue.size();
  baseline.bias_multiplier_fixed = bias;
  baseline.config = std::string("cublasLtMatmul ") + compute_type_name(call.compute) +
                    " epilogue=" + lt_epilogue_name(plan.epilogue) +
                    (plan.uses_c ? " beta*C" : "") + " " +
                    algo_description(result.algo, result.wavesCount);
  void* workspace = context.workspace();
  const size_t workspace_bytes = context.workspace_bytes();
  const bool uses_c = plan.uses_c;
  LtState* s = state.get();
  baseline.launch = [lt, s, call, bias, bias_index, uses_c, residual_index, workspace,
                     workspace_bytes](const FactGemmArgs& args, cudaStream_t stream) {
    if (bias) {
      const void* pointer = args.steps[bias_index].operand;
      FACT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &pointer, sizeof pointer));
    }
    const void* first = call.map.first_is_b ? args.b : args.a;
    const void* second = call.map.first_is_b ? args.a : args.b;
    const float alpha = args.alpha;
    const float beta = uses_c ? args.steps[residual_index].value : 0.0f;
    const void* c = uses_c ? args.steps[residual_index].operand : args.d;
    FACT_CUBLAS_CHECK(cublasLtMatmul(lt, s->desc, &alpha, first, s->first, second, s->second,
                                     &beta, c, s->c, args.d, s->d, &s->algo, workspace,
                                     workspace_bytes, stream));
    return static_cast<int>(FACT_OK);
  };
  baseline.state = state;
  return baseline;
}

void cublas_gemm_row_major(BlasContext& context, DType dtype, DType out, PrecisionMode precision,
                           int64_t m, int64_t n, int64_t k, const void* a, const void* b, void* d,
                           cudaStream_t stream) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = {.value = "A", .dtype = dtype, .layout = Layout::RowMajor, .ld = k, .batch_stride = m * k};
  p.b = {.value = "B", .dtype = dtype, .layout = Layout::RowMajor, .ld = n, .batch_stride = k * n};
  p.d = {.value = "D", .dtype = out, .layout = Layout::RowMajor, .ld = n, .batch_stride = m * n};
  require_int32(p);
  run_gemm_ex(static_cast<cublasHandle_t>(context.cublas()), gemm_ex_call(p, precision), 1.0f, a,
              b, d, stream);
}

}  // namespace fact::gemm
