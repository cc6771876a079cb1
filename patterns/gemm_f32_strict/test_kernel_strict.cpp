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

  KernelSpec bias = sm80_tn_example();
  bias.epilogue.push_back({EpilogueStep::Kind::Bias, Activation::Identity, DType::Float32});
  EXPECT_NE(f32_strict_unsupported_reason(bias), std::nullopt);
  EXPECT_THROW(render_f32_strict_source(bias), RenderError);

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
  EXPECT_NE(source.find("true>;  // residual epilogue"), std::string::npos) << source;
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
  return {sm80_tn_example(), tn, tn_stream_k, nn, nt};
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
// and performance-loss warnings.
void expect_compiles(const KernelSpec& spec) {
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
      << " -I" << build_info::kCutlassInclude << " -I" << build_info::kCutlassUtilInclude << " "
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

bool can_compile() {
  return !std::string(build_info::kNvcc).empty() && !std::string(build_info::kCutlassInclude).empty();
}

// ~20 s of nvcc.
TEST(GemmF32Strict, PortableKernelCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  expect_compiles(sm80_tn_example());
}

// 1 to 4 minutes of nvcc: runs when FACT_SLOW_TESTS is set.
TEST(GemmF32Strict, HopperKernelCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  if (!std::getenv("FACT_SLOW_TESTS")) GTEST_SKIP() << "set FACT_SLOW_TESTS=1 to compile it";
  KernelSpec transposed = sm90_tn_example();
  transposed.b_layout = Layout::RowMajor;  // runs as D^T = B^T A^T
  transposed.scheduler = TileScheduler::StreamK;
  expect_compiles(transposed);
}

}  // namespace
}  // namespace fact::realize
