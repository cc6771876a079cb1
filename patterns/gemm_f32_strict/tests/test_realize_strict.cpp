#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <vector>
#include <sstream>

#include <dlfcn.h>
#include <unistd.h>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "patterns/gemm/kind/abi_names.hpp"
#include "patterns/gemm/realize/cutlass_names.hpp"
#include "patterns/gemm_f32_strict/realize/render.hpp"

namespace fact::strict {
namespace {

namespace fs = std::filesystem;
using realize::RenderedKernel;

RenderedKernel render_kernel(const GemmSpec& spec) { return realize::render_kernel(spec.to_kernel_spec()); }

GemmSpec strict_class(Layout a, Layout b) {
  GemmSpec s;
  s.pattern = "gemm_f32_strict";
  s.a_dtype = s.b_dtype = s.d_dtype = DType::Float32;
  s.a_layout = a;
  s.b_layout = b;
  s.align_a = s.align_b = s.align_d = 4;
  s.math = MathMode::Tf32x3;
  return s;
}

GemmSpec sm80_tn_example() {
  GemmSpec s = strict_class(Layout::RowMajor, Layout::ColumnMajor);
  s.mainloop = MainloopSchedule::Multistage;
  s.tile = {128, 128, 32};
  s.stages = 3;
  return s;
}

GemmSpec sm90_tn_example() {
  GemmSpec s = strict_class(Layout::RowMajor, Layout::ColumnMajor);
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
  GemmSpec bf16 = sm80_tn_example();
  bf16.a_dtype = bf16.b_dtype = DType::BFloat16;
  EXPECT_NE(f32_strict_unsupported_reason(bf16), std::nullopt);

  GemmSpec tf32 = sm80_tn_example();  // one TF32 product: the sm90 kernel only
  tf32.math = MathMode::Tf32;
  EXPECT_NE(f32_strict_unsupported_reason(tf32), std::nullopt);
  tf32.mainloop = MainloopSchedule::Cooperative;
  tf32.tile = {256, 128, 32};
  tf32.stages = 4;  // no lo buffer of B: four 48 KiB stages fit
  EXPECT_EQ(f32_strict_unsupported_reason(tf32), std::nullopt);
  tf32.stages = 5;
  EXPECT_NE(f32_strict_unsupported_reason(tf32), std::nullopt);

  GemmSpec bias_residual = sm80_tn_example();  // two source operands: sm90 only
  bias_residual.epilogue = {bias_step(), residual_step()};
  EXPECT_NE(f32_strict_unsupported_reason(bias_residual), std::nullopt);
  EXPECT_THROW(render_f32_strict_source(bias_residual), RenderError);
  GemmSpec residual_before_act = sm80_tn_example();
  residual_before_act.epilogue = {gelu_tanh_step(), residual_step()};
  EXPECT_NE(f32_strict_unsupported_reason(residual_before_act), std::nullopt);
  GemmSpec multiply = sm80_tn_example();
  multiply.epilogue = {{Kind::Multiply, Activation::Identity, DType::Float32}};
  EXPECT_NE(f32_strict_unsupported_reason(multiply), std::nullopt);
  multiply.mainloop = MainloopSchedule::Cooperative;
  multiply.tile = {256, 128, 32};
  multiply.stages = 2;
  EXPECT_EQ(f32_strict_unsupported_reason(multiply), std::nullopt);

  GemmSpec bf16_bias = sm90_tn_example();
  bf16_bias.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16}};
  EXPECT_NE(f32_strict_unsupported_reason(bf16_bias), std::nullopt);
  // ABI v2: the sm90 kernel fuses any chain (several biases, two M×N operands, scales anywhere).
  GemmSpec two_biases = sm90_tn_example();
  two_biases.epilogue = {bias_step(), gelu_tanh_step(), bias_step()};
  EXPECT_EQ(f32_strict_unsupported_reason(two_biases), std::nullopt);
  GemmSpec two_sources = sm90_tn_example();
  two_sources.stages = 2;
  two_sources.epilogue = {residual_step(), {Kind::Multiply, Activation::Identity, DType::Float32}};
  EXPECT_EQ(f32_strict_unsupported_reason(two_sources), std::nullopt);
  GemmSpec late_scale = sm90_tn_example();
  late_scale.epilogue = {bias_step(), {Kind::Scale, Activation::Identity, DType::Unknown}};
  EXPECT_EQ(f32_strict_unsupported_reason(late_scale), std::nullopt);
  late_scale.mainloop = MainloopSchedule::Multistage;  // the portable kernel's epilogue cannot
  late_scale.tile = {128, 128, 32};
  EXPECT_NE(f32_strict_unsupported_reason(late_scale), std::nullopt);
  GemmSpec identity = sm90_tn_example();
  identity.epilogue = {{Kind::Activation, Activation::Identity, DType::Unknown}};
  EXPECT_NE(f32_strict_unsupported_reason(identity), std::nullopt);

  GemmSpec col_d = sm80_tn_example();
  col_d.d_layout = Layout::ColumnMajor;
  EXPECT_NE(f32_strict_unsupported_reason(col_d), std::nullopt);

  GemmSpec too_deep = sm80_tn_example();
  too_deep.tile = {256, 128, 32};
  too_deep.stages = 6;  // 6 x 48 KiB of stages does not fit
  EXPECT_NE(f32_strict_unsupported_reason(too_deep), std::nullopt);

  GemmSpec no_k_major = sm90_tn_example();
  no_k_major.a_layout = Layout::ColumnMajor;
  no_k_major.b_layout = Layout::RowMajor;
  EXPECT_NE(f32_strict_unsupported_reason(no_k_major), std::nullopt);
  no_k_major.staged_transpose = StagedTranspose::B;  // the sm90 kernel, B copied K-major first
  EXPECT_EQ(f32_strict_unsupported_reason(no_k_major), std::nullopt);
  GemmSpec staged_portable = no_k_major;
  staged_portable.mainloop = MainloopSchedule::Multistage;  // reads any layout in place
  staged_portable.tile = {128, 128, 32};
  EXPECT_NE(f32_strict_unsupported_reason(staged_portable), std::nullopt);
  staged_portable.staged_transpose = StagedTranspose::None;  // the portable kernel takes it
  EXPECT_EQ(f32_strict_unsupported_reason(staged_portable), std::nullopt);
  GemmSpec staged_tn = sm90_tn_example();  // a K-major operand already: nothing to stage
  staged_tn.staged_transpose = StagedTranspose::A;
  EXPECT_NE(f32_strict_unsupported_reason(staged_tn), std::nullopt);

  GemmSpec sm90_deep = sm90_tn_example();
  sm90_deep.stages = 4;  // 4 x 64 KiB
  EXPECT_NE(f32_strict_unsupported_reason(sm90_deep), std::nullopt);

  GemmSpec residual_deep = sm90_tn_example();  // C stages take 32 KiB more epilogue
  residual_deep.epilogue = {residual_step()};
  EXPECT_NE(f32_strict_unsupported_reason(residual_deep), std::nullopt);
  residual_deep.stages = 2;
  EXPECT_EQ(f32_strict_unsupported_reason(residual_deep), std::nullopt);

  GemmSpec sm90_wide = sm90_tn_example();
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
}

// A column-major with B row-major (a weight gradient dY^T · X): the sm90 kernel with one operand
// staged transposed, the smaller one first (A is M x K, B is K x N), then the other, then the
// portable kernel; B first when the sizes are unknown.
TEST(GemmF32Strict, NoKMajorOperandStagesTheSmallerOperandFirst) {
  const GemmSpec nt = strict_class(Layout::ColumnMajor, Layout::RowMajor);
  auto count = [](const std::vector<GemmSpec>& candidates, StagedTranspose staged,
                  MainloopSchedule mainloop) {
    int n = 0;
    for (const auto& c : candidates) n += c.staged_transpose == staged && c.mainloop == mainloop;
    return n;
  };
  const auto unknown = f32_strict_candidates(nt);
  EXPECT_EQ(unknown.front().staged_transpose, StagedTranspose::B);
  EXPECT_EQ(count(unknown, StagedTranspose::A, MainloopSchedule::Cooperative), 6);
  EXPECT_EQ(count(unknown, StagedTranspose::B, MainloopSchedule::Cooperative), 6);
  EXPECT_GT(count(unknown, StagedTranspose::None, MainloopSchedule::Multistage), 0);
  EXPECT_EQ(unknown.back().mainloop, MainloopSchedule::Multistage);

  const auto narrow_m = f32_strict_candidates(nt, /*m=*/768, /*n=*/3072);  // A is smaller
  EXPECT_EQ(narrow_m.front().staged_transpose, StagedTranspose::A);
  EXPECT_NE(narrow_m.front().name().find("_stageat"), std::string::npos) << narrow_m.front().name();
  const auto narrow_n = f32_strict_candidates(nt, /*m=*/3072, /*n=*/768);
  EXPECT_EQ(narrow_n.front().staged_transpose, StagedTranspose::B);

  // The staged kernel's type: the wrapper over the Sm90StrictGemm of the layouts after the copy.
  const std::string stage_a = render_f32_strict_source(narrow_m.front());
  EXPECT_NE(stage_a.find("Sm90StagedTransposeGemm<\n    fact::strict::StagedOperand::A"),
            std::string::npos) << stage_a;
  EXPECT_NE(stage_a.find("Sm90StrictGemm<\n    cutlass::layout::RowMajor,  // A (M x K)\n"
                         "    cutlass::layout::RowMajor,  // B (K x N)"),
            std::string::npos) << stage_a;
  const std::string stage_b = render_f32_strict_source(narrow_n.front());
  EXPECT_NE(stage_b.find("Sm90StrictGemm<\n    cutlass::layout::ColumnMajor,  // A (M x K)\n"
                         "    cutlass::layout::ColumnMajor,  // B (K x N)"),
            std::string::npos) << stage_b;
  // The staged operand survives the spec's JSON (absent when none, so other keys are unchanged).
  EXPECT_EQ(GemmSpec::from_json(narrow_m.front().to_json()), narrow_m.front());
  EXPECT_FALSE(strict_class(Layout::RowMajor, Layout::ColumnMajor).to_json().contains("staged_transpose"));
}

// Precision tf32 with a layout the CUTLASS TF32 kernels refuse: the Hopper kernel with one TF32
// product (deeper pipelines: no lo buffer of B); A column-major with B row-major on it too, one
// operand staged transposed, and not on the portable kernel (3xTF32, more than asked).
TEST(GemmF32Strict, Tf32CandidatesUseOneProduct) {
  GemmSpec tt = strict_class(Layout::RowMajor, Layout::RowMajor);
  tt.math = MathMode::Tf32;
  const auto candidates = f32_strict_candidates(tt);
  ASSERT_EQ(candidates.size(), 6u);
  for (const auto& c : candidates) {
    EXPECT_EQ(c.math, MathMode::Tf32) << c.name();
    EXPECT_EQ(c.mainloop, MainloopSchedule::Cooperative) << c.name();
    EXPECT_EQ(f32_strict_unsupported_reason(c), std::nullopt) << c.name();
  }
  EXPECT_EQ(candidates.front().stages, 4);  // 256 x 128: 3xTF32 fits 3
  EXPECT_NE(candidates.front().name().find("_tf32"), std::string::npos);
  GemmSpec nt = strict_class(Layout::ColumnMajor, Layout::RowMajor);
  nt.math = MathMode::Tf32;
  const auto staged = f32_strict_candidates(nt);
  ASSERT_EQ(staged.size(), 12u);  // both staged operands x 3 tiles x 2 schedulers
  for (const auto& c : staged) {
    EXPECT_EQ(c.mainloop, MainloopSchedule::Cooperative) << c.name();
    EXPECT_EQ(c.math, MathMode::Tf32) << c.name();
    EXPECT_NE(c.staged_transpose, StagedTranspose::None) << c.name();
  }
}

TEST(GemmF32Strict, RendersResidualEpilogue) {
  GemmSpec residual = sm80_tn_example();
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
      GemmSpec problem = strict_class(Layout::RowMajor, b);
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
// one link per step of the spec (leading scales are alpha already: kernel_epilogue); tanh-GELU
// and tanh are the accurate ones (no tanh.approx).
TEST(GemmF32Strict, RendersEpilogueChainDeterministically) {
  GemmSpec spec = sm90_tn_example();
  spec.epilogue = {bias_step(), {Kind::Scale, Activation::Identity, DType::Unknown},
                   gelu_tanh_step(), {Kind::Activation, Activation::Tanh, DType::Unknown}};
  ASSERT_EQ(f32_strict_unsupported_reason(spec), std::nullopt);
  const std::string source = render_f32_strict_source(spec);
  EXPECT_EQ(source, render_f32_strict_source(spec));
  EXPECT_NE(source.find("fact::gemm::epilogue::Activation<fact::gemm::epilogue::TanhAccurate,\n"
                        "      fact::gemm::epilogue::Activation<fact::gemm::epilogue::GeluTanhAccurate,\n"
                        "      fact::gemm::epilogue::Scale<\n"
                        "      fact::gemm::epilogue::ColumnBias<float,\n"
                        "      fact::gemm::epilogue::ScaledAccumulator>>>>,  // epilogue chain\n"
                        "    3>;  // TF32 products per k-step (3xTF32: float32-accurate)"),
            std::string::npos)
      << source;
  EXPECT_EQ(source.find("GELU_taylor"), std::string::npos);
  EXPECT_NE(source.find("standalone_main<FactKernel::Chain>"), std::string::npos);

  GemmSpec unknown_operand = spec;  // an operand dtype left Unknown reads float
  unknown_operand.epilogue[0].operand_dtype = DType::Unknown;
  EXPECT_NE(render_f32_strict_source(unknown_operand).find("ColumnBias<float,"), std::string::npos);

  GemmSpec sm80 = sm80_tn_example();
  sm80.epilogue = {bias_step(), gelu_tanh_step()};
  EXPECT_NE(render_f32_strict_source(sm80).find("GeluTanhAccurate"), std::string::npos);
  EXPECT_NE(render_kernel(sm80).key, render_kernel(sm80_tn_example()).key);
}

TEST(GemmF32Strict, RenderKernelKeysTheRegisteredTemplate) {
  const GemmSpec spec = sm80_tn_example();
  const RenderedKernel kernel = render_kernel(spec);
  EXPECT_EQ(kernel.entry_symbol, "fact_" + kernel.key.substr(0, 16));
  EXPECT_NE(kernel.source.find("int " + kernel.entry_symbol + "("), std::string::npos);
  EXPECT_EQ(kernel.source.find(kEntryPlaceholder), std::string::npos);
  EXPECT_EQ(kernel.source.find(kKeyPlaceholder), std::string::npos);
  GemmSpec other = spec;
  other.stages = 4;
  EXPECT_NE(render_kernel(other).key, kernel.key);
}

// nn.Linear + tanh-GELU (the minGPT MLP's first GEMM) on the Hopper kernel.
GemmSpec sm90_bias_gelu_tanh() {
  GemmSpec s = sm90_tn_example();
  s.epilogue = {bias_step(), gelu_tanh_step()};
  return s;
}

GemmSpec sm80_bias_gelu_tanh() {
  GemmSpec s = sm80_tn_example();
  s.epilogue = {bias_step(), gelu_tanh_step()};
  return s;
}

// torch.matmul + bias + residual: the transposed Hopper run (bias along the kernel's M); with
// C loads in the epilogue two 256 x 128 stages fit.
GemmSpec sm90_nn_bias_residual() {
  GemmSpec s = sm90_tn_example();
  s.b_layout = Layout::RowMajor;
  s.epilogue = {bias_step(), residual_step()};
  s.stages = 2;
  return s;
}

// Epilogue chains on the Hopper kernel: every step kind, two M×N operands (the second loaded
// straight into registers), two activations; 128 x 128 tiles (at 256 x 128 this chain spills
// 16 bytes).
GemmSpec sm90_multi_step_chain() {
  GemmSpec s = sm90_tn_example();
  s.tile = {128, 128, 32};
  s.stages = 3;
  s.epilogue = {bias_step(), {Kind::Scale, Activation::Identity, DType::Unknown}, gelu_tanh_step(),
                residual_step(), {Kind::Multiply, Activation::Identity, DType::Float32},
                {Kind::Activation, Activation::Tanh, DType::Unknown}};
  return s;
}

// `x @ W + b` then GELU in precision tf32 (A and B row-major): the Hopper
// mainloop with one TF32 product, four stages (no lo buffer of B), the transposed run.
GemmSpec sm90_tt_tf32_bias_gelu() {
  GemmSpec s = sm90_tn_example();
  s.math = MathMode::Tf32;
  s.b_layout = Layout::RowMajor;
  s.stages = 4;
  s.epilogue = {bias_step(), {Kind::Activation, Activation::GeluErf, DType::Unknown}};
  return s;
}

// A weight gradient dW = dY^T · X (A column-major, B row-major: no K-major operand) on the Hopper
// kernel, `staged` copied transposed into the workspace first.
GemmSpec sm90_weight_gradient(StagedTranspose staged) {
  GemmSpec s = sm90_tn_example();
  s.a_layout = Layout::ColumnMajor;
  s.b_layout = Layout::RowMajor;
  s.staged_transpose = staged;
  return s;
}

// The variants committed under rendered/ (the GPU check in bench/strict_f32_notes.md builds
// and runs each): the portable baseline and the Hopper kernel in each layout family, a long
// chain, and one TF32 product with row-major B.
std::vector<GemmSpec> example_specs() {
  GemmSpec tn = sm90_tn_example();
  GemmSpec tn_stream_k = tn;
  tn_stream_k.scheduler = TileScheduler::StreamK;
  GemmSpec nn = tn;  // torch.matmul: runs as D^T = B^T A^T
  nn.b_layout = Layout::RowMajor;
  GemmSpec nt = tn;  // A column-major (register operand MN-major)
  nt.a_layout = Layout::ColumnMajor;
  return {sm80_tn_example(), tn, tn_stream_k, nn, nt, sm90_bias_gelu_tanh(),
          sm80_bias_gelu_tanh(), sm90_nn_bias_residual(), sm90_multi_step_chain(),
          sm90_tt_tf32_bias_gelu(), sm90_weight_gradient(StagedTranspose::A),
          sm90_weight_gradient(StagedTranspose::B)};
}

// Each committed example is exactly what the renderer writes for its spec
// (FACT_UPDATE_RENDERED=1 rewrites them).
TEST(GemmF32Strict, RenderedExamplesAreCurrent) {
  for (const GemmSpec& spec : example_specs()) {
    ASSERT_EQ(f32_strict_unsupported_reason(spec), std::nullopt) << spec.name();
    const std::string source = render_f32_strict_source(spec);
    const std::string header = spec.mainloop == MainloopSchedule::Cooperative
                                   ? "strict_gemm_sm90.cuh" : "strict_gemm_sm80.cuh";
    EXPECT_NE(source.find("int fact_" + spec.name() + "("), std::string::npos);
    EXPECT_NE(source.find("#include \"patterns/gemm_f32_strict/" + header + "\""), std::string::npos);
    // The kernel's layouts: the call's, or after the staged operand's transpose.
    const Layout a = spec.staged_transpose == StagedTranspose::A ? Layout::RowMajor : spec.a_layout;
    const Layout b = spec.staged_transpose == StagedTranspose::B ? Layout::ColumnMajor : spec.b_layout;
    EXPECT_NE(source.find(std::string(layout_cpp(a)) + ",  // A"), std::string::npos);
    EXPECT_NE(source.find(std::string(layout_cpp(b)) + ",  // B"), std::string::npos);
    EXPECT_NE(source.find("#ifdef FACT_STANDALONE_MAIN"), std::string::npos);
    const fs::path example =
        fs::path(FACT_SOURCE_DIR) / "patterns/gemm_f32_strict/rendered" / (spec.name() + ".cu");
    if (std::getenv("FACT_UPDATE_RENDERED")) std::ofstream(example) << source;
    ASSERT_TRUE(fs::exists(example)) << example << " is missing; render it with this test's spec";
    EXPECT_EQ(read_text(example), source) << "re-render " << example;
  }
}

// Loads a built library and checks its ABI v2 exports (no GPU needed): the info JSON names kind
// gemm, ABI version 2 and the spec; the entry accepts a well-formed size query's arguments and
// refuses (FACT_ERR_INVALID_ARGS) another kind, a float16 A, another B layout, and steps of
// another kind. Returns "" or the problem.
std::string check_library(const fs::path& library, const RenderedKernel& kernel) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return std::string("dlopen failed: ") + dlerror();
  std::string problem;
  using Entry = int (*)(const FactCallHeader*, void*, size_t*, void*);
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kernel.entry_symbol.c_str()));
  auto info = reinterpret_cast<FactKernelInfo>(dlsym(handle, "fact_kernel_info"));
  if (!entry || !info) {
    problem = "missing export";
  } else {
    const nlohmann::json j = nlohmann::json::parse(info());
    if (j.at("kind") != "gemm" || j.at("abi_version") != FACT_ABI_VERSION) problem = "info: kind/ABI";
    if (realize::KernelSpec::from_json(j.at("spec")) != kernel.spec) problem = "info: spec";
    const GemmSpec spec = GemmSpec::of(kernel.spec);
    FactGemmArgs good{};
    good.header = {FACT_ABI_VERSION, fact_kind_id("gemm"), sizeof(FactGemmArgs), 0};
    good.m = good.n = good.k = 128;
    good.batch = 1;
    good.a_type = good.b_type = good.d_type = FACT_DTYPE_F32;
    good.a_layout = abi_layout(spec.a_layout);
    good.b_layout = abi_layout(spec.b_layout);
    good.lda = good.ldb = good.ldd = 128;
    good.num_steps = static_cast<int32_t>(spec.epilogue.size());
    for (size_t i = 0; i < spec.epilogue.size(); ++i) {
      const EpilogueOpSpec& op = spec.epilogue[i];
      good.steps[i].kind = abi_step_kind(op.kind);
      if (op.kind == Kind::Activation) good.steps[i].activation = abi_activation(op.activation);
      if (reads_operand(op.kind)) good.steps[i].operand_type = FACT_DTYPE_F32;
      if (op.kind == Kind::Residual || op.kind == Kind::Multiply) good.steps[i].ld = 128;
    }
    size_t workspace = 0;
    auto status = [&](const FactGemmArgs& a) { return entry(&a.header, nullptr, &workspace, nullptr); };
    if (status(good) == FACT_ERR_INVALID_ARGS) problem = "a well-formed call refused";
    FactGemmArgs bad = good;
    bad.header.kind = fact_kind_id("attention");
    if (status(bad) != FACT_ERR_INVALID_ARGS) problem = "another kind accepted";
    bad = good;
    bad.a_type = FACT_DTYPE_F16;
    if (status(bad) != FACT_ERR_INVALID_ARGS) problem = "a float16 A accepted";
    bad = good;
    bad.b_layout = 1 - bad.b_layout;
    if (status(bad) != FACT_ERR_INVALID_ARGS) problem = "another B layout accepted";
    for (int i = 0; i < good.num_steps; ++i) {
      bad = good;
      bad.steps[i].kind = bad.steps[i].kind == FACT_STEP_SCALE ? FACT_STEP_ADD_SCALAR : FACT_STEP_SCALE;
      if (status(bad) != FACT_ERR_INVALID_ARGS) problem = "step " + std::to_string(i) + " not checked";
    }
    // Two batch modes (the entry runs the outer one as launches): a size query is answered, a
    // negative count or stride refused, and a real call whose outer stride would misalign a
    // pointer refused whole (before the device is touched).
    FactGemmArgs two_modes = good;
    two_modes.batch = 4;
    two_modes.stride_a = two_modes.stride_b = two_modes.stride_d = 128 * 128;
    two_modes.outer_batch = 2;
    two_modes.outer_stride_a = two_modes.outer_stride_b = two_modes.outer_stride_d = 4 * 128 * 128;
    if (status(two_modes) == FACT_ERR_INVALID_ARGS) problem = "two batch modes refused";
    bad = two_modes;
    bad.outer_batch = -1;
    if (status(bad) != FACT_ERR_INVALID_ARGS) problem = "a negative outer batch accepted";
    bad = two_modes;
    bad.outer_stride_a = -4;
    if (status(bad) != FACT_ERR_INVALID_ARGS) problem = "a negative outer stride accepted";
    alignas(16) static unsigned char fake[64];  // aligned addresses, never dereferenced
    bad = two_modes;
    bad.a = bad.b = fake;
    bad.d = fake;
    for (int i = 0; i < bad.num_steps; ++i) {
      if (bad.steps[i].operand_type != FACT_DTYPE_NONE) bad.steps[i].operand = fake;
    }
    bad.outer_stride_d = 4 * 128 * 128 + 2;
    // A misaligned outer stride runs padded (D through the workspace: gemm_padding.h); without
    // a workspace the call is refused before anything touches the device.
    if (entry(&bad.header, nullptr, nullptr, nullptr) != FACT_ERR_WORKSPACE)
      problem = "a misaligned outer stride not padded";
  }
  dlclose(handle);
  return problem;
}

// Compiles `spec`'s rendered source for sm_90a with the engine's nvcc command (realize::
// compile_kernel: -O3 -DNDEBUG, sm_90a, -Xptxas -v; C7510 and "Potential Performance Loss" fail
// it) and rejects spills. `standalone`: with -DFACT_STANDALONE_MAIN (the checker's main() and
// its reference kernels too).
void expect_compiles(const GemmSpec& spec, bool standalone = false) {
  realize::CompileOptions options = realize::default_compile_options();
  options.standalone_main = standalone;
  const fs::path dir = fs::temp_directory_path() /
                       ("fact_strict_test_" + std::to_string(::getpid()) + "_" + spec.name());
  const RenderedKernel kernel = realize::render_kernel(spec.to_kernel_spec(), options);
  const realize::CompileResult r = realize::compile_kernel(kernel, dir, options);
  EXPECT_TRUE(r.ok) << spec.name() << ": " << r.reason << "\n" << r.log.substr(0, 20000);
  if (r.ok && !standalone) EXPECT_EQ(check_library(r.output, kernel), "") << spec.name();
  EXPECT_EQ(r.log.find("C7510"), std::string::npos) << r.log;
  EXPECT_EQ(r.log.find("Potential Performance Loss"), std::string::npos) << r.log;
  EXPECT_FALSE(std::regex_search(r.log, std::regex("[1-9][0-9]* bytes spill"))) << r.log;
  std::cout << "[ compiled ] " << spec.name() << " in " << r.seconds << " s, " << r.usage.registers
            << " registers\n";
  fs::remove_all(dir);
}

bool can_compile() { return !realize::compile_unavailable_reason(realize::default_compile_options()); }

// The Hopper compiles take minutes of nvcc each: they run when FACT_SLOW_TESTS is set and not
// "0" (scripts/run_tests.sh, hence CI, sets it).
bool slow_tests_enabled() {
  const char* value = std::getenv("FACT_SLOW_TESTS");
  return value && *value && std::string(value) != "0";
}
constexpr const char* kSlowSkip =
    "slow (minutes of nvcc): runs with FACT_SLOW_TESTS=1, which scripts/run_tests.sh sets";

// ~30 s of nvcc: the portable kernel with a bias + tanh-GELU epilogue (LinearCombinationGeneric).
TEST(GemmF32Strict, PortableKernelCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  expect_compiles(sm80_bias_gelu_tanh());
}

// ~35 s of nvcc: the Hopper kernel with a six-step chain (scale, two activations, residual and
// product: two M×N operands), the chain also in the K-slice reduction.
TEST(GemmF32Strict, HopperMultiStepChainCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  expect_compiles(sm90_multi_step_chain());
}

// ~40 s of nvcc: one TF32 product with A and B row-major (`x @ W`).
TEST(GemmF32Strict, HopperTf32RowMajorBCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  expect_compiles(sm90_tt_tf32_bias_gelu());
}

// ~40 s of nvcc: a weight gradient (A column-major, B row-major) with A staged transposed: the
// wrapper, its transpose and the (row-major, row-major) kernel it runs; the library's entry
// checks the call's layouts (check_library flips B's and expects a refusal).
TEST(GemmF32Strict, HopperStagedTransposeCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  expect_compiles(sm90_weight_gradient(StagedTranspose::A));
}

// 1 to 4 minutes of nvcc: runs when FACT_SLOW_TESTS is set (the test command sets it).
TEST(GemmF32Strict, HopperKernelCompilesForSm90a) {
  if (!can_compile()) GTEST_SKIP() << "no nvcc or no CUTLASS headers in this build";
  if (!slow_tests_enabled()) GTEST_SKIP() << kSlowSkip;
  GemmSpec transposed = sm90_tn_example();
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
}  // namespace fact::strict
