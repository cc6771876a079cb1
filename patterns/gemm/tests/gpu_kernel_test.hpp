// The GPU GEMM kernel tests' fixture (test_runtime_gpu_epilogue_kernels.cpp and the
// test_runtime_gpu_*.cpp of patterns that produce gemm problems): a rendered CUTLASS kernel compiled at test time and
// run through the GEMM kind's runtime (run_kernel: the verification sequence against the float64
// reference with the output poisoned first, every element compared, guard bands around D, the
// inputs unchanged, a second stream, fresh inputs; timing off).
// SetUp skips (before compiling anything) without a CUDA device, on a GPU that is not a Hopper
// (the kernels are built for sm_90a) and where nvcc or CUTLASS is missing.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/run_kernel.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/spec.hpp"
#include "tests/cpp/runtime/runtime_test_support.hpp"

namespace fact::gemm::test {

class GpuGemmKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FACT_REQUIRE_GPU();
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (major != 9) GTEST_SKIP() << "the kernels are built for sm_90a: needs a Hopper GPU";
    options_ = realize::default_compile_options();
    if (auto why = realize::compile_unavailable_reason(options_)) GTEST_SKIP() << *why;
  }

  // Renders `spec`, compiles it into dir_/<name> (no serialized wgmma: C7510), and runs `problem`
  // through run_kernel in `precision` with every check; expects status ok, the five checks and
  // rel_err within the tolerance, and returns the report (empty when the build failed).
  runtime::RunReport compile_and_verify(const GemmSpec& spec, const GemmProblem& problem,
                                        core::PrecisionMode precision, const std::string& name,
                                        uint64_t seed = 2026) {
    const realize::RenderedKernel kernel = realize::render_kernel(spec.to_kernel_spec(), options_);
    const realize::CompileResult built = realize::compile_kernel(kernel, dir_ / name, options_);
    EXPECT_TRUE(built.ok) << built.reason << "\n" << built.log.substr(0, 4000);
    if (!built.ok) return {};
    EXPECT_EQ(built.log.find("C7510"), std::string::npos);
    const std::filesystem::path problem_file = dir_ / (name + ".problem.json");
    runtime::test::write_text(problem_file, problem_to_json(to_problem(problem)).dump());
    runtime::RunKernelOptions o;
    o.lib = built.output.string();
    o.problem_json = problem_file.string();
    o.precision = precision;
    o.verify_only = true;
    o.seed = seed;
    const runtime::RunReport report = runtime::run_kernel(o);
    EXPECT_EQ(report.status, runtime::RunStatus::Ok) << report.error;
    EXPECT_EQ(report.checks.size(), 5u);
    if (report.rel_err) EXPECT_LE(*report.rel_err, report.tolerance);
    return report;
  }

  // "rel_err 0.0021" or "rel_err -" for a log line.
  static std::string rel_err_text(const runtime::RunReport& report) {
    return "rel_err " + (report.rel_err ? std::to_string(*report.rel_err) : std::string("-"));
  }

  runtime::test::ScratchDir dir_;
  realize::CompileOptions options_;
};

}  // namespace fact::gemm::test
