// The GEMM pattern's lookup tables: every token parses back, and every CUTLASS spelling names a
// type that exists in the installed CUTLASS headers (or, for FACT's own links and functors, in
// gemm_epilogue.cuh).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "fact/realize/compile_command.hpp"
#include "patterns/gemm/realize/cutlass_names.hpp"

namespace fact::gemm {
namespace {

using realize::CompileOptions;
using realize::default_compile_options;

using Kind = EpilogueStep::Kind;

TEST(CutlassNames, TokensRoundTrip) {
  for (DType d : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16, DType::Int32,
                  DType::Int8, DType::UInt8}) {
    EXPECT_EQ(parse_dtype_token(dtype_token(d)), d);
  }
  for (Layout l : {Layout::RowMajor, Layout::ColumnMajor}) {
    EXPECT_EQ(parse_layout_json(layout_json(l)), l);
  }
  for (auto s : {MainloopSchedule::Auto, MainloopSchedule::TmaWarpSpecialized,
                 MainloopSchedule::Cooperative, MainloopSchedule::Pingpong,
                 MainloopSchedule::Multistage}) {
    EXPECT_EQ(parse_mainloop_token(mainloop_token(s)), s);
  }
  for (auto s : {EpilogueSchedule::Auto, EpilogueSchedule::TmaWarpSpecialized,
                 EpilogueSchedule::TmaCooperative, EpilogueSchedule::NoSmem}) {
    EXPECT_EQ(parse_epilogue_schedule_token(epilogue_schedule_token(s)), s);
  }
  for (auto s : {TileScheduler::Persistent, TileScheduler::StreamK}) {
    EXPECT_EQ(parse_tile_scheduler_token(tile_scheduler_token(s)), s);
  }
  for (auto r : {RasterOrder::Heuristic, RasterOrder::AlongM, RasterOrder::AlongN}) {
    EXPECT_EQ(parse_raster_token(raster_token(r)), r);
  }
  for (auto m : {MathMode::Native, MathMode::Tf32, MathMode::Tf32x3, MathMode::Simt}) {
    EXPECT_EQ(parse_math_token(math_token(m)), m);
  }
  for (auto a : {Activation::Identity, Activation::ReLU, Activation::GeluErf, Activation::GeluTanh,
                 Activation::SiLU, Activation::Sigmoid, Activation::LeakyReLU,
                 Activation::HardTanh, Activation::Tanh}) {
    EXPECT_EQ(parse_activation_token(activation_token(a)), a);
    EXPECT_EQ(activation_token(a), activation_name(a)) << "token differs from the problem's";
  }
  for (auto k : {Kind::Scale, Kind::AddScalar, Kind::Bias, Kind::Activation, Kind::Residual,
                 Kind::Multiply}) {
    EXPECT_EQ(parse_epilogue_kind_token(epilogue_kind_token(k)), k);
  }
}

TEST(CutlassNames, UnknownTokensAndMissingSpellingsThrow) {
  EXPECT_THROW(parse_dtype_token("bfloat17"), std::invalid_argument);
  EXPECT_THROW(parse_mainloop_token(""), std::invalid_argument);
  EXPECT_THROW(dtype_cpp(DType::Bool), std::invalid_argument);
  EXPECT_THROW(activation_cpp(Activation::Identity, false), std::invalid_argument);
  EXPECT_THROW(mainloop_cpp(MainloopSchedule::Multistage), std::invalid_argument);
}

TEST(CutlassNames, GemmSpellings) {
  EXPECT_EQ(dtype_cpp(DType::BFloat16), "cutlass::bfloat16_t");
  EXPECT_EQ(dtype_cpp(DType::Float16), "cutlass::half_t");
  EXPECT_EQ(dtype_cpp(DType::Float32), "float");
  EXPECT_EQ(layout_letter(Layout::RowMajor), 't');
  EXPECT_EQ(layout_letter(Layout::ColumnMajor), 'n');
  EXPECT_EQ(activation_cpp(Activation::GeluTanh, false), "cutlass::epilogue::thread::GELU_taylor");
  EXPECT_EQ(activation_cpp(Activation::GeluTanh, true), "fact::gemm::epilogue::GeluTanhAccurate");
  EXPECT_EQ(activation_cpp(Activation::ReLU, true), "cutlass::epilogue::thread::ReLu");
  EXPECT_EQ(activation_cpp(Activation::Tanh, false), "cutlass::epilogue::thread::Tanh");
  EXPECT_EQ(activation_cpp(Activation::Tanh, true), "fact::gemm::epilogue::TanhAccurate");
  // erf-GELU: FACT's fast functor for 16-bit outputs, CUTLASS's erff-based one for float32.
  EXPECT_EQ(activation_cpp(Activation::GeluErf, false), "fact::gemm::epilogue::GeluErfFast");
  EXPECT_EQ(activation_cpp(Activation::GeluErf, true), "cutlass::epilogue::thread::GELU");
  EXPECT_EQ(epilogue_link_cpp(Kind::Multiply), "fact::gemm::epilogue::Multiply");
}

// "a::b::Name" or "a::b::Enum::Value" -> the identifier to look for.
std::string last_component(std::string_view spelling) {
  const size_t at = spelling.rfind("::");
  return std::string(at == std::string_view::npos ? spelling : spelling.substr(at + 2));
}

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CutlassNames, SpellingsExistInTheInstalledHeaders) {
  const CompileOptions options = default_compile_options();
  const auto include = options.cutlass_include;
  if (include.empty() || !std::filesystem::exists(include / "cutlass" / "cutlass.h")) {
    GTEST_SKIP() << "CUTLASS headers not found (set FACT_CUTLASS_DIR)";
  }
  // The headers that declare the schedule tags, tile schedulers and activation functors.
  std::string declarations;
  for (const char* header :
       {"cutlass/epilogue/thread/activation.h", "cutlass/gemm/dispatch_policy.hpp",
        "cutlass/gemm/collective/collective_builder_decl.hpp",
        "cutlass/epilogue/dispatch_policy.hpp", "cutlass/epilogue/collective/collective_builder.hpp",
        "cutlass/gemm/kernel/tile_scheduler.hpp"}) {
    const std::string text = read_all(include / header);
    ASSERT_FALSE(text.empty()) << "cannot read " << include / header;
    declarations += text;
  }
  std::vector<std::string> spellings;
  for (auto a : {Activation::ReLU, Activation::GeluErf, Activation::GeluTanh, Activation::SiLU,
                 Activation::Sigmoid, Activation::LeakyReLU, Activation::HardTanh, Activation::Tanh}) {
    for (bool accurate_float : {false, true}) {
      const std::string spelling(activation_cpp(a, accurate_float));
      // FACT's own functors (gemm_epilogue.cuh) are checked below.
      if (spelling.rfind("cutlass::", 0) == 0) spellings.push_back(spelling);
    }
  }
  for (auto s : {MainloopSchedule::TmaWarpSpecialized, MainloopSchedule::Cooperative,
                 MainloopSchedule::Pingpong, MainloopSchedule::Auto}) {
    spellings.emplace_back(mainloop_cpp(s));
  }
  for (auto s : {EpilogueSchedule::TmaWarpSpecialized, EpilogueSchedule::TmaCooperative,
                 EpilogueSchedule::NoSmem, EpilogueSchedule::Auto}) {
    spellings.emplace_back(epilogue_schedule_cpp(s));
  }
  for (auto s : {TileScheduler::Persistent, TileScheduler::StreamK}) {
    spellings.emplace_back(tile_scheduler_cpp(s));
  }
  for (const auto& spelling : spellings) {
    const std::string name = last_component(spelling);
    const bool declared = declarations.find("struct " + name + " ") != std::string::npos ||
                          declarations.find("struct " + name + "{") != std::string::npos ||
                          declarations.find("struct " + name + " final") != std::string::npos ||
                          declarations.find("struct " + name + "\n") != std::string::npos;
    EXPECT_TRUE(declared) << spelling << " is not declared in the installed CUTLASS headers";
  }
  // FACT's links and accurate functors: gemm_epilogue.cuh declares them.
  const std::string links = read_all(options.fact_root / "patterns/gemm/gemm_epilogue.cuh");
  ASSERT_FALSE(links.empty());
  for (auto k : {Kind::Scale, Kind::AddScalar, Kind::Bias, Kind::Activation, Kind::Residual,
                 Kind::Multiply}) {
    const std::string name = last_component(epilogue_link_cpp(k));
    EXPECT_NE(links.find("struct " + name + " "), std::string::npos) << epilogue_link_cpp(k);
  }
  for (auto [a, accurate_float] : {std::pair{Activation::GeluTanh, true}, std::pair{Activation::Tanh, true},
                                   std::pair{Activation::GeluErf, false}}) {
    const std::string name = last_component(activation_cpp(a, accurate_float));
    EXPECT_NE(links.find("struct " + name + " {"), std::string::npos)
        << activation_cpp(a, accurate_float);
  }
  const std::string raster = read_all(include / "cutlass/gemm/kernel/tile_scheduler_detail.hpp");
  for (auto r : {RasterOrder::Heuristic, RasterOrder::AlongM, RasterOrder::AlongN}) {
    EXPECT_NE(raster.find("enum class RasterOrderOptions"), std::string::npos);
    EXPECT_NE(raster.find(last_component(raster_cpp(r))), std::string::npos) << raster_cpp(r);
  }
}

}  // namespace
}  // namespace fact::gemm
