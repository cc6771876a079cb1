// Real sm90a compiles of rendered GEMM kernels with nvcc and the installed CUTLASS headers
// (skipped, with the reason, when either is missing). Each test compiles one kernel (30-90 s
// of nvcc); the build-driver test compiles two at once. Each library is then loaded to check
// its exports: the info JSON, the entry point's argument checks (no GPU needed).
#include <dlfcn.h>

#include <filesystem>
#include <iostream>

#include <gtest/gtest.h>

#include "fact/realize/build_driver.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/render.hpp"
#include "fact/runtime/fact_abi.h"
#include "fact/util/atomic_file.hpp"
#include "patterns/gemm/space.hpp"

namespace fact::gemm {
namespace {

namespace fs = std::filesystem;
using realize::Activation;
using realize::DType;
using realize::KernelSpec;
using realize::MainloopSchedule;
using realize::MathMode;
using realize::RenderedKernel;
using Kind = realize::EpilogueStep::Kind;

KernelSpec bf16_gemm() {
  KernelSpec s;
  s.tile = {128, 128, 64};
  s.mainloop = MainloopSchedule::Cooperative;
  return s;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_gemm_compile_" + name);
  fs::remove_all(dir);
  return dir;
}

// Loads the library and checks what a loader relies on; returns "" or the problem.
std::string check_library(const fs::path& library, const RenderedKernel& kernel) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return std::string("dlopen failed: ") + dlerror();
  std::string problem;
  auto entry = reinterpret_cast<int (*)(const FactGemmArgs*, void*, size_t*, void*)>(
      dlsym(handle, kernel.entry_symbol.c_str()));
  auto info = reinterpret_cast<FactKernelInfo>(dlsym(handle, "fact_kernel_info"));
  if (!entry || !info) {
    problem = "missing export " + (entry ? std::string("fact_kernel_info") : kernel.entry_symbol);
  } else {
    const nlohmann::json j = nlohmann::json::parse(info());
    if (j.at("entry") != kernel.entry_symbol) problem = "info names another entry";
    if (j.at("key") != kernel.key) problem = "info carries another key";
    if (realize::KernelSpec::from_json(j.at("spec")) != kernel.spec) problem = "info spec differs";
    if (entry(nullptr, nullptr, nullptr, nullptr) != FACT_ERR_INVALID_ARGS) {
      problem = "null args not refused";
    }
    FactGemmArgs args{};
    args.abi_version = FACT_ABI_VERSION + 100;
    args.m = args.n = args.k = args.batch = 128;
    size_t workspace = 0;
    if (entry(&args, nullptr, &workspace, nullptr) != FACT_ERR_INVALID_ARGS) {
      problem = "wrong ABI version not refused";
    }
    args.abi_version = FACT_ABI_VERSION;
    args.m = 0;
    if (entry(&args, nullptr, &workspace, nullptr) != FACT_ERR_INVALID_ARGS) {
      problem = "empty problem not refused";
    }
  }
  dlclose(handle);
  return problem;
}

class GemmCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = realize::default_compile_options();
    if (auto why = realize::compile_unavailable_reason(options_)) GTEST_SKIP() << *why;
  }

  void compile_and_check(const KernelSpec& spec, const std::string& name) {
    const RenderedKernel kernel = realize::render_kernel(spec, options_);
    const realize::CompileResult r = realize::compile_kernel(kernel, scratch(name), options_);
    ASSERT_TRUE(r.ok) << spec.name() << ": " << r.reason << "\n" << r.log.substr(0, 20000);
    EXPECT_EQ(r.log.find("C7510"), std::string::npos) << "wgmma serialized:\n" << r.log;
    EXPECT_EQ(r.log.find("Potential Performance Loss"), std::string::npos) << r.log;
    EXPECT_EQ(r.usage.spill_store_bytes, 0) << "register spills in " << spec.name();
    EXPECT_GT(r.usage.registers, 0) << "no ptxas -v report in the log";
    EXPECT_EQ(check_library(r.output, kernel), "");
    std::cout << "[ compiled ] " << spec.name() << " in " << r.seconds << " s, "
              << r.usage.registers << " registers\n";
  }

  realize::CompileOptions options_;
};

TEST_F(GemmCompile, Bf16Gemm) { compile_and_check(bf16_gemm(), "bf16"); }

TEST_F(GemmCompile, Bf16GemmBiasGeluTanh) {
  KernelSpec s = bf16_gemm();
  s.tile = {128, 256, 64};
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                {Kind::Activation, Activation::GeluTanh, DType::Unknown}};
  compile_and_check(s, "bias_gelu");
}

TEST_F(GemmCompile, Tf32BatchedGemm) {
  KernelSpec s;
  s.a_dtype = s.b_dtype = s.d_dtype = DType::Float32;
  s.align_a = s.align_b = s.align_d = 4;
  s.math = MathMode::Tf32;
  s.batched = true;
  s.tile = {128, 128, 32};
  s.mainloop = MainloopSchedule::Cooperative;
  compile_and_check(s, "tf32_batched");
}

// The deep-K space's lead: split-K through the stream-K scheduler (the split count is baked in
// as kSplitK and selects the scheduler's SplitK decomposition at run time), with the partials
// summed in arrival order (kOrderedReduction = false sets the scheduler's reduction mode).
TEST_F(GemmCompile, Bf16DeepKSplitK) {
  realize::SpaceOptions deep_k;
  deep_k.m = deep_k.n = 256;
  deep_k.k = 524288;
  const realize::ParamSpace space = gemm_space(KernelSpec{}, deep_k);
  ASSERT_FALSE(space.candidates.empty());
  const KernelSpec& s = space.candidates.front();
  ASSERT_EQ(s.scheduler, realize::TileScheduler::StreamK);
  ASSERT_GE(s.split_k, 16);
  const RenderedKernel kernel = realize::render_kernel(s, options_);
  EXPECT_NE(kernel.source.find("kSplitK = " + std::to_string(s.split_k)), std::string::npos);
  EXPECT_FALSE(s.ordered_reduction);
  EXPECT_NE(kernel.source.find("kOrderedReduction = false"), std::string::npos);
  compile_and_check(s, "deep_k_split");
}

// Residual (beta * C) and SwiGLU's Multiply, built together through the build driver.
TEST_F(GemmCompile, ResidualAndMultiplyThroughTheBuildDriver) {
  KernelSpec residual = bf16_gemm();
  residual.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                       {Kind::Residual, Activation::Identity, DType::BFloat16}};
  KernelSpec swiglu = bf16_gemm();
  swiglu.tile = {64, 128, 64};
  swiglu.mainloop = MainloopSchedule::Pingpong;
  swiglu.epilogue = {{Kind::Multiply, Activation::Identity, DType::BFloat16}};

  const std::vector<RenderedKernel> kernels = {realize::render_kernel(residual, options_),
                                               realize::render_kernel(swiglu, options_)};
  std::vector<realize::BuildJob> jobs;
  for (const auto& k : kernels) jobs.push_back(realize::build_job(k, options_));
  realize::KernelCache cache(scratch("driver"));
  realize::BuildOptions build;
  build.jobs = 2;
  build.show_progress = false;
  realize::BuildDriver driver(cache, build);
  const auto outcomes = driver.build(jobs);
  ASSERT_EQ(outcomes.size(), 2u);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_TRUE(outcomes[i].usable()) << outcomes[i].label << ": " << outcomes[i].reason;
    const std::string log = util::read_file(outcomes[i].log);
    EXPECT_EQ(log.find("C7510"), std::string::npos) << log;
    EXPECT_EQ(check_library(outcomes[i].library, kernels[i]), "");
  }
}

}  // namespace
}  // namespace fact::gemm
