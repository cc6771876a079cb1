// Rendering the GEMM template through the engine's render_kernel: deterministic sources and
// keys, keys that change with everything they hash, the ABI v2 entry point and info JSON, and
// specs the template refuses.
#include <algorithm>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "fact/gemm_epilogue_step_files.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/realize/render.hpp"
#include "patterns/gemm/realize/render.hpp"
#include "patterns/gemm/realize/space.hpp"

namespace fact::gemm {
namespace {

using realize::CompileOptions;
using realize::default_compile_options;
using realize::RenderedKernel;
using realize::RenderError;
using Kind = EpilogueStep::Kind;

RenderedKernel render_kernel(const GemmSpec& s, const CompileOptions& options = default_compile_options()) {
  return realize::render_kernel(s.to_kernel_spec(), options);
}

GemmSpec bf16_spec() {
  GemmSpec s;
  s.tile = {128, 128, 64};
  s.mainloop = MainloopSchedule::Cooperative;
  return s;
}

GemmSpec bias_gelu_spec() {
  GemmSpec s = bf16_spec();
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                {Kind::Activation, Activation::GeluTanh, DType::Unknown}};
  return s;
}

std::string info_json(const std::string& source) {
  const std::string open = "R\"fact_json(";
  const size_t begin = source.find(open);
  const size_t end = source.find(")fact_json\"");
  if (begin == std::string::npos || end == std::string::npos) return {};
  return source.substr(begin + open.size(), end - begin - open.size());
}

TEST(Render, IsDeterministic) {
  const RenderedKernel a = render_kernel(bias_gelu_spec());
  const RenderedKernel b = render_kernel(bias_gelu_spec());
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.entry_symbol, b.entry_symbol);
}

TEST(Render, KeyIsSha256AndNamesTheEntryPoint) {
  const RenderedKernel k = render_kernel(bf16_spec());
  EXPECT_TRUE(std::regex_match(k.key, std::regex("[0-9a-f]{64}"))) << k.key;
  EXPECT_EQ(k.entry_symbol, "fact_" + k.key.substr(0, 16));
  EXPECT_NE(k.source.find("extern \"C\" FACT_EXPORT int " + k.entry_symbol + "("), std::string::npos);
  EXPECT_NE(k.source.find("const char* fact_kernel_info(void)"), std::string::npos);
  EXPECT_NE(k.source.find("// Kernel: " + bf16_spec().name()), std::string::npos);
  EXPECT_EQ(k.source.find(realize::kEntryPlaceholder), std::string::npos);
  EXPECT_EQ(k.source.find(realize::kKeyPlaceholder), std::string::npos);
  EXPECT_NE(k.source.find("(const FactCallHeader* args, void* workspace"), std::string::npos);
  EXPECT_NE(k.source.find("#ifdef FACT_STANDALONE_MAIN"), std::string::npos);
}

TEST(Render, InfoJsonCarriesSpecEntryAndKey) {
  const RenderedKernel k = render_kernel(bias_gelu_spec());
  const nlohmann::json info = nlohmann::json::parse(info_json(k.source));
  EXPECT_EQ(info.at("entry"), k.entry_symbol);
  EXPECT_EQ(info.at("key"), k.key);
  EXPECT_EQ(info.at("name"), bias_gelu_spec().name());
  EXPECT_EQ(info.at("kind"), "gemm");
  EXPECT_EQ(info.at("abi_version"), FACT_ABI_VERSION);
  // What KernelLibrary reads: the engine's KernelSpec JSON.
  EXPECT_EQ(realize::KernelSpec::from_json(info.at("spec")), bias_gelu_spec().to_kernel_spec());
}

TEST(Render, DifferentSpecsGetDifferentKeys) {
  std::set<std::string> keys;
  SpaceOptions options;
  const GemmSpace space = gemm_space(bias_gelu_spec(), options);
  ASSERT_GE(space.candidates.size(), 20u);
  for (const auto& spec : space.candidates) {
    const RenderedKernel k = render_kernel(spec);
    EXPECT_TRUE(keys.insert(k.key).second) << "key collision for " << spec.name();
  }
}

TEST(Render, KeyChangesWithTheCompileCommand) {
  CompileOptions options = default_compile_options();
  const std::string base = render_kernel(bf16_spec(), options).key;
  CompileOptions flagged = options;
  flagged.extra_flags.push_back("-lineinfo");
  EXPECT_NE(render_kernel(bf16_spec(), flagged).key, base);
  CompileOptions standard = options;
  standard.cxx_standard = "c++20";
  EXPECT_NE(render_kernel(bf16_spec(), standard).key, base);
}

TEST(Render, KeyIgnoresWhereTheSameSourcesLive) {
  CompileOptions options = default_compile_options();
  CompileOptions moved = options;
  moved.nvcc = options.nvcc;  // same compiler
  moved.fact_root = options.fact_root / "." ;
  EXPECT_EQ(render_kernel(bf16_spec(), moved).key, render_kernel(bf16_spec(), options).key);
}

// The generated headers live elsewhere too: the key names their folder by role, not by path.
TEST(Render, KeyIgnoresWhereTheGeneratedHeadersLive) {
  CompileOptions options = default_compile_options();
  CompileOptions moved = options;
  moved.generated_include = options.generated_include / ".";
  EXPECT_EQ(render_kernel(bf16_spec(), moved).key, render_kernel(bf16_spec(), options).key);
}

// A kernel's key hashes the files of the steps pattern folders register (their fragments and the
// headers those include), as it hashes the GEMM's own headers: every one is in both header lists.
TEST(Render, HeadersListEveryFileOfThePatternsSteps) {
  const std::vector<std::string>& all = gemm_template_headers();
  const std::vector<std::string>& epilogue = gemm_epilogue_headers();
  ASSERT_FALSE(build_info::kGemmEpilogueStepFiles.empty());
  for (std::string_view file : build_info::kGemmEpilogueStepFiles) {
    EXPECT_NE(std::find(all.begin(), all.end(), file), all.end()) << file;
    EXPECT_NE(std::find(epilogue.begin(), epilogue.end(), file), epilogue.end()) << file;
  }
  for (const char* own : {"patterns/gemm/epilogue/ops.def", "patterns/gemm/epilogue/op_formulas.h",
                          "patterns/gemm/epilogue/gelu_erf_fast.h", "patterns/gemm/gemm_epilogue.cuh",
                          "patterns/gemm/gemm_store_stages.cuh", "patterns/gemm/gemm_root_store.cuh"}) {
    EXPECT_NE(std::find(epilogue.begin(), epilogue.end(), own), epilogue.end()) << own;
  }
}

TEST(Render, SourceHoldsTheTypeChoices) {
  const RenderedKernel k = render_kernel(bias_gelu_spec());
  for (const char* expected :
       {"using ElementA = cutlass::bfloat16_t;", "using ElementC = void;",
        "using LayoutA = cutlass::layout::RowMajor;",
        "using LayoutB = cutlass::layout::ColumnMajor;", "using TileShape = Shape<_128, _128, _64>;",
        "using ClusterShape = Shape<_1, _1, _1>;",
        "using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;",
        "using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;",
        "using TileScheduler = cutlass::gemm::PersistentScheduler;",
        "fact::gemm::epilogue::Activation<cutlass::epilogue::thread::GELU_taylor",
        "fact::gemm::epilogue::ColumnBias<cutlass::bfloat16_t",
        "fact::gemm::epilogue::ScaledAccumulator",
        "cutlass::gemm::collective::StageCountAutoCarveout",
        "cutlass::epilogue::collective::EpilogueTileAuto",
        "#include \"patterns/gemm/gemm_entry.cuh\""}) {
    EXPECT_NE(k.source.find(expected), std::string::npos) << "missing: " << expected;
  }
}

TEST(Render, AutoScheduleStaysAutoForTheBuilder) {
  GemmSpec s = bf16_spec();
  s.mainloop = MainloopSchedule::Auto;
  s.tile = {64, 128, 64};
  const RenderedKernel k = render_kernel(s);
  EXPECT_NE(k.source.find("using MainloopSchedule = cutlass::gemm::collective::KernelScheduleAuto;"),
            std::string::npos);
  // The epilogue must pair with what the builder picks for a 64-row tile: ping-pong.
  EXPECT_NE(k.source.find("using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;"),
            std::string::npos);
}

// The first M×N operand is CUTLASS's C (ElementC); a second one is loaded by its own link.
TEST(Render, ResidualAndMultiplyReadC) {
  GemmSpec residual = bf16_spec();
  residual.epilogue = {{Kind::Residual, Activation::Identity, DType::BFloat16}};
  const RenderedKernel r = render_kernel(residual);
  EXPECT_NE(r.source.find("using ElementC = cutlass::bfloat16_t;"), std::string::npos);
  EXPECT_NE(r.source.find("fact::gemm::epilogue::Residual<cutlass::bfloat16_t"), std::string::npos);

  GemmSpec product = bf16_spec();
  product.epilogue = {{Kind::Multiply, Activation::Identity, DType::BFloat16}};
  const RenderedKernel m = render_kernel(product);
  EXPECT_NE(m.source.find("fact::gemm::epilogue::Multiply<cutlass::bfloat16_t"),
            std::string::npos);
  EXPECT_NE(r.key, m.key);

  GemmSpec both = bf16_spec();
  both.epilogue = {{Kind::Multiply, Activation::Identity, DType::Float16},
                   {Kind::Residual, Activation::Identity, DType::BFloat16}};
  const RenderedKernel b = render_kernel(both);
  EXPECT_NE(b.source.find("using ElementC = cutlass::half_t;"), std::string::npos) << b.source;
  EXPECT_NE(b.source.find("fact::gemm::epilogue::Residual<cutlass::bfloat16_t,\n"
                          "      fact::gemm::epilogue::Multiply<cutlass::half_t,"),
            std::string::npos)
      << b.source;
}

TEST(Render, Float32OutputsUseTheAccurateTanhFunctors) {
  GemmSpec s = bias_gelu_spec();
  s.a_dtype = s.b_dtype = s.d_dtype = DType::Float32;
  s.align_a = s.align_b = s.align_d = 4;
  s.math = MathMode::Tf32;
  s.tile.k = 32;
  s.epilogue[0].operand_dtype = DType::Float32;
  const RenderedKernel k = render_kernel(s);
  EXPECT_NE(k.source.find("fact::gemm::epilogue::GeluTanhAccurate"), std::string::npos);
  EXPECT_EQ(k.source.find("GELU_taylor"), std::string::npos);
  EXPECT_NE(k.source.find("using ElementA = float;"), std::string::npos);
  s.epilogue.push_back({Kind::Activation, Activation::Tanh, DType::Unknown});
  EXPECT_NE(render_kernel(s).source.find("fact::gemm::epilogue::TanhAccurate"), std::string::npos);
  GemmSpec bf16 = bias_gelu_spec();  // 16-bit outputs keep CUTLASS's tanh.approx functors
  bf16.epilogue.push_back({Kind::Activation, Activation::Tanh, DType::Unknown});
  EXPECT_NE(render_kernel(bf16).source.find("cutlass::epilogue::thread::Tanh,"), std::string::npos);
}

TEST(Render, ExplicitStagesUseStageCount) {
  GemmSpec s = bf16_spec();
  s.stages = 4;
  const RenderedKernel k = render_kernel(s);
  EXPECT_NE(k.source.find("cutlass::gemm::collective::StageCount<4>"), std::string::npos);
  EXPECT_EQ(k.source.find("StageCountAutoCarveout"), std::string::npos);
}

TEST(Render, RefusesSpecsTheTemplateCannotInstantiate) {
  auto expect_refused = [](GemmSpec s, const std::string& why) {
    try {
      render_kernel(s);
      ADD_FAILURE() << "rendered " << s.name();
    } catch (const RenderError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  GemmSpec strict = bf16_spec();
  strict.a_dtype = strict.b_dtype = strict.d_dtype = DType::Float32;
  strict.align_a = strict.align_b = strict.align_d = 4;
  strict.tile.k = 32;
  strict.math = MathMode::Tf32x3;
  expect_refused(strict, "3xtf32");

  GemmSpec coop64 = bf16_spec();
  coop64.tile.m = 64;
  expect_refused(coop64, "cooperative");

  GemmSpec pingpong_streamk = bf16_spec();
  pingpong_streamk.mainloop = MainloopSchedule::Pingpong;
  pingpong_streamk.scheduler = TileScheduler::StreamK;
  expect_refused(pingpong_streamk, "stream-K");

  GemmSpec unaligned = bf16_spec();
  unaligned.align_a = 4;
  expect_refused(unaligned, "16 bytes");

  GemmSpec nosmem = bf16_spec();
  nosmem.epilogue_schedule = EpilogueSchedule::NoSmem;
  expect_refused(nosmem, "NoSmem");

  GemmSpec tf32_row_b = bf16_spec();  // gemm_f32_strict takes these (one TF32 product)
  tf32_row_b.a_dtype = tf32_row_b.b_dtype = tf32_row_b.d_dtype = DType::Float32;
  tf32_row_b.align_a = tf32_row_b.align_b = tf32_row_b.align_d = 4;
  tf32_row_b.tile.k = 32;
  tf32_row_b.math = MathMode::Tf32;
  tf32_row_b.b_layout = Layout::RowMajor;
  expect_refused(tf32_row_b, "gemm_f32_strict");

  GemmSpec nine_steps = bf16_spec();
  nine_steps.epilogue.assign(9, {Kind::Scale, Activation::Identity, DType::Unknown});
  expect_refused(nine_steps, "at most 8");

  GemmSpec unknown = bf16_spec();
  unknown.pattern = "no_such_pattern";
  try {
    render_kernel(unknown);
    ADD_FAILURE() << "rendered a spec of an unknown pattern";
  } catch (const RenderError&) {
  }
}

TEST(Render, GemmRealizerIsRegistered) {
  const auto names = realize::RealizerRegistry::global().patterns();
  EXPECT_NE(std::find(names.begin(), names.end(), "gemm"), names.end());
  const realize::Realizer* realizer = realize::RealizerRegistry::global().find("gemm");
  ASSERT_NE(realizer, nullptr);
  EXPECT_EQ(realizer->kind(), "gemm");
}

}  // namespace
}  // namespace fact::gemm
