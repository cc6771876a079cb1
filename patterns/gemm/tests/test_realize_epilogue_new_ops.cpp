// The two ops added through the table alone (softplus, gelu_tanh_grad) render into a kernel:
// the chain names their functors, and one kernel with both compiles for sm_90a with nvcc
// (minutes of nvcc on a loaded machine: runs when FACT_SLOW_TESTS is set and not "0").
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
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

TEST(EpilogueNewOpsRealize, KernelWithBothCompilesForSm90a) {
  const char* slow = std::getenv("FACT_SLOW_TESTS");
  if (slow == nullptr || std::string(slow) == "0") {
    GTEST_SKIP() << "slow (minutes of nvcc): runs with FACT_SLOW_TESTS=1, which scripts/run_tests.sh sets";
  }
  const realize::CompileOptions options = realize::default_compile_options();
  if (auto why = realize::compile_unavailable_reason(options)) GTEST_SKIP() << *why;
  const GemmSpec s = spec_with_new_ops();
  const realize::RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options);
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "fact_gemm_new_epilogue_ops";
  std::filesystem::remove_all(dir);
  const realize::CompileResult r = realize::compile_kernel(kernel, dir, options);
  ASSERT_TRUE(r.ok) << r.reason << "\n" << r.log.substr(0, 20000);
  EXPECT_EQ(r.usage.spill_store_bytes, 0);
  std::cout << "[ compiled ] " << s.name() << " in " << r.seconds << " s, " << r.usage.registers << " registers\n";
}

}  // namespace
}  // namespace fact::gemm
