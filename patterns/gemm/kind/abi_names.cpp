#include "patterns/gemm/kind/abi_names.hpp"

namespace fact::gemm {

int32_t abi_dtype(graph::DType dtype) { return core::to_fact_dtype(dtype); }

int abi_dtype_bytes(int32_t abi_type) { return core::dtype_bytes(core::from_fact_dtype(abi_type)); }

int32_t abi_layout(Layout layout) {
  return layout == Layout::RowMajor ? FACT_ROW_MAJOR : FACT_COLUMN_MAJOR;
}

int32_t abi_step_kind(EpilogueStep::Kind kind) {
  switch (kind) {
    case EpilogueStep::Kind::Scale: return FACT_STEP_SCALE;
    case EpilogueStep::Kind::AddScalar: return FACT_STEP_ADD_SCALAR;
    case EpilogueStep::Kind::Bias: return FACT_STEP_BIAS;
    case EpilogueStep::Kind::Activation: return FACT_STEP_ACTIVATION;
    case EpilogueStep::Kind::Residual: return FACT_STEP_RESIDUAL;
    case EpilogueStep::Kind::Multiply: return FACT_STEP_MULTIPLY;
    case EpilogueStep::Kind::Glu: return FACT_STEP_GLU;
    case EpilogueStep::Kind::Rope: return FACT_STEP_ROPE;
    case EpilogueStep::Kind::RowScale: return FACT_STEP_ROW_SCALE;
  }
  return 0;
}

int32_t abi_activation(Activation activation) {
  switch (activation) {
    case Activation::Identity: return FACT_ACT_IDENTITY;
    case Activation::ReLU: return FACT_ACT_RELU;
    case Activation::GeluErf: return FACT_ACT_GELU_ERF;
    case Activation::GeluTanh: return FACT_ACT_GELU_TANH;
    case Activation::SiLU: return FACT_ACT_SILU;
    case Activation::Sigmoid: return FACT_ACT_SIGMOID;
    case Activation::LeakyReLU: return FACT_ACT_LEAKY_RELU;
    case Activation::HardTanh: return FACT_ACT_HARDTANH;
    case Activation::Tanh: return FACT_ACT_TANH;
  }
  return FACT_ACT_IDENTITY;
}

}  // namespace fact::gemm
