// Real sm90a compiles of rendered GEMM kernels with nvcc and the installed CUTLASS headers
// (skipped, with the reason, when either is missing). Each test compiles one kernel (30-90 s
// of nvcc); the build-driver test compiles two at once. Each library is then loaded to check
// its exports: the info JSON (kind, ABI version, KernelSpec) and the entry point's ABI v2
// argument checks (header, dtypes, layouts, epilogue steps), which need no GPU.
//
// The epilogues: the chain bias -> x*0.5 -> hardtanh(-2, 2) -> gelu_erf that ABI v1
// refused, a residual and a product with two M×N operands in one kernel, and two activations
// with parameters of their own.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <gtest/gtest.h>

#include "fact/realize/build_driver.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/render.hpp"
#include "fact/util/atomic_file.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/abi_names.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/kind/padding.hpp"
#include "patterns/gemm/realize/spec_from_problem.hpp"
#include "patterns/gemm/tests/host_check.hpp"

namespace fact::gemm {
namespace {

namespace fs = std::filesystem;
using realize::RenderedKernel;
using Kind = EpilogueStep::Kind;

GemmSpec bf16_gemm() {
  GemmSpec s;
  s.tile = {128, 128, 64};
  s.mainloop = MainloopSchedule::Cooperative;
  return s;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_gemm_compile_" + name);
  fs::remove_all(dir);
  return dir;
}

// A well-formed call for `spec` (sizes 128, compact leading dimensions, null pointers: a size
// query needs none), every step of the spec's epilogue in place.
FactGemmArgs args_for(const GemmSpec& spec) {
  FactGemmArgs args{};
  args.header = {FACT_ABI_VERSION, fact_kind_id(FACT_GEMM_KIND_NAME), sizeof(FactGemmArgs), 0};
  args.m = args.n = args.k = 128;
  args.batch = 1;
  args.a_type = abi_dtype(spec.a_dtype);
  args.b_type = abi_dtype(spec.b_dtype);
  args.d_type = abi_dtype(spec.d_dtype);
  args.a_layout = abi_layout(spec.a_layout);
  args.b_layout = abi_layout(spec.b_layout);
  args.lda = args.ldb = args.ldd = 128;
  args.alpha = 1.0f;
  args.num_steps = static_cast<int32_t>(spec.epilogue.size());
  for (size_t i = 0; i < spec.epilogue.size(); ++i) {
    const EpilogueOpSpec& op = spec.epilogue[i];
    FactGemmStep& step = args.steps[i];
    step.kind = abi_step_kind(op.kind);
    if (step_op(op.kind).constants == StepConstantsRead::ACTIVATION) step.activation = abi_activation(op.activation);
    if (reads_operand(op.kind)) step.operand_type = abi_dtype(op.operand_dtype);
    if (op.kind == Kind::Residual || op.kind == Kind::Multiply) step.ld = 128;
  }
  return args;
}

using Entry = int (*)(const FactCallHeader*, void*, size_t*, void*);

// The size query of a well-formed call passes the argument checks (FACT_OK, or a launch error
// when no GPU answers cudaGetDevice); each corruption of it is FACT_ERR_INVALID_ARGS.
std::string check_abi(Entry entry, const GemmSpec& spec) {
  size_t workspace = 0;
  auto status = [&](const FactGemmArgs& args) { return entry(&args.header, nullptr, &workspace, nullptr); };
  const FactGemmArgs good = args_for(spec);
  if (status(good) == FACT_ERR_INVALID_ARGS) return "a well-formed call refused";
  if (entry(nullptr, nullptr, &workspace, nullptr) != FACT_ERR_INVALID_ARGS) return "null args not refused";
  struct Corruption {
    const char* what;
    void (*apply)(FactGemmArgs&);
  };
  const Corruption corruptions[] = {
      {"ABI version", [](FactGemmArgs& a) { a.header.abi_version = FACT_ABI_VERSION + 1; }},
      {"kind", [](FactGemmArgs& a) { a.header.kind = fact_kind_id("attention"); }},
      {"size", [](FactGemmArgs& a) { a.header.size -= 8; }},
      {"A dtype", [](FactGemmArgs& a) { a.a_type = a.a_type == FACT_DTYPE_F16 ? FACT_DTYPE_BF16 : FACT_DTYPE_F16; }},
      {"D dtype", [](FactGemmArgs& a) { a.d_type = FACT_DTYPE_F64; }},
      {"B layout", [](FactGemmArgs& a) { a.b_layout = 1 - a.b_layout; }},
      {"empty problem", [](FactGemmArgs& a) { a.m = 0; }},
      {"step count", [](FactGemmArgs& a) { a.num_steps += 1; }},
      {"outer batch count", [](FactGemmArgs& a) { a.outer_batch = -2; }},
      {"outer stride of B", [](FactGemmArgs& a) {
         a.outer_batch = 2;
         a.outer_stride_b = -128;
       }},
  };
  for (const Corruption& c : corruptions) {
    FactGemmArgs bad = good;
    c.apply(bad);
    if (status(bad) != FACT_ERR_INVALID_ARGS) return std::string(c.what) + " not checked";
  }
  // Two batch modes: a size query for outer batches is answered like one launch's.
  FactGemmArgs two_modes = good;
  two_modes.outer_batch = 3;
  two_modes.outer_stride_a = two_modes.outer_stride_b = two_modes.outer_stride_d = 128 * 128;
  if (status(two_modes) == FACT_ERR_INVALID_ARGS) return "a call with two batch modes refused";
  for (int i = 0; i < good.num_steps; ++i) {
    if (good.steps[i].operand_type == FACT_DTYPE_NONE) continue;
    FactGemmArgs bad = two_modes;
    bad.steps[i].outer_batch_stride = -1;
    if (status(bad) != FACT_ERR_INVALID_ARGS) return "the outer stride of step " + std::to_string(i) + " not checked";
  }
  for (int i = 0; i < good.num_steps; ++i) {
    FactGemmArgs bad = good;
    bad.steps[i].kind = bad.steps[i].kind == FACT_STEP_SCALE ? FACT_STEP_ADD_SCALAR : FACT_STEP_SCALE;
    if (status(bad) != FACT_ERR_INVALID_ARGS) return "the kind of step " + std::to_string(i) + " not checked";
    if (good.steps[i].kind == FACT_STEP_ACTIVATION) {
      bad = good;
      bad.steps[i].activation = bad.steps[i].activation == FACT_ACT_RELU ? FACT_ACT_SILU : FACT_ACT_RELU;
      if (status(bad) != FACT_ERR_INVALID_ARGS) return "the activation of step " + std::to_string(i) + " not checked";
    }
    if (good.steps[i].operand_type != FACT_DTYPE_NONE) {
      bad = good;
      bad.steps[i].operand_type = FACT_DTYPE_F64;
      if (status(bad) != FACT_ERR_INVALID_ARGS) return "the operand dtype of step " + std::to_string(i) + " not checked";
    }
  }
  return "";
}

// Loads the library and checks what a loader relies on; returns "" or the problem.
std::string check_library(const fs::path& library, const RenderedKernel& kernel) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return std::string("dlopen failed: ") + dlerror();
  std::string problem;
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kernel.entry_symbol.c_str()));
  auto info = reinterpret_cast<FactKernelInfo>(dlsym(handle, "fact_kernel_info"));
  if (!entry || !info) {
    problem = "missing export " + (entry ? std::string("fact_kernel_info") : kernel.entry_symbol);
  } else {
    const nlohmann::json j = nlohmann::json::parse(info());
    if (j.at("kind") != "gemm") problem = "info names another kind";
    if (j.at("abi_version") != FACT_ABI_VERSION) problem = "info names another ABI version";
    if (j.at("entry") != kernel.entry_symbol) problem = "info names another entry";
    if (j.at("key") != kernel.key) problem = "info carries another key";
    if (realize::KernelSpec::from_json(j.at("spec")) != kernel.spec) problem = "info spec differs";
    if (problem.empty()) problem = check_abi(entry, GemmSpec::of(kernel.spec));
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

  // Compiles `spec`, checks the build (no C7510, no spills) and the library; returns the build.
  realize::CompileResult compile_and_check(const GemmSpec& spec, const std::string& name) {
    const RenderedKernel kernel = realize::render_kernel(spec.to_kernel_spec(), options_);
    const realize::CompileResult r = realize::compile_kernel(kernel, scratch(name), options_);
    EXPECT_TRUE(r.ok) << spec.name() << ": " << r.reason << "\n" << r.log.substr(0, 20000);
    if (!r.ok) return r;
    EXPECT_EQ(r.log.find("C7510"), std::string::npos) << "wgmma serialized:\n" << r.log;
    EXPECT_EQ(r.log.find("Potential Performance Loss"), std::string::npos) << r.log;
    EXPECT_EQ(r.usage.spill_store_bytes, 0) << "register spills in " << spec.name();
    EXPECT_GT(r.usage.registers, 0) << "no ptxas -v report in the log";
    EXPECT_EQ(check_library(r.output, kernel), "");
    std::cout << "[ compiled ] " << spec.name() << " in " << r.seconds << " s, "
              << r.usage.registers << " registers\n";
    return r;
  }

  realize::CompileOptions options_;
};

// The chain once composed to zeros, bf16: Linear -> x * 0.5 -> Hardtanh(-2, 2) -> GELU(erf), as the
// default configuration for an epilogue GEMM (128x128 ping-pong, 1x2 cluster). ABI v1 refused
// it (no run-time argument for the scale, one p0/p1 pair for both activations).
TEST_F(GemmCompile, Bf16ChainBiasScaleHardtanhGeluErf) {
  GemmSpec s = bf16_gemm();
  s.tile = {128, 128, 64};
  s.cluster = {1, 2, 1};
  s.mainloop = MainloopSchedule::Pingpong;
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                {Kind::Scale, Activation::Identity, DType::Unknown},
                {Kind::Activation, Activation::HardTanh, DType::Unknown},
                {Kind::Activation, Activation::GeluErf, DType::Unknown}};
  const RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
  EXPECT_NE(kernel.source.find("Activation<fact::gemm::epilogue::GeluErfFast,\n"
                               "      fact::gemm::epilogue::Activation<cutlass::epilogue::thread::Clamp,\n"
                               "      fact::gemm::epilogue::Scale<\n"
                               "      fact::gemm::epilogue::ColumnBias<cutlass::bfloat16_t,"),
            std::string::npos)
      << kernel.source;
  compile_and_check(s, "issue_chain");
}

// Attention scores on heads split from a projection (a 4-D matmul whose batch dims need two
// strides): a batched bf16 kernel whose entry runs the outer batch mode as launches, with the
// epilogue of masked attention scores (scale folded into alpha, the additive mask a residual
// shared by the heads, a key-padding bias per batch scaled by its step's value). Beyond the ABI
// checks every library gets: a call whose outer strides would move a pointer off 16-byte
// alignment runs padded (its size query asks for the staging; without a workspace it is
// refused before anything touches the device), a malformed one is refused.
TEST_F(GemmCompile, Bf16TwoBatchModesMaskedScores) {
  GemmSpec s = bf16_gemm();
  s.batched = true;
  s.b_layout = Layout::ColumnMajor;
  s.tile = {128, 128, 64};
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue = {{Kind::Residual, Activation::Identity, DType::BFloat16},
                {Kind::Bias, Activation::Identity, DType::BFloat16}};
  const RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
  const realize::CompileResult r = realize::compile_kernel(kernel, scratch("two_modes"), options_);
  ASSERT_TRUE(r.ok) << s.name() << ": " << r.reason << "\n" << r.log.substr(0, 20000);
  EXPECT_EQ(r.log.find("C7510"), std::string::npos) << r.log;
  EXPECT_EQ(r.usage.spill_store_bytes, 0);
  EXPECT_EQ(check_library(r.output, kernel), "");
  std::cout << "[ compiled ] " << s.name() << " in " << r.seconds << " s, " << r.usage.registers
            << " registers\n";

  void* handle = dlopen(r.output.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kernel.entry_symbol.c_str()));
  ASSERT_NE(entry, nullptr);
  // [B=2, H=4, T=128, T=128] scores of q, k [B, T, H, 64]: H the kernel's batch mode.
  FactGemmArgs call = args_for(s);
  call.k = 64;
  call.batch = 4;
  call.outer_batch = 2;
  call.lda = call.ldb = 4 * 64;
  call.stride_a = call.stride_b = 64;
  call.outer_stride_a = call.outer_stride_b = 128 * 4 * 64;
  call.stride_d = 128 * 128;
  call.outer_stride_d = 4 * 128 * 128;
  call.steps[0].value = 1.0f;
  call.steps[0].ld = 128;
  call.steps[0].batch_stride = 0;                 // the mask is shared by the heads
  call.steps[0].outer_batch_stride = 128 * 128;
  call.steps[1].value = 1.0f;
  call.steps[1].batch_stride = 0;
  call.steps[1].outer_batch_stride = 128;         // one padding row per batch
  alignas(16) static unsigned char fake[64];      // aligned addresses, never dereferenced
  call.a = call.b = fake;
  call.d = fake;
  call.steps[0].operand = call.steps[1].operand = fake;
  // Outer strides that would move a pointer off 16-byte alignment run padded (gemm_padding.h):
  // D written into the workspace and copied back, the bias staged. The size query asks for the
  // staging, and the call without a workspace is refused before anything touches the device.
  size_t aligned_bytes = 0, padded_bytes = 0;
  ASSERT_EQ(entry(&call.header, nullptr, &aligned_bytes, nullptr) == FACT_ERR_INVALID_ARGS, false);
  FactGemmArgs odd = call;
  odd.outer_stride_d += 4;  // 8 bytes: the second launch's D would be misaligned
  const int queried = entry(&odd.header, nullptr, &padded_bytes, nullptr);
  if (queried == FACT_OK) EXPECT_GE(padded_bytes, aligned_bytes + 2 * 4 * 128 * 128 * 2);
  EXPECT_EQ(entry(&odd.header, nullptr, nullptr, nullptr), FACT_ERR_WORKSPACE);
  odd = call;
  odd.steps[1].outer_batch_stride = 130;
  EXPECT_EQ(entry(&odd.header, nullptr, nullptr, nullptr), FACT_ERR_WORKSPACE);
  odd.steps[1].outer_batch_stride = -1;  // malformed: refused, not padded
  EXPECT_EQ(entry(&odd.header, nullptr, nullptr, nullptr), FACT_ERR_INVALID_ARGS);
  // (The well-formed call itself is not made: on a GPU it would launch on these addresses.)
  size_t workspace = 0;
  EXPECT_EQ(entry(&call.header, nullptr, &workspace, nullptr) == FACT_ERR_INVALID_ARGS, false);
  dlclose(handle);
}

TEST_F(GemmCompile, Tf32BatchedGemm) {
  GemmSpec s;
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
  SpaceOptions deep_k;
  deep_k.m = deep_k.n = 256;
  deep_k.k = 524288;
  const GemmSpace space = gemm_space(GemmSpec{}, deep_k);
  ASSERT_FALSE(space.candidates.empty());
  const GemmSpec& s = space.candidates.front();
  ASSERT_EQ(s.scheduler, TileScheduler::StreamK);
  ASSERT_GE(s.split_k, 16);
  const RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
  EXPECT_NE(kernel.source.find("kSplitK = " + std::to_string(s.split_k)), std::string::npos);
  EXPECT_FALSE(s.ordered_reduction);
  EXPECT_NE(kernel.source.find("kOrderedReduction = false"), std::string::npos);
  compile_and_check(s, "deep_k_split");
}

// The direct-store variant: a language model's LM head (F.linear(h, W), W [V, C]) whose
// vocabulary V makes D's rows unaligned. A and B stay TMA-read; D is written by the NoSmem
// epilogue, element by element. The spec comes from the problem (the engine's path), the space
// keeps only configurations that can run it, and the library refuses a D that is not even
// element-aligned before touching the device.
GemmProblem lm_head(int64_t m, int64_t n, int64_t k, DType dtype) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = GemmOperand{"h", dtype, Layout::RowMajor, k, 0};
  p.b = GemmOperand{"w", dtype, Layout::ColumnMajor, k, 0};
  p.d = GemmOperand{"logits", dtype, Layout::RowMajor, n, 0};
  return p;
}

TEST_F(GemmCompile, DirectStoreLmHeadBf16AndOddNFp16) {
  struct Case {
    const char* name;
    GemmProblem problem;
  };
  const Case cases[] = {{"lm_head_bf16", lm_head(8192, 50257, 768, DType::BFloat16)},
                        {"odd_n_fp16", lm_head(512, 1001, 256, DType::Float16)}};
  for (const Case& c : cases) {
    const GemmSpec s = spec_from_problem(c.problem, core::PrecisionMode::Native);
    ASSERT_EQ(s.align_d, 1) << c.name;
    ASSERT_TRUE(stores_d_directly(s)) << c.name;
    ASSERT_EQ(resolved_epilogue_schedule(s), EpilogueSchedule::NoSmem) << c.name;
    ASSERT_EQ(gemm_spec_error(s), std::nullopt) << c.name;
    // The tuning space holds only configurations that can run it.
    SpaceOptions sizes;
    sizes.m = c.problem.m;
    sizes.n = c.problem.n;
    sizes.k = c.problem.k;
    const GemmSpace space = gemm_space(s, sizes);
    ASSERT_FALSE(space.candidates.empty()) << c.name;
    for (const GemmSpec& candidate : space.candidates) {
      EXPECT_TRUE(stores_d_directly(candidate)) << candidate.name();
      EXPECT_EQ(candidate.scheduler, TileScheduler::Persistent) << candidate.name();
      EXPECT_EQ(resolved_epilogue_schedule(candidate), EpilogueSchedule::NoSmem) << candidate.name();
    }
    const RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
    EXPECT_NE(kernel.source.find("DirectStoreCollective"), std::string::npos) << kernel.source;
    EXPECT_NE(kernel.source.find("kDirectStore = true"), std::string::npos);
    EXPECT_NE(kernel.source.find("kAlignmentD = 1;"), std::string::npos);
    const realize::CompileResult r = compile_and_check(s, c.name);
    if (!r.ok) continue;

    void* handle = dlopen(r.output.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << dlerror();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, kernel.entry_symbol.c_str()));
    ASSERT_NE(entry, nullptr);
    FactGemmArgs call = args_for(s);
    call.m = c.problem.m;
    call.n = c.problem.n;
    call.k = c.problem.k;
    call.lda = call.ldb = c.problem.k;
    call.ldd = c.problem.n;
    alignas(16) static unsigned char fake[64];  // aligned addresses, never dereferenced
    call.a = call.b = fake;
    call.d = fake + 2;  // element-aligned, not 16-byte aligned: fine for the direct store
    size_t workspace = 0;
    EXPECT_NE(entry(&call.header, nullptr, &workspace, nullptr), FACT_ERR_INVALID_ARGS) << c.name;
    FactGemmArgs odd = call;
    odd.d = fake + 1;  // not even element-aligned
    EXPECT_EQ(entry(&odd.header, nullptr, nullptr, nullptr), FACT_ERR_CANNOT_IMPLEMENT) << c.name;
    odd = call;
    odd.ldd = c.problem.n - 1;  // shorter than a row
    EXPECT_EQ(entry(&odd.header, nullptr, &workspace, nullptr), FACT_ERR_INVALID_ARGS) << c.name;
    odd = call;
    odd.num_steps = 1;  // a step the kernel was not built for
    odd.steps[0].kind = FACT_STEP_SCALE;
    EXPECT_EQ(entry(&odd.header, nullptr, &workspace, nullptr), FACT_ERR_INVALID_ARGS) << c.name;
    dlclose(handle);
  }
}

// The direct-store variant runs any chain per element: bias -> tanh-GELU -> residual on an
// fp16 D with unaligned rows, as 64x128 ping-pong tiles (the residual's M×N operand is read
// element-wise at its own ld, the bias along N).
TEST_F(GemmCompile, DirectStoreBiasGeluResidualFp16) {
  GemmProblem p = lm_head(512, 1001, 256, DType::Float16);
  EpilogueStep bias;
  bias.kind = Kind::Bias;
  bias.operand = "bias";
  bias.operand_dtype = DType::Float16;
  EpilogueStep gelu;
  gelu.kind = Kind::Activation;
  gelu.activation = Activation::GeluTanh;
  EpilogueStep residual;
  residual.kind = Kind::Residual;
  residual.operand = "r";
  residual.operand_dtype = DType::Float16;
  residual.operand_ld = 1001;
  p.epilogue = {bias, gelu, residual};
  GemmSpec s = spec_from_problem(p, core::PrecisionMode::Native);
  // The problem itself runs padded (the residual's rows of 1001 are unaligned too: N padded to
  // 1008, D through the workspace, a TMA epilogue); the direct-store kernel of the same chain
  // still has to build.
  EXPECT_EQ(padding_summary(p), "N padded 1001\u21921008");
  EXPECT_FALSE(stores_d_directly(s));
  s.align_d = 1;
  s.tile = {64, 128, 64};
  s.cluster = {1, 1, 1};
  s.mainloop = MainloopSchedule::Pingpong;
  ASSERT_TRUE(stores_d_directly(s));
  ASSERT_EQ(s.epilogue.size(), 3u);
  ASSERT_EQ(gemm_spec_error(s), std::nullopt);
  const RenderedKernel kernel = realize::render_kernel(s.to_kernel_spec(), options_);
  EXPECT_NE(kernel.source.find("DirectStoreCollective"), std::string::npos) << kernel.source;
  compile_and_check(s, "direct_store_chain");
}

// Built together through the build driver (two nvcc at once):
//   - a residual and a product with two M×N operands (the first through CUTLASS's C, the second
//     loaded straight into registers by Sm90AuxLoad<0>), SiLU between them and a constant after;
//   - fp16 operands with a float32 output: two activations with parameters of their own
//     (leaky_relu's slope, hardtanh's bounds), the accurate tanh of float32 outputs and a float32
//     bias last.
TEST_F(GemmCompile, TwoOperandsAndParametrizedActivationsThroughTheBuildDriver) {
  GemmSpec operands = bf16_gemm();
  operands.tile = {128, 256, 64};
  operands.cluster = {2, 1, 1};
  operands.epilogue = {{Kind::Residual, Activation::Identity, DType::BFloat16},
                       {Kind::Activation, Activation::SiLU, DType::Unknown},
                       {Kind::Multiply, Activation::Identity, DType::BFloat16},
                       {Kind::AddScalar, Activation::Identity, DType::Unknown}};
  GemmSpec activations = bf16_gemm();
  activations.a_dtype = activations.b_dtype = DType::Float16;
  activations.d_dtype = DType::Float32;
  activations.align_d = 4;
  activations.tile = {64, 128, 64};
  activations.mainloop = MainloopSchedule::Pingpong;
  activations.epilogue = {{Kind::Activation, Activation::LeakyReLU, DType::Unknown},
                          {Kind::Activation, Activation::HardTanh, DType::Unknown},
                          {Kind::Activation, Activation::Tanh, DType::Unknown},
                          {Kind::Bias, Activation::Identity, DType::Float32}};

  const std::vector<RenderedKernel> kernels = {
      realize::render_kernel(operands.to_kernel_spec(), options_),
      realize::render_kernel(activations.to_kernel_spec(), options_)};
  EXPECT_NE(kernels[1].source.find("fact::gemm::epilogue::TanhAccurate"), std::string::npos);
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
    EXPECT_EQ(log.find("Potential Performance Loss"), std::string::npos) << log;
    const realize::PtxasUsage usage = realize::parse_ptxas_usage(log);
    EXPECT_EQ(usage.spill_store_bytes, 0) << outcomes[i].label;
    std::cout << "[ compiled ] " << kernels[i].spec.name() << ": " << usage.registers << " registers\n";
    EXPECT_EQ(check_library(outcomes[i].library, kernels[i]), "");
  }
}

}  // namespace
}  // namespace fact::gemm
