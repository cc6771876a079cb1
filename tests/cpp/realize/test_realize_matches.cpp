// realize_matches: sources and manifest for accepted matches, deduplicated kernels, refusals
// recorded per call, compiles through a stand-in compiler (serial and build driver). GEMM
// problems stand in for any kind.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "fact/realize/realize_matches.hpp"
#include "fact/util/atomic_file.hpp"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::realize {
namespace {

namespace fs = std::filesystem;
using discover::Match;
using discover::MatchStatus;
using gemm::Activation;
using gemm::EpilogueStep;
using gemm::GemmOperand;
using gemm::GemmProblem;
using gemm::Layout;
using graph::DType;
using Kind = EpilogueStep::Kind;

GemmProblem linear(int64_t m, int64_t n, int64_t k) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = GemmOperand{"x", DType::BFloat16, Layout::RowMajor, k, 0};
  p.b = GemmOperand{"w", DType::BFloat16, Layout::ColumnMajor, k, 0};
  p.d = GemmOperand{"y", DType::BFloat16, Layout::RowMajor, n, 0};
  return p;
}

Match match(std::string rule, std::vector<GemmProblem> gemms,
            MatchStatus status = MatchStatus::Accepted) {
  Match m;
  m.rule = std::move(rule);
  m.pattern = "gemm";
  m.status = status;
  for (const auto& g : gemms) m.problems.push_back(gemm::to_problem(g));
  return m;
}

std::vector<Match> sample_matches() {
  GemmProblem fc1 = linear(8192, 3072, 768);
  EpilogueStep bias;
  bias.kind = Kind::Bias;
  bias.operand = "b";
  bias.operand_dtype = DType::BFloat16;
  EpilogueStep gelu;
  gelu.kind = Kind::Activation;
  gelu.activation = Activation::GeluTanh;
  fc1.epilogue = {bias, gelu};
  // Nine steps: more than a kernel's chain holds (rows that are not 16-byte aligned no longer
  // fail: the entry pads them).
  GemmProblem unrealizable = linear(512, 512, 512);
  for (int i = 0; i < 9; ++i) {
    EpilogueStep relu;
    relu.kind = Kind::Activation;
    relu.activation = Activation::ReLU;
    unrealizable.epilogue.push_back(relu);
  }
  return {match("gemm_bias_gelu_tanh", {fc1}),
          match("gemm", {linear(1024, 1024, 1024), linear(1024, 1024, 1024)}),  // one kernel
          match("gemm", {linear(64, 64, 64)}, MatchStatus::Declined),
          match("gemm", {unrealizable})};
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_realize_matches_" + name);
  fs::remove_all(dir);
  return dir;
}

fs::path fake_compiler(const fs::path& dir, const std::string& log) {
  fs::create_directories(dir);
  const fs::path script = dir / "fake-nvcc";
  std::ofstream out(script);
  out << "#!/bin/sh\n"
      << "if [ \"$1\" = \"--version\" ]; then echo 'fake nvcc 2.0'; exit 0; fi\n"
      << "echo '" << log << "'\n"
      << "prev=''\n"
      << "for a in \"$@\"; do if [ \"$prev\" = \"-o\" ]; then target=\"$a\"; fi; prev=\"$a\"; done\n"
      << "echo binary > \"$target\"\n";
  out.close();
  fs::permissions(script, fs::perms::owner_all);
  return script;
}

TEST(RealizeMatches, EmitsOneSourcePerDistinctKernelAndAManifest) {
  RealizeOptions options;
  options.out_dir = scratch("emit");
  const RealizeResult result = realize_matches(sample_matches(), options);
  ASSERT_EQ(result.calls.size(), 4u);  // the declined match is skipped
  ASSERT_EQ(result.kernels.size(), 2u);
  EXPECT_EQ(result.calls[1].kernel_key, result.calls[2].kernel_key);
  EXPECT_TRUE(result.calls[3].kernel_key.empty());
  EXPECT_FALSE(result.calls[3].error.empty());
  EXPECT_EQ(result.calls[3].match, 3u);

  for (const auto& k : result.kernels) {
    EXPECT_EQ(k.status, "rendered");
    ASSERT_TRUE(fs::exists(k.source_file));
    EXPECT_EQ(util::read_file(k.source_file), k.kernel.source);
    EXPECT_EQ(k.source_file.filename(), k.kernel.spec.name() + ".cu");
  }
  const nlohmann::json manifest = nlohmann::json::parse(util::read_file(options.out_dir / "manifest.json"));
  EXPECT_EQ(manifest, result.manifest);
  EXPECT_EQ(manifest.at("schema"), "fact.realize/2");
  EXPECT_EQ(manifest.at("precision"), "strict");
  ASSERT_EQ(manifest.at("kernels").size(), 2u);
  EXPECT_EQ(manifest.at("kernels")[0].at("name"),
            "gemm_bias_gelu_tanh_bf16_tn_128x128x64_c1x2_pp_persistent");
  EXPECT_EQ(KernelSpec::from_json(manifest.at("kernels")[0].at("spec")), result.kernels[0].kernel.spec);
  EXPECT_EQ(manifest.at("calls")[0].at("rule"), "gemm_bias_gelu_tanh");
  EXPECT_EQ(manifest.at("calls")[0].at("kernel"), result.kernels[0].kernel.key);
  EXPECT_EQ(manifest.at("calls")[0].at("problem").at("m"), 8192);
  // bf16 output: the contract's half-precision output bound (max with the strict mode's 1e-5).
  EXPECT_DOUBLE_EQ(manifest.at("calls")[0].at("tolerance").get<double>(), 2e-2);
  EXPECT_TRUE(manifest.at("calls")[3].contains("error"));
  EXPECT_EQ(result.failed_compiles(), 0u);
}

TEST(RealizeMatches, CompilesSeriallyIntoTheOutputFolder) {
  RealizeOptions options;
  options.out_dir = scratch("serial");
  options.compile = true;
  options.serial = true;
  options.compile_options.nvcc = fake_compiler(options.out_dir / "bin", "ptxas info : Used 64 registers");
  const RealizeResult result = realize_matches(sample_matches(), options);
  ASSERT_EQ(result.kernels.size(), 2u);
  for (const auto& k : result.kernels) {
    EXPECT_EQ(k.status, "built") << k.reason;
    EXPECT_TRUE(fs::exists(k.library));
    EXPECT_EQ(k.library.parent_path(), options.out_dir);
    EXPECT_EQ(k.registers, 64);
  }
  EXPECT_EQ(result.manifest.at("kernels")[0].at("status"), "built");
}

TEST(RealizeMatches, CompilerVerdictsReachTheManifest) {
  RealizeOptions options;
  options.out_dir = scratch("serialized");
  options.compile = true;
  options.serial = true;
  options.compile_options.nvcc = fake_compiler(
      options.out_dir / "bin", "ptxas warning : (C7510) wgmma.mma_async instructions are serialized");
  const RealizeResult result = realize_matches(sample_matches(), options);
  EXPECT_EQ(result.failed_compiles(), 2u);
  EXPECT_EQ(result.manifest.at("kernels")[0].at("status"), "failed");
  EXPECT_NE(result.manifest.at("kernels")[0].at("reason").get<std::string>().find("C7510"),
            std::string::npos);
}

TEST(RealizeMatches, CompilesThroughTheBuildDriverAndItsCache) {
  RealizeOptions options;
  options.out_dir = scratch("driver");
  options.compile = true;
  options.jobs = 2;
  options.show_progress = false;
  options.cache_dir = options.out_dir / "cache";
  options.compile_options.nvcc = fake_compiler(options.out_dir / "bin", "ptxas info : Used 64 registers");
  RealizeResult first = realize_matches(sample_matches(), options);
  ASSERT_EQ(first.kernels.size(), 2u);
  for (const auto& k : first.kernels) {
    EXPECT_EQ(k.status, "built") << k.reason;
    EXPECT_TRUE(fs::exists(k.library));
  }
  const RealizeResult second = realize_matches(sample_matches(), options);
  for (const auto& k : second.kernels) EXPECT_EQ(k.status, "cached");
}

}  // namespace
}  // namespace fact::realize
