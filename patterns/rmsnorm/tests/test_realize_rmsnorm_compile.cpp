// The kernels the rmsnorm fold makes (patterns/gemm's template with a RowScale link first,
// gemm_epilogue.cuh) compiled for sm_90a with nvcc here, at the Llama-3-8B block's sizes as
// realization makes them: the v projection (row scale alone; its C ABI checks), the SwiGLU
// gate/up GEMM (row scale before the glu store) and the q projection (row scale before the rope
// store). Skipped (with the reason) without nvcc / CUTLASS; no GPU needed.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "fact/runtime/fact_abi.h"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/abi_names.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/realize/spec.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"

namespace fact::gemm {
namespace {

namespace fs = std::filesystem;
using graph::DType;
using realize::RenderedKernel;
using Kind = EpilogueStep::Kind;
using Entry = int (*)(const FactCallHeader*, void*, size_t*, void*);

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_rmsnorm_compile_" + name);
  fs::remove_all(dir);
  return dir;
}

// A Llama projection over 8192 tokens reading x with the row scale first, then `more` steps.
GemmProblem folded_projection(int64_t n, int64_t k, const std::string& more) {
  return make_gemm_problem({8192, n, k, 1}, DType::BFloat16, "row_scale" + (more.empty() ? "" : "," + more), "tn");
}

class RmsNormCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = realize::default_compile_options();
    if (auto why = realize::compile_unavailable_reason(options_)) GTEST_SKIP() << *why;
  }

  // Renders the default configuration of `problem`, checks the chain names `link`, compiles
  // (no wgmma serialization, no spills); returns the library path and the entry symbol.
  std::pair<fs::path, std::string> build(const GemmProblem& problem, const std::string& link,
                                         const std::string& name) {
    const GemmSpec s = spec_from_problem(problem, core::PrecisionMode::Native);
    EXPECT_EQ(gemm_spec_error(s), std::nullopt);
    EXPECT_EQ(s.epilogue.front().kind, Kind::RowScale);
    const RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
    EXPECT_NE(kernel.source.find(link), std::string::npos) << kernel.source;
    EXPECT_NE(kernel.source.find("fact::gemm::epilogue::RowScale<float"), std::string::npos) << kernel.source;
    const realize::CompileResult r = realize::compile_kernel(kernel, scratch(name), options_);
    EXPECT_TRUE(r.ok) << s.name() << ": " << r.reason << "\n" << r.log.substr(0, 20000);
    if (!r.ok) return {};
    EXPECT_EQ(r.log.find("C7510"), std::string::npos) << "wgmma serialized:\n" << r.log;
    EXPECT_EQ(r.log.find("Potential Performance Loss"), std::string::npos) << r.log;
    EXPECT_EQ(r.usage.spill_store_bytes, 0) << "register spills in " << s.name();
    std::cout << "[ compiled ] " << s.name() << " in " << r.seconds << " s, " << r.usage.registers
              << " registers\n";
    return {r.output, kernel.entry_symbol};
  }

  realize::CompileOptions options_;
};

// Llama's v_proj (4096 -> 1024) reading x, scaled by rstd per row: the library's entry checks
// the row-scale step (kind, vector dtype, batch stride, pointer alignment).
TEST_F(RmsNormCompile, Bf16LlamaVProjWithRowScale) {
  const GemmProblem problem = folded_projection(1024, 4096, "");
  const auto [library, symbol] = build(problem, "fact::gemm::epilogue::RowScale<float,", "v_proj");
  ASSERT_FALSE(library.empty());
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, symbol.c_str()));
  ASSERT_NE(entry, nullptr);
  const GemmSpec s = spec_from_problem(problem, core::PrecisionMode::Native);
  FactGemmArgs good{};
  good.header = {FACT_ABI_VERSION, fact_kind_id(FACT_GEMM_KIND_NAME), sizeof(FactGemmArgs), 0};
  good.m = good.n = good.k = 128;
  good.batch = 1;
  good.a_type = abi_dtype(s.a_dtype);
  good.b_type = abi_dtype(s.b_dtype);
  good.d_type = abi_dtype(s.d_dtype);
  good.a_layout = abi_layout(s.a_layout);
  good.b_layout = abi_layout(s.b_layout);
  good.lda = good.ldb = good.ldd = 128;
  good.alpha = 1.0f;
  good.num_steps = 1;
  good.steps[0].kind = FACT_STEP_ROW_SCALE;
  good.steps[0].operand_type = FACT_DTYPE_F32;
  size_t workspace = 0;
  auto query = [&](const FactGemmArgs& a) { return entry(&a.header, nullptr, &workspace, nullptr); };
  EXPECT_NE(query(good), FACT_ERR_INVALID_ARGS);  // FACT_OK, or a launch error without a GPU
  FactGemmArgs bad = good;
  bad.steps[0].kind = FACT_STEP_BIAS;
  EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "step kind";
  bad = good;
  bad.steps[0].operand_type = FACT_DTYPE_BF16;
  EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "vector dtype";
  bad = good;
  bad.steps[0].batch_stride = -4;
  EXPECT_EQ(query(bad), FACT_ERR_INVALID_ARGS) << "batch stride";
  // Not a size query: the vector is needed, 16-byte aligned.
  alignas(16) static unsigned char fake[64];  // aligned addresses, never dereferenced
  FactGemmArgs call = good;
  call.a = call.b = call.d = fake;
  EXPECT_EQ(entry(&call.header, nullptr, nullptr, nullptr), FACT_ERR_INVALID_ARGS) << "no vector";
  call.steps[0].operand = fake + 4;
  EXPECT_EQ(entry(&call.header, nullptr, nullptr, nullptr), FACT_ERR_CANNOT_IMPLEMENT) << "misaligned vector";
  dlclose(handle);
}

// Llama's gate/up GEMM (4096 -> 2 x 14336 interleaved) with the row scale before the glu store.
TEST_F(RmsNormCompile, Bf16LlamaSwigluGateUpWithRowScale) {
  const auto [library, symbol] =
      build(folded_projection(2 * 14336, 4096, "glu_silu"), "fact::gemm::epilogue::Glu<", "gate_up");
  EXPECT_FALSE(library.empty());
}

// Llama's q_proj (32 heads of 128, T = 2048) with the row scale before the rope store.
TEST_F(RmsNormCompile, Bf16LlamaQProjWithRowScaleAndRope) {
  GemmProblem problem = folded_projection(4096, 4096, "rope");
  problem.epilogue.back().period = 2048;
  const auto [library, symbol] = build(problem, "fact::gemm::epilogue::Rope<", "q_proj_rope");
  EXPECT_FALSE(library.empty());
}

}  // namespace
}  // namespace fact::gemm
