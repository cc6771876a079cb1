#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

#include "fact/build_info.hpp"
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

// The committed example under rendered/ is exactly what the renderer writes for its spec
// (FACT_UPDATE_RENDERED=1 rewrites it).
TEST(GemmF32Strict, RenderedExampleIsCurrent) {
  const KernelSpec spec = sm80_tn_example();
  const std::string source = render_f32_strict_source(spec);
  EXPECT_NE(source.find("int fact_" + spec.name() + "("), std::string::npos);
  EXPECT_NE(source.find("cutlass::layout::RowMajor,  // A"), std::string::npos);
  EXPECT_NE(source.find("cutlass::layout::ColumnMajor,  // B"), std::string::npos);
  EXPECT_NE(source.find("#ifdef FACT_STANDALONE_MAIN"), std::string::npos);
  const fs::path example =
      fs::path(FACT_SOURCE_DIR) / "patterns/gemm_f32_strict/rendered" / (spec.name() + ".cu");
  if (std::getenv("FACT_UPDATE_RENDERED")) std::ofstream(example) << source;
  ASSERT_TRUE(fs::exists(example)) << example << " is missing; render it with this test's spec";
  EXPECT_EQ(read_text(example), source) << "re-render " << example;
}

// Compiles the rendered example for sm_90a with nvcc (the slowest test here, ~20 s), and
// rejects ptxas's serialized-wgmma and performance-loss warnings.
TEST(GemmF32Strict, RenderedSourceCompilesForSm90a) {
  if (std::string(build_info::kNvcc).empty() || std::string(build_info::kCutlassInclude).empty())
    GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  const KernelSpec spec = sm80_tn_example();
  const fs::path dir = fs::temp_directory_path() / ("fact_strict_test_" + std::to_string(::getpid()));
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
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fact::realize
