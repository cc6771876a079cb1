// GemmSpec: readable names, JSON round trip, strict parsing, the engine's GemmSpec form.
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

#include "fact/realize/kernel_spec.hpp"
#include "patterns/gemm/realize/space.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

GemmSpec bias_gelu_spec() {
  GemmSpec s;
  s.epilogue = {{Kind::Bias, Activation::Identity, DType::BFloat16},
                {Kind::Activation, Activation::GeluTanh, DType::Unknown}};
  s.tile = {128, 256, 64};
  s.cluster = {2, 1, 1};
  s.mainloop = MainloopSchedule::Cooperative;
  return s;
}

TEST(GemmSpecName, ReadsAsFusionDtypeLayoutTileClusterSchedule) {
  EXPECT_EQ(bias_gelu_spec().name(), "gemm_bias_gelu_tanh_bf16_tn_128x256x64_c2x1_coop_persistent");
}

TEST(GemmSpecName, NamesEveryNonDefaultField) {
  GemmSpec s;
  s.a_dtype = s.b_dtype = DType::Float32;
  s.d_dtype = DType::Float32;
  s.align_a = s.align_b = s.align_d = 4;
  s.math = MathMode::Tf32;
  s.batched = true;
  s.b_layout = Layout::RowMajor;
  s.d_layout = Layout::ColumnMajor;
  s.tile = {128, 128, 32};
  s.mainloop = MainloopSchedule::Cooperative;
  s.epilogue_schedule = EpilogueSchedule::TmaCooperative;
  s.scheduler = TileScheduler::StreamK;
  s.split_k = 4;
  s.raster = RasterOrder::AlongN;
  s.swizzle = 8;
  s.stages = 3;
  s.epilogue = {{Kind::Residual, Activation::Identity, DType::BFloat16}};
  EXPECT_EQ(s.name(),
            "bgemm_residualbf16_f32_ttn_128x128x32_c1x1_coop_etmacoop_streamk_splitk4_rastern_sw8_s3_tf32");
}

TEST(GemmSpecName, IsAUsableCIdentifier) {
  const std::string name = bias_gelu_spec().name();
  for (char c : name) {
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << name;
  }
}

TEST(GemmSpecName, UniqueOverTheExhaustiveSpace) {
  GemmSpec problem_class = bias_gelu_spec();
  SpaceOptions options;
  options.exhaustive = true;
  options.max_candidates = 1 << 30;
  const GemmSpace space = gemm_space(problem_class, options);
  std::set<std::string> names;
  size_t total = 0;
  for (const auto& s : space.candidates) names.insert(s.name()), ++total;
  for (const auto& p : space.pruned) names.insert(p.spec.name()), ++total;
  EXPECT_GT(total, 10000u);
  EXPECT_EQ(names.size(), total);
}

TEST(GemmSpecName, DiffersWhenAnyFieldDiffers) {
  const GemmSpec base = bias_gelu_spec();
  std::vector<GemmSpec> variants;
  auto vary = [&](auto change) {
    GemmSpec s = base;
    change(s);
    variants.push_back(s);
  };
  vary([](GemmSpec& s) { s.pattern = "another_pattern"; });
  vary([](GemmSpec& s) { s.a_dtype = s.b_dtype = DType::Float16; });
  vary([](GemmSpec& s) { s.d_dtype = DType::Float32; });
  vary([](GemmSpec& s) { s.accumulate = DType::Float16; });
  vary([](GemmSpec& s) { s.a_layout = Layout::ColumnMajor; });
  vary([](GemmSpec& s) { s.b_layout = Layout::RowMajor; });
  vary([](GemmSpec& s) { s.d_layout = Layout::ColumnMajor; });
  vary([](GemmSpec& s) { s.align_a = 4; });
  vary([](GemmSpec& s) { s.align_b = 4; });
  vary([](GemmSpec& s) { s.align_d = 4; });
  vary([](GemmSpec& s) { s.batched = true; });
  vary([](GemmSpec& s) { s.math = MathMode::Simt; });
  vary([](GemmSpec& s) { s.epilogue[1].activation = Activation::ReLU; });
  vary([](GemmSpec& s) { s.epilogue[0].operand_dtype = DType::Float32; });
  vary([](GemmSpec& s) { s.epilogue.pop_back(); });
  vary([](GemmSpec& s) { s.tile.k = 128; });
  vary([](GemmSpec& s) { s.cluster = {1, 2, 1}; });
  vary([](GemmSpec& s) { s.cluster.k = 2; });
  vary([](GemmSpec& s) { s.mainloop = MainloopSchedule::Auto; });
  vary([](GemmSpec& s) { s.epilogue_schedule = EpilogueSchedule::TmaCooperative; });
  vary([](GemmSpec& s) { s.scheduler = TileScheduler::StreamK; });
  vary([](GemmSpec& s) { s.raster = RasterOrder::AlongM; });
  vary([](GemmSpec& s) { s.swizzle = 2; });
  vary([](GemmSpec& s) { s.split_k = 2; });
  vary([](GemmSpec& s) { s.ordered_reduction = false; });
  vary([](GemmSpec& s) { s.stages = 4; });
  std::set<std::string> names = {base.name()};
  for (const auto& v : variants) {
    EXPECT_TRUE(names.insert(v.name()).second) << "name collision: " << v.name();
  }
}

TEST(GemmSpecJson, RoundTripsEveryField) {
  GemmSpec s = bias_gelu_spec();
  s.pattern = "another_pattern";
  s.a_dtype = s.b_dtype = DType::Float16;
  s.d_dtype = DType::Float32;
  s.a_layout = Layout::ColumnMajor;
  s.d_layout = Layout::ColumnMajor;
  s.align_a = 2;
  s.batched = true;
  s.math = MathMode::Tf32x3;
  s.epilogue.push_back({Kind::Multiply, Activation::Identity, DType::Float16});
  s.epilogue.push_back({Kind::Activation, Activation::LeakyReLU, DType::Unknown});
  s.cluster = {2, 2, 1};
  s.mainloop = MainloopSchedule::Multistage;
  s.epilogue_schedule = EpilogueSchedule::NoSmem;
  s.scheduler = TileScheduler::StreamK;
  s.raster = RasterOrder::AlongM;
  s.swizzle = 4;
  s.split_k = 2;
  s.ordered_reduction = false;
  s.stages = 5;
  const nlohmann::json j = s.to_json();
  EXPECT_EQ(j.at("reduction"), "unordered");
  EXPECT_EQ(GemmSpec::from_json(j), s);
  EXPECT_EQ(GemmSpec::from_json(nlohmann::json::parse(j.dump())), s);
  EXPECT_EQ(j.at("a_dtype"), "f16");
  EXPECT_EQ(j.at("a_layout"), "col");
  EXPECT_EQ(j.at("mainloop"), "ms");
  EXPECT_EQ(j.at("tile"), nlohmann::json::array({128, 256, 64}));
}

TEST(GemmSpecJson, DefaultsRoundTrip) {
  const GemmSpec s;
  EXPECT_EQ(GemmSpec::from_json(s.to_json()), s);
}

// The engine holds a GemmSpec as a kind-tagged realize::KernelSpec (kind "gemm", the owning
// pattern, the readable name, the JSON fields); of() reads it back, and refuses another kind.
TEST(GemmSpecJson, KernelSpecFormRoundTrips) {
  GemmSpec s = bias_gelu_spec();
  s.epilogue.push_back({Kind::Scale, Activation::Identity, DType::Unknown});
  s.epilogue.push_back({Kind::Activation, Activation::HardTanh, DType::Unknown});
  s.epilogue.push_back({Kind::AddScalar, Activation::Identity, DType::Unknown});
  const realize::KernelSpec k = s.to_kernel_spec();
  EXPECT_EQ(k.kind(), "gemm");
  EXPECT_EQ(k.pattern(), "gemm");
  EXPECT_EQ(k.name(), s.name());
  EXPECT_EQ(GemmSpec::of(k), s);
  EXPECT_EQ(GemmSpec::of(realize::KernelSpec::from_json(nlohmann::json::parse(k.to_json().dump()))), s);
  GemmSpec strict = s;
  strict.pattern = "gemm_f32_strict";
  EXPECT_EQ(strict.to_kernel_spec().pattern(), "gemm_f32_strict");
  EXPECT_EQ(GemmSpec::of(strict.to_kernel_spec()), strict);
  EXPECT_THROW(GemmSpec::of(realize::KernelSpec("attention", "attention", "x", nlohmann::json::object())),
               std::invalid_argument);
}

TEST(GemmSpecJson, RejectsUnknownTokensNamingTheField) {
  nlohmann::json j = bias_gelu_spec().to_json();
  j["mainloop"] = "turbo";
  try {
    GemmSpec::from_json(j);
    FAIL() << "accepted an unknown mainloop";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mainloop"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("turbo"), std::string::npos) << e.what();
  }
  j = bias_gelu_spec().to_json();
  j["tile"] = nlohmann::json::array({128, 128});
  EXPECT_THROW(GemmSpec::from_json(j), std::invalid_argument);
  j = bias_gelu_spec().to_json();
  j["swizzle"] = "four";
  EXPECT_THROW(GemmSpec::from_json(j), std::invalid_argument);
  j = bias_gelu_spec().to_json();
  j["epilogue"][1]["activation"] = "mish";
  EXPECT_THROW(GemmSpec::from_json(j), std::invalid_argument);
  EXPECT_THROW(GemmSpec::from_json(nlohmann::json::array()), std::invalid_argument);
}

}  // namespace
}  // namespace fact::gemm
