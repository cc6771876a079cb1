// The nvcc command line and compile_kernel's verdicts (with stand-in compilers, so that the
// ptxas rules are checked without spending a real sm90a compile on each).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::realize {
namespace {

namespace fs = std::filesystem;

bool has(const std::vector<std::string>& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

// A real kernel to compile: the GEMM pattern's bf16 spec (any pattern's would do).
KernelSpec bf16_spec() {
  gemm::GemmSpec s;
  s.tile = {128, 128, 64};
  s.mainloop = gemm::MainloopSchedule::Cooperative;
  return s.to_kernel_spec();
}

// A stand-in compiler: a shell script that prints `log` and writes its -o argument.
fs::path fake_compiler(const fs::path& dir, const std::string& log, int exit_code,
                       bool write_output = true) {
  fs::create_directories(dir);
  const fs::path script = dir / "fake-nvcc";
  std::ofstream out(script);
  out << "#!/bin/sh\n"
      << "if [ \"$1\" = \"--version\" ]; then echo 'fake nvcc 1.0'; exit 0; fi\n"
      << "cat <<'FACT_LOG'\n" << log << "\nFACT_LOG\n"
      << "prev=''\n"
      << "for a in \"$@\"; do if [ \"$prev\" = \"-o\" ]; then target=\"$a\"; fi; prev=\"$a\"; done\n"
      << (write_output ? "echo binary > \"$target\"\n" : "")
      << "exit " << exit_code << "\n";
  out.close();
  fs::permissions(script, fs::perms::owner_all);
  return script;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_compile_command_" + name);
  fs::remove_all(dir);
  return dir;
}

TEST(NvccCommand, CarriesTheMandatoryFlags) {
  const CompileOptions options = default_compile_options();
  const auto argv = nvcc_command(options);
  EXPECT_EQ(argv.front(), options.nvcc.string());
  for (const char* flag : {"-O3", "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a",
                           "--expt-relaxed-constexpr", "-Xptxas=-v", "-shared",
                           "-Xcompiler=-fPIC", "--cudart=static", "-std=c++17"}) {
    EXPECT_TRUE(has(argv, flag)) << "missing " << flag;
  }
  EXPECT_TRUE(has(argv, "-I" + options.cutlass_include.string()));
  EXPECT_TRUE(has(argv, "-I" + (options.fact_root / "include").string()));
  EXPECT_TRUE(has(argv, std::string(kSourcePlaceholder)));
  EXPECT_TRUE(has(argv, std::string(kOutputPlaceholder)));
  EXPECT_FALSE(has(argv, "-DFACT_STANDALONE_MAIN"));

  CompileOptions standalone = options;
  standalone.standalone_main = true;
  const auto runner = nvcc_command(standalone);
  EXPECT_TRUE(has(runner, "-DFACT_STANDALONE_MAIN"));
  EXPECT_FALSE(has(runner, "-shared"));
  // The checker's cuBLAS reference is linked, after the source.
  const auto source = std::find(runner.begin(), runner.end(), std::string(kSourcePlaceholder));
  const auto cublas = std::find(runner.begin(), runner.end(), std::string("-lcublas"));
  EXPECT_NE(cublas, runner.end());
  EXPECT_LT(source - runner.begin(), cublas - runner.begin());
  EXPECT_FALSE(has(argv, "-lcublas"));
}

TEST(NvccCommand, FingerprintNamesRolesNotPaths) {
  CompileOptions options = default_compile_options();
  options.cutlass_include = "/opt/somewhere/cutlass/include";
  options.fact_root = "/home/someone/fact";
  const std::string fingerprint = compile_fingerprint(options);
  EXPECT_EQ(fingerprint.find("/opt/somewhere"), std::string::npos) << fingerprint;
  EXPECT_EQ(fingerprint.find("/home/someone"), std::string::npos) << fingerprint;
  EXPECT_NE(fingerprint.find("-I<cutlass>"), std::string::npos) << fingerprint;
  EXPECT_NE(fingerprint.find("-DNDEBUG"), std::string::npos);
  EXPECT_NE(fingerprint.find("arch:sm_90a"), std::string::npos);
}

TEST(NvccCommand, ReadsTheCutlassVersion) {
  const CompileOptions options = default_compile_options();
  if (options.cutlass_include.empty()) GTEST_SKIP() << "no CUTLASS headers configured";
  EXPECT_TRUE(std::regex_match(cutlass_version_at(options.cutlass_include),
                               std::regex(R"(\d+\.\d+\.\d+)")));
  EXPECT_EQ(cutlass_version_at("/nonexistent"), "");
}

TEST(PtxasUsage, TakesTheLargestOverEntryFunctions) {
  const std::string log =
      "ptxas info    : Compiling entry function 'a' for 'sm_90a'\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 2 barriers\n"
      "ptxas info    : Compiling entry function 'b' for 'sm_90a'\n"
      "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 90 registers, used 1 barriers\n";
  const PtxasUsage usage = parse_ptxas_usage(log);
  EXPECT_EQ(usage.registers, 168);
  EXPECT_EQ(usage.stack_frame_bytes, 16);
  EXPECT_EQ(usage.spill_store_bytes, 8);
  EXPECT_EQ(usage.spill_load_bytes, 4);
}

TEST(CompileKernel, SucceedsWhenTheCompilerDoes) {
  const fs::path dir = scratch("ok");
  CompileOptions options = default_compile_options();
  options.nvcc = fake_compiler(dir / "bin", "ptxas info    : Used 100 registers", 0);
  const RenderedKernel kernel = render_kernel(bf16_spec(), options);
  const CompileResult r = compile_kernel(kernel, dir / "out", options);
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_TRUE(fs::exists(r.output));
  EXPECT_EQ(r.output.filename(), kernel.entry_symbol + ".so");
  EXPECT_EQ(r.usage.registers, 100);
  std::ifstream written(r.source);
  std::string text((std::istreambuf_iterator<char>(written)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, kernel.source);
}

TEST(CompileKernel, FailsOnWgmmaSerialization) {
  const fs::path dir = scratch("c7510");
  CompileOptions options = default_compile_options();
  options.nvcc = fake_compiler(
      dir / "bin",
      "ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are "
      "serialized due to the presence of Extern calls in the function 'k'",
      0);
  const CompileResult r = compile_kernel(render_kernel(bf16_spec(), options), dir / "out", options);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("C7510"), std::string::npos) << r.reason;
}

TEST(CompileKernel, FailsOnAnyPotentialPerformanceLoss) {
  const fs::path dir = scratch("perf");
  CompileOptions options = default_compile_options();
  options.nvcc = fake_compiler(
      dir / "bin", "ptxas info : Potential Performance Loss: wgmma.mma_async instructions ...", 0);
  const CompileResult r = compile_kernel(render_kernel(bf16_spec(), options), dir / "out", options);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("Potential Performance Loss"), std::string::npos) << r.reason;
}

TEST(CompileKernel, FailsOnCompilerErrorsAndMissingOutput) {
  const fs::path dir = scratch("error");
  CompileOptions options = default_compile_options();
  options.nvcc = fake_compiler(dir / "bin", "kernel.cu(3): error: identifier \"x\" is undefined", 2);
  CompileResult r = compile_kernel(render_kernel(bf16_spec(), options), dir / "out", options);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("error"), std::string::npos) << r.reason;

  options.nvcc = fake_compiler(dir / "bin2", "all good", 0, /*write_output=*/false);
  r = compile_kernel(render_kernel(bf16_spec(), options), dir / "out2", options);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("no library"), std::string::npos) << r.reason;

  options.nvcc = dir / "no-such-compiler";
  r = compile_kernel(render_kernel(bf16_spec(), options), dir / "out3", options);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.reason.empty());
}

TEST(BuildJob, CarriesKeySourceSpecAndPlaceholders) {
  const CompileOptions options = default_compile_options();
  const RenderedKernel kernel = render_kernel(bf16_spec(), options);
  const BuildJob job = build_job(kernel, options);
  EXPECT_EQ(job.key, kernel.key);
  EXPECT_EQ(job.source, kernel.source);
  EXPECT_EQ(job.entry_symbol, kernel.entry_symbol);
  EXPECT_EQ(job.label, bf16_spec().name());
  EXPECT_EQ(KernelSpec::from_json(job.spec), bf16_spec());
  EXPECT_EQ(job.command, nvcc_command(options));
}

}  // namespace
}  // namespace fact::realize
