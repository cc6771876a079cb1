#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <vector>
#include <sstream>

#include <unistd.h>

#include "fact/build_info.hpp"
#include "fact/realize/cutlass_names.hpp"
#include "patterns/gemm_f32_strict/render_strict.hpp"

namespace fact::realize {
namespace {

namespace fs = std::filesystem;

KernelSpec strict_class(Layout a, Layout b) {
  KernelSpec s;
  s.pattern = "gemm_f32_strict";
  s.a_dtype = s.b_dtype = s.d_dtype = DType::Float32;
  s.a_layout = a;
  s.b_layout = b;
  s.align_a = s.align_b = s.align_d = 4;
  s.math = MathMode::Tf32x3;
  return s;
}

KernelSpec sm80_tn_example() {
  KernelSpec s = strict_class(Layout::RowMajor, Layout::ColumnMajor);
  s.mainloop = MainloopSchedule::Multistage;
  s.tile = {128, 128, 32};
  s.stages = 3;
  return s;
}

KernelSpec sm90_tn_example() {
  KernelSpec s = strict_class(Layout::RowMajor, Layout::ColumnMajor);
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue_schedule = EpilogueSchedule::TmaCooperative;
  s.tile = {256, 128, 32};
  s.stages = 3;
  return s;
}

using Kind = EpilogueStep::Kind;

EpilogueOpSpec bias_step() { return {Kind::Bias, Activation::Identity, DType::Float32}; }
EpilogueOpSpec gelu_tanh_step() { return {Kind::Activation, Activation::GeluTanh, DType::Unknown}; }
EpilogueOpSpec residual_step() { return {Kind::Residual, Activation::Identity, DType::Float32}; }

// The minGPT block's GEMM epilogues: bias (attention projections), bias + tanh-GELU (MLP up),
// bias + residual (output projections).
std::vector<std::vector<EpilogueOpSpec>> min_gpt_epilogues() {
  return {{bias_step()}, {bias_step(), gelu_tanh_step()}, {bias_step(), residual_step()}};
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(GemmF32Strict, CandidatesAreSupportedAndDistinct) {
  for (Layout a : {Layout::RowMajor, Layout::ColumnMajor}) {
    for (Layout b : {Layout::RowMajor, Layout::ColumnMajor}) {
      auto candidates = f32_strict_candidates(strict_class(a, b));
      ASSERT_FALSE(candidates.empty());
      std::set<std::string> names;
      for (const auto& c : candidates) {
        EXPECT_EQ(f32_strict_unsupported_reason(c), std::nullopt) << c.name();
        EXPECT_EQ(c.math, MathMode::Tf32x3);
        EXPECT_EQ(c.a_layout, a);
        EXPECT_EQ(c.b_layout, b);
        names.insert(c.name());
      }
      EXPECT_EQ(names.size(), candidates.size());
    }
  }
}

TEST(GemmF32Strict, RefusesWhatItCannotRealize) {
  KernelSpec bf16 = sm80_tn_example();
  bf16.a_dtype = bf16.b_dtype = DType::BFloat16;
  EXPECT_NE(f32_strict_unsupported_reason(bf16), std::nullopt);

  KernelSpec tf32 = sm80_tn_example();
  tf32.math = MathMode::Tf32;
  EXPECT_NE(f32_strict_unsupported_reason(tf32), std::nullopt);

  KernelSpec bias_residual = sm80_tn_example();  // two source operands: sm90 only
  bias_residual.epilogue = {bias_step(), residual_step()};
  EXPECT_NE(f32_strict_unsupported_reason(bias_residual), std::nullopt);
  EXPECT_THROW(render_f32_strict_source(bias_residual), RenderError);
  KernelSpec residual_before_act = sm80_tn_example();
  residual_before_act.epilogue = {gelu_tanh_step(), residual_step()};
  EXPECT_NE(f32_strict_unsupported_reason(residual_before_act), std::nullopt);
  KernelSpec multiply = sm80_tn_example();
  multiply.epilogue = {{Kind::Multiply, Activation::Identity, DType::Float32}};
  EXPECT_NE(f32_strict_unsupported_reason(multiply), std::nullopt);
  multiply.mainloop = MainloopSchedule::Cooperative;
  multiply.tile = {256, 128, 32};
  multiply.stages = 2;
  EXPECT_EQ(f32_strict_unsupported_reason(multiply), std::nullopt);

  KernelSpec bf16_bias = sm90_tn_example();
  bf16_bias.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16}};
  EXPECT_NE(f32_strict_unsupported_reason(bf16_bias), std::nullopt);
  KernelSpec two_biases = sm90_tn_example();
  two_biases.epilogue = {bias_step(), gelu_tanh_step(), bias_step()};
  EXPECT_NE(f32_strict_unsupported_reason(two_biases), std::nullopt);
  KernelSpec two_sources = sm90_tn_example();
  two_sources.epilogue = {residual_step(), {Kind::Multiply, Activation::Identity, DType::Float32}};
  EXPECT_NE(f32_strict_unsupported_reason(two_sources), std::nullopt);
  KernelSpec late_scale = sm90_tn_example();
  late_scale.epilogue = {bias_step(), {Kind::Scale, Activation::Identity, DType::Unknown}};
  EXPECT_NE(f32_strict_unsupported_reason(late_scale), std::nullopt);
  KernelSpec identity = sm90_tn_example();
  identity.epilogue = {{Kind::Activation, Activation::Identity, DType::Unknown}};
  EXPECT_NE(f32_strict_unsupported_reason(identity), std::nullopt);

  KernelSpec col_d = sm80_tn_example();
  col_d.d_layout = Layout::ColumnMajor;
  EXPECT_NE(f32_strict_unsupported_reason(col_d), std::nullopt);

  KernelSpec too_deep = sm80_tn_example();
  too_deep.tile = {256, 128, 32};
  too_deep.stages = 6;  // 6 x 48 KiB of stages does not fit
  EXPECT_NE(f32_strict_unsupported_reason(too_deep), std::nullopt);

  KernelSpec no_k_major = sm90_tn_example();
  no_k_major.a_layout = Layout::ColumnMajor;
  no_k_major.b_layout = Layout::RowMajor;
  EXPECT_NE(f32_strict_unsupported_reason(no_k_major), std::nullopt);
  no_k_major.mainloop = MainloopSchedule::Multistage;  // the portable kernel takes it
  no_k_major.tile = {128, 128, 32};
  EXPECT_EQ(f32_strict_unsupported_reason(no_k_major), std::nullopt);

  KernelSpec sm90_deep = sm90_tn_example();
  sm90_deep.stages = 4;  // 4 x 64 KiB
  EXPECT_NE(f32_strict_unsupported_reason(sm90_deep), std::nullopt);

  KernelSpec residual_deep = sm90_tn_example();  // C stages take 32 KiB more epilogue
  residual_deep.epilogue = {residual_step()};
  EXPECT_NE(f32_strict_unsupported_reason(residual_deep), std::nullopt);
  residual_deep.stages = 2;
  EXPECT_EQ(f32_strict_unsupported_reason(residual_deep), std::nullopt);

  KernelSpec sm90_wide = sm90_tn_example();
  sm90_wide.tile = {256, 256, 32};  // 256 accumulator registers per thread
  sm90_wide.stages = 2;
  EXPECT_NE(f32_strict_unsupported_reason(sm90_wide), std::nullopt);
}

TEST(GemmF32Strict, CandidatesCoverBothKernelFamilies) {
  auto candidates = f32_strict_candidates(strict_class(Layout::RowMajor, Layout::RowMajor));
  int sm80 = 0, sm90 = 0;
  for (const auto& c : candidates) {
    sm80 += c.mainloop == MainloopSchedule::Multistage;
    sm90 += c.mainloop == MainloopSchedule::Cooperative;
  }
  EXPECT_GT(sm80, 0);
  EXPECT_GT(sm90, 0);
  for (const auto& c : f32_strict_candidates(strict_class(Layout::ColumnMajor, Layout::RowMajor)))
    EXPECT_EQ(c.mainloop, MainloopSchedule::Multistage) << c.name();
}

TEST(GemmF32Strict, RendersResidualEpilogue) {
  KernelSpec residual = sm80_tn_example();
  residual.epilogue.push_back({EpilogueStep::Kind::Residual, Activation::Identity, DType::Float32});
  ASSERT_EQ(f32_strict_unsupported_reason(residual), std::nullopt);
  std::string source = render_f32_strict_source(residual);
  EXPECT_NE(source.find("fact::gemm::epilogue::Residual<float,\n      "
                        "fact::gemm::epilogue::ScaledAccumulator>>;  // epilogue chain"),
            std::string::npos)
      << source;
}

// Every minGPT epilogue has strict candidates, the Hopper kernel among them for every layout it
// runs; the multistage kernel takes the one-source chains (bias, bias + GELU) only.
TEST(GemmF32Strict, SpaceAcceptsMinGptEpilogues) {
  for (const auto& epilogue : min_gpt_epilogues()) {
    for (Layout b : {Layout::ColumnMajor, Layout::RowMajor}) {  // nn.Linear, torch.matmul
      KernelSpec problem = strict_class(Layout::RowMajor, b);
      problem.epilogue = epilogue;
      const auto candidates = f32_strict_candidates(problem);
      int sm80 = 0, sm90 = 0;
      for (const auto& c : candidates) {
        EXPECT_EQ(c.epilogue, epilogue) << c.name();
        EXPECT_EQ(f32_strict_unsupported_reason(c), std::nullopt) << c.name();
        sm80 += c.mainloop == MainloopSchedule::Multistage;
        sm90 += c.mainloop == MainloopSchedule::Cooperative;
      }
      EXPECT_EQ(sm90, 6) << problem.name();  // 3 tiles x 2 schedulers, stages as fit
      const bool two_sources = epilogue.size() == 2 && epilogue[1].kind == Kind::Residual;
      EXPECT_EQ(sm80 > 0, !two_sources) << problem.name();
    }
  }
}

// The chain is the gemm pattern's (gemm_epilogue.cuh) with float operands, innermost link last,
// a leading Scale folded into alpha; tanh-GELU is the accurate one (no tanh.approx).
TEST(GemmF32Strict, RendersEpilogueChainDeterministically) {
  KernelSpec spec = sm90_tn_example();
  spec.epilogue = {{Kind::Scale, Activation::Identity, DType::Unknown}, bias_step(),
                   gelu_tanh_step()};
  ASSERT_EQ(f32_strict_unsupported_reason(spec), std::nullopt);
  const std::string source = render_f32_strict_source(spec);
  EXPECT_EQ(source, render_f32_strict_source(spec));
  EXPECT_NE(source.find("fact::gemm::epilogue::Activation<fact::gemm::epilogue::GeluTanhAccurate,\n"
                        "      fact::gemm::epilogue::ColumnBias<float,\n"
                        "      fact::gemm::epilogue::ScaledAccumulator>>>;  // epilogue chain"),
            std::string::npos)
      << source;
  EXPECT_EQ(source.find("GELU_taylor"), std::string::npos);
  EXPECT_NE(source.find("standalone_main<FactKernel::Chain>"), std::string::npos);

  KernelSpec unknown_operand = spec;  // an operand dtype left Unknown reads float
  unknown_operand.epilogue[1].operand_dtype = DType::Unknown;
  EXPECT_NE(render_f32_strict_source(unknown_operand).find("ColumnBias<float,"), std::string::npos);

  KernelSpec sm80 = sm80_tn_example();
  sm80.epilogue = spec.epilogue;
  EXPECT_NE(render_f32_strict_source(sm80).find("GeluTanhAccurate"), std::string::npos);
  EXPECT_NE(render_kernel(sm80).key, render_kernel(sm80_tn_example()).key);
}

TEST(GemmF32Strict, RenderKernelKeysTheRegisteredTemplate) {
  const KernelSpec spec = sm80_tn_example();
  const RenderedKernel kernel = render_kernel(spec);
  EXPECT_EQ(kernel.entry_symbol, "fact_" + kernel.key.substr(0, 16));
  EXPECT_NE(kernel.source.find("int " + kernel.entry_symbol + "("), std::string::npos);
  EXPECT_EQ(kernel.source.find(kEntryPlaceholder), std::string::npos);
  EXPECT_EQ(kernel.source.find(kKeyPlaceholder), std::string::npos);
  KernelSpec other = spec;
  other.stages = 4;
  EXPECT_NE(render_kernel(other).key, kernel.key);
}

// nn.Linear + tanh-GELU (the minGPT MLP's first GEMM) on the Hopper kernel.
KernelSpec sm90_bias_gelu_tanh() {
  KernelSpec s = sm90_tn_example();
  s.epilogue = {bias_step(), gelu_tanh_step()};
  return s;
}

KernelSpec sm80_bias_gelu_tanh() {
  KernelSpec s = sm80_tn_example();
  s.epilogue = {bias_step(), gelu_tanh_step()};
  return s;
}

// torch.matmul + bias + residual: the transposed Hopper run (bias along the kernel's M); with
// C loads in the epilogue two 256 x 128 stages fit.
KernelSpec sm90_nn_bias_residual() {
  KernelSpec s = sm90_tn_example();
  s.b_layout = Layout::RowMajor;
  s.epilogue = {bias_step(), residual_step()};
  s.stages = 2;
  return s;
}

// The variants committed under rendered/ (the GPU check in bench/strict_f32_notes.md builds
// and runs each): the portable baseline and the Hopper kernel in each layout family.
std::vector<KernelSpec> example_specs() {
  KernelSpec tn = sm90_tn_example();
  KernelSpec tn_stream_k = tn;
  tn_stream_k.scheduler = TileScheduler::StreamK;
  KernelSpec nn = tn;  // torch.matmul: runs as D^T = B^T A^T
  nn.b_layout = Layout::RowMajor;
  KernelSpec nt = tn;  // A column-major (register operand MN-major)
  nt.a_layout = Layout::ColumnMajor;
  return {sm80_tn_example(), tn, tn_stream_k, nn, nt, sm90_bias_gelu_tanh(),
          sm80_bias_gelu_tanh(), sm90_nn_bias_residual()};
}

// Each committed example is exactly what the renderer writes for its spec
// (FACT_UPDATE_RENDERED=1 rewrites them).
TEST(GemmF32Strict, RenderedExamplesAreCurrent) {
  for (const KernelSpec& spec : example_specs()) {
    ASSERT_EQ(f32_strict_unsupported_reason(spec), std::nullopt) << spec.name();
    const std::string source = render_f32_strict_source(spec);
    const std::string header = spec.mainloop == MainloopSchedule::Cooperative
                                   ? "strict_gemm_sm90.cuh" : "strict_gemm_sm80.cuh";
    EXPECT_NE(source.find("int fact_" + spec.name() + "("), std::string::npos);
    EXPECT_NE(source.find("#include \"patterns/gemm_f32_strict/" + header + "\""), std::string::npos);
    EXPECT_NE(source.find(std::string(layout_cpp(spec.a_layout)) + ",  // A"), std::string::npos);
    EXPECT_NE(source.find(std::string(layout_cpp(spec.b_layout)) + ",  // B"), std::string::npos);
    EXPECT_NE(source.find("#ifdef FACT_STANDALONE_MAIN"), std::string::npos);
    const fs::path example =
        fs::path(FACT_SOURCE_DIR) / "patterns/gemm_f32_strict/rendered" / (spec.name() + ".cu");
    if (std::getenv("FACT_UPDATE_RENDERED")) std::ofstream(example) << source;
    ASSERT_TRUE(fs::exists(example)) << example << " is missing; render it with this test's spec";
    EXPECT_EQ(read_text(example), source) << "re-render " << example;
  }
}

// Compiles `spec`'s rendered source for sm_90a with nvcc and rejects ptxas's serialized-wgmma
// and performance-loss warnings. `standalone`: with -DFACT_STANDALONE_MAIN (the checker's
// main() and its reference kernels too).
void expect_compiles(const KernelSpec& spec, bool standalone = false) {
  const fs::path dir = fs::temp_directory_path() /
                       ("fact_strict_test_" + std::to_string(::getpid()) + "_" + spec.name());
  fs::create_directories(dir);
  {
    std::ofstream(dir / "kernel.cu") << render_f32_strict_source(spec);
  }
  const std::string source_dir = FACT_SOURCE_DIR;
  std::ostringstream cmd;
  cmd << build_info::kNvcc << " -std=c++17 -O3 -DNDEBUG -Xcompiler=-fPIC -shared"
      << " -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas -v"
      << " -I" << source_dir << " -I" << source_dir << "/include"
      << " -I" << build_info::kCutlassInclude << " -I" << build_info::kCutlassUtilInclude
      << (standalone ? " -DFACT_STANDALONE_MAIN" : "") << " "
      << (dir / "kernel.cu") << " -o " << (dir / "kernel.so") << " > " << (dir / "build.log")
      << " 2>&1";
  const int rc = std::system(cmd.str().c_str());
  const std::string log = read_text(dir / "build.log");
  EXPECT_EQ(rc, 0) << log;
  EXPECT_TRUE(fs::exists(dir / "kernel.so"));
  EXPECT_EQ(log.find("C7510"), std::string::npos) << log;
  EXPECT_EQ(log.find("Potential Performance Loss"), std::string::npos) << log;
  EXPECT_FALSE(std::regex_search(log, std::regex("[1-9][0-9]* bytes spill"))) << log;
  fs::remove_all(dir);
}

// The Hopper compiles take minutes of nvcc each: they run when FACT_SLOW_TESTS is set and not
// "0" (scripts/run_tests.sh, hence CI, sets it).
bool slow_tests_enabled() {
  const char* value = std::getenv("FACT_SLOW_TESTS");
  return value && *value && std::string(value) != "0";
}
constexpr const char* kSlowSkip =
    "slow (minutes of nvcc): runs with FACT_SLOW_TESTS=1, which scripts/run_tests.sh sets";

bool can_compile() {
  return !std::string(build_info::kNvcc).empty() && !std::string(build_info::kCutlassInclude).empty();
}

// ~30 s of nvcc: the portable kernel with a bias + tanh-GELU epilogue (LinearCombinationGeneric).
TEST(GemmF32Strict, PortableKernelCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  expect_compiles(sm80_bias_gelu_tanh());
}

// 1 to 4 minutes of nvcc: runs when FACT_SLOW_TESTS is set (the test command sets it).
TEST(GemmF32Strict, HopperKernelCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  if (!slow_tests_enabled()) GTEST_SKIP() << kSlowSkip;
  KernelSpec transposed = sm90_tn_example();
  transposed.b_layout = Layout::RowMajor;  // runs as D^T = B^T A^T
  transposed.scheduler = TileScheduler::StreamK;
  expect_compiles(transposed);
}

// Minutes of nvcc: the Hopper kernel with the minGPT MLP's bias + tanh-GELU chain (EVT in the
// kernel, the chain again in the K-slice reduction) and the standalone checker.
TEST(GemmF32Strict, HopperBiasGeluKernelCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  if (!slow_tests_enabled()) GTEST_SKIP() << kSlowSkip;
  expect_compiles(sm90_bias_gelu_tanh(), /*standalone=*/true);
}

}  // namespace
}  // namespace fact::realize
