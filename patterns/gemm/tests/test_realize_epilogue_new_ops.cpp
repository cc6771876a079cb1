// The ops added through the table alone render into a kernel: softplus and gelu_tanh_grad, and
// the backward steps gelu_erf_grad, relu_grad and silu_grad (each over its own M×N operand). The
// chains name their functors, and one kernel with softplus and gelu_tanh_grad, one with the three
// backward steps, compile for sm_90a with nvcc (minutes of nvcc on a loaded machine: runs when
// FACT_SLOW_TESTS is set and not "0").
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/realize/render.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

// gelu_tanh_grad over a bf16 M×N operand (read through C), then softplus, in bf16.
GemmSpec spec_with_new_ops() {
  GemmSpec s;
  s.tile = {128, 128, 64};
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue = {{Kind::GeluTanhGrad, Activation::Identity, DType::BFloat16},
                {Kind::Activation, Activation::Softplus, DType::Unknown}};
  return s;
}

TEST(EpilogueNewOpsRealize, ChainNamesTheFormulaFunctors) {
  const GemmSpec s = spec_with_new_ops();
  EXPECT_EQ(s.name(), "gemm_gelu_tanh_grad_softplus_bf16_tn_128x128x64_c1x1_coop_persistent");
  EXPECT_EQ(epilogue_chain_type(s),
            "fact::gemm::epilogue::Activation<fact::gemm::epilogue::Formula<fact::gemm::ops::Softplus>::Fn,\n"
            "      fact::gemm::epilogue::MatrixFormula<fact::gemm::ops::GeluTanhGradStep>::Link<cutlass::bfloat16_t,\n"
            "      fact::gemm::epilogue::ScaledAccumulator>>");
  const auto rendered = render_gemm_template(s);
  EXPECT_NE(rendered.source.find("using ElementC = cutlass::bfloat16_t;"), std::string::npos)
      << "the M×N operand is read through C";
}

// The backward steps, each with its bf16 M×N operand (the first read through C, the others
// through auxiliary loads), in one bf16 chain.
GemmSpec spec_with_backward_steps() {
  GemmSpec s;
  s.tile = {128, 128, 64};
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue = {{Kind::GeluErfGrad, Activation::Identity, DType::BFloat16},
                {Kind::ReluGrad, Activation::Identity, DType::BFloat16},
                {Kind::SiluGrad, Activation::Identity, DType::BFloat16}};
  return s;
}

TEST(EpilogueNewOpsRealize, BackwardStepsNameTheirFormulaLinks) {
  const GemmSpec s = spec_with_backward_steps();
  EXPECT_EQ(s.name(), "gemm_gelu_erf_grad_relu_grad_silu_grad_bf16_tn_128x128x64_c1x1_coop_persistent");
  EXPECT_EQ(epilogue_chain_type(s),
            "fact::gemm::epilogue::MatrixFormula<fact::gemm::ops::SiluGradStep>::Link<cutlass::bfloat16_t,\n"
            "      fact::gemm::epilogue::MatrixFormula<fact::gemm::ops::ReluGradStep>::Link<cutlass::bfloat16_t,\n"
            "      fact::gemm::epilogue::MatrixFormula<fact::gemm::ops::GeluErfGradStep>::Link<cutlass::bfloat16_t,\n"
            "      fact::gemm::epilogue::ScaledAccumulator>>>");
  const auto rendered = render_gemm_template(s);
  EXPECT_NE(rendered.source.find("using ElementC = cutlass::bfloat16_t;"), std::string::npos)
      << "the first M×N operand is read through C";
  // Each step alone renders its own chain and kernel name too.
  for (const auto& step : s.epilogue) {
    GemmSpec one = s;
    one.epilogue = {step};
    const std::string token(step_op(step.kind).kernel_token);
    EXPECT_EQ(one.name(), "gemm_" + token + "_bf16_tn_128x128x64_c1x1_coop_persistent");
    EXPECT_NE(render_gemm_template(one).source.find(std::string(step_op(step.kind).device_link)),
              std::string::npos)
        << token;
  }
}

void compile_for_sm90a(const GemmSpec& s, const char* folder) {
  const char* slow = std::getenv("FACT_SLOW_TESTS");
  if (slow == nullptr || std::string(slow) == "0") {
    GTEST_SKIP() << "slow (minutes of nvcc): runs with FACT_SLOW_TESTS=1, which scripts/run_tests.sh sets";
  }
  const realize::CompileOptions options = realize::default_compile_options();
  if (auto why = realize::compile_unavailable_reason(options)) GTEST_SKIP() << *why;
  const realize::RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options);
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / folder;
  std::filesystem::remove_all(dir);
  const realize::CompileResult r = realize::compile_kernel(kernel, dir, options);
  ASSERT_TRUE(r.ok) << r.reason << "\n" << r.log.substr(0, 20000);
  EXPECT_EQ(r.usage.spill_store_bytes, 0);
  std::cout << "[ compiled ] " << s.name() << " in " << r.seconds << " s, " << r.usage.registers << " registers\n";
}

TEST(EpilogueNewOpsRealize, KernelWithBothCompilesForSm90a) {
  compile_for_sm90a(spec_with_new_ops(), "fact_gemm_new_epilogue_ops");
}

TEST(EpilogueNewOpsRealize, KernelWithTheBackwardStepsCompilesForSm90a) {
  compile_for_sm90a(spec_with_backward_steps(), "fact_gemm_backward_epilogue_steps");
}

}  // namespace
}  // namespace fact::gemm
