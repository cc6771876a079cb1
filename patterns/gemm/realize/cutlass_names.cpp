#include "patterns/gemm/realize/cutlass_names.hpp"

#include "fact/realize/spelling_table.hpp"

namespace fact::gemm {
namespace {

using realize::cpp_of;
using realize::find_token;
using realize::find_value;
using realize::Spelling;

constexpr std::array<Spelling<Layout>, 2> kLayouts{{
    {Layout::RowMajor, "cutlass::layout::RowMajor", "t"},
    {Layout::ColumnMajor, "cutlass::layout::ColumnMajor", "n"},
}};

constexpr std::array<Spelling<Layout>, 2> kLayoutJson{{
    {Layout::RowMajor, "", "row"},
    {Layout::ColumnMajor, "", "col"},
}};

// Multistage is CUTLASS 2.x's cp.async mainloop (device::GemmUniversal), not a 3.x schedule tag.
constexpr std::array<Spelling<MainloopSchedule>, 5> kMainloops{{
    {MainloopSchedule::Auto, "cutlass::gemm::collective::KernelScheduleAuto", "auto"},
    {MainloopSchedule::TmaWarpSpecialized, "cutlass::gemm::KernelTmaWarpSpecialized", "ws"},
    {MainloopSchedule::Cooperative, "cutlass::gemm::KernelTmaWarpSpecializedCooperative", "coop"},
    {MainloopSchedule::Pingpong, "cutlass::gemm::KernelTmaWarpSpecializedPingpong", "pp"},
    {MainloopSchedule::Multistage, "", "ms"},
}};

constexpr std::array<Spelling<EpilogueSchedule>, 4> kEpilogueSchedules{{
    {EpilogueSchedule::Auto, "cutlass::epilogue::collective::EpilogueScheduleAuto", "auto"},
    {EpilogueSchedule::TmaWarpSpecialized, "cutlass::epilogue::TmaWarpSpecialized", "tma"},
    {EpilogueSchedule::TmaCooperative, "cutlass::epilogue::TmaWarpSpecializedCooperative",
     "tmacoop"},
    {EpilogueSchedule::NoSmem, "cutlass::epilogue::NoSmemWarpSpecialized", "nosmem"},
}};

constexpr std::array<Spelling<TileScheduler>, 2> kTileSchedulers{{
    {TileScheduler::Persistent, "cutlass::gemm::PersistentScheduler", "persistent"},
    {TileScheduler::StreamK, "cutlass::gemm::StreamKScheduler", "streamk"},
}};

constexpr std::array<Spelling<RasterOrder>, 3> kRasters{{
    {RasterOrder::Heuristic, "cutlass::gemm::kernel::detail::RasterOrderOptions::Heuristic",
     "heuristic"},
    {RasterOrder::AlongM, "cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM", "m"},
    {RasterOrder::AlongN, "cutlass::gemm::kernel::detail::RasterOrderOptions::AlongN", "n"},
}};

constexpr std::array<Spelling<MathMode>, 4> kMathModes{{
    {MathMode::Native, "", "native"},
    {MathMode::Tf32, "", "tf32"},
    {MathMode::Tf32x3, "", "3xtf32"},
    {MathMode::Simt, "", "simt"},
}};

constexpr std::array<Spelling<Activation>, 9> kActivations{{
    {Activation::Identity, "", "identity"},
    {Activation::ReLU, "cutlass::epilogue::thread::ReLu", "relu"},
    {Activation::GeluErf, "cutlass::epilogue::thread::GELU", "gelu_erf"},
    {Activation::GeluTanh, "cutlass::epilogue::thread::GELU_taylor", "gelu_tanh"},
    {Activation::SiLU, "cutlass::epilogue::thread::SiLu", "silu"},
    {Activation::Sigmoid, "cutlass::epilogue::thread::Sigmoid", "sigmoid"},
    {Activation::LeakyReLU, "cutlass::epilogue::thread::LeakyReLU", "leaky_relu"},
    {Activation::HardTanh, "cutlass::epilogue::thread::Clamp", "hardtanh"},
    {Activation::Tanh, "cutlass::epilogue::thread::Tanh", "tanh"},
}};

// Activations whose CUTLASS functor is approximate in float32, with FACT's accurate functor.
constexpr std::array<Spelling<Activation>, 2> kAccurateFloatActivations{{
    {Activation::GeluTanh, "fact::gemm::epilogue::GeluTanhAccurate", "gelu_tanh"},
    {Activation::Tanh, "fact::gemm::epilogue::TanhAccurate", "tanh"},
}};

constexpr std::array<Spelling<EpilogueStep::Kind>, 9> kEpilogueKinds{{
    {EpilogueStep::Kind::Scale, "fact::gemm::epilogue::Scale", "scale"},
    {EpilogueStep::Kind::AddScalar, "fact::gemm::epilogue::AddScalar", "add"},
    {EpilogueStep::Kind::Bias, "fact::gemm::epilogue::ColumnBias", "bias"},
    {EpilogueStep::Kind::Activation, "fact::gemm::epilogue::Activation", "act"},
    {EpilogueStep::Kind::Residual, "fact::gemm::epilogue::Residual", "residual"},
    {EpilogueStep::Kind::Multiply, "fact::gemm::epilogue::Multiply", "mul"},
    {EpilogueStep::Kind::Glu, "fact::gemm::epilogue::Glu", "glu"},
    {EpilogueStep::Kind::Rope, "fact::gemm::epilogue::Rope", "rope"},
    {EpilogueStep::Kind::RowScale, "fact::gemm::epilogue::RowScale", "rowscale"},
}};

}  // namespace


std::string_view layout_cpp(Layout l) { return cpp_of(kLayouts, l, "layout"); }
char layout_letter(Layout l) { return find_value(kLayouts, l, "layout").token[0]; }
std::string_view layout_json(Layout l) { return find_value(kLayoutJson, l, "layout").token; }
Layout parse_layout_json(std::string_view t) { return find_token(kLayoutJson, t, "layout"); }

std::string_view mainloop_cpp(MainloopSchedule s) {
  return cpp_of(kMainloops, s, "mainloop schedule");
}
std::string_view mainloop_token(MainloopSchedule s) {
  return find_value(kMainloops, s, "mainloop schedule").token;
}
MainloopSchedule parse_mainloop_token(std::string_view t) {
  return find_token(kMainloops, t, "mainloop schedule");
}

std::string_view epilogue_schedule_cpp(EpilogueSchedule s) {
  return cpp_of(kEpilogueSchedules, s, "epilogue schedule");
}
std::string_view epilogue_schedule_token(EpilogueSchedule s) {
  return find_value(kEpilogueSchedules, s, "epilogue schedule").token;
}
EpilogueSchedule parse_epilogue_schedule_token(std::string_view t) {
  return find_token(kEpilogueSchedules, t, "epilogue schedule");
}

std::string_view tile_scheduler_cpp(TileScheduler s) {
  return cpp_of(kTileSchedulers, s, "tile scheduler");
}
std::string_view tile_scheduler_token(TileScheduler s) {
  return find_value(kTileSchedulers, s, "tile scheduler").token;
}
TileScheduler parse_tile_scheduler_token(std::string_view t) {
  return find_token(kTileSchedulers, t, "tile scheduler");
}

std::string_view raster_cpp(RasterOrder r) { return cpp_of(kRasters, r, "raster order"); }
std::string_view raster_token(RasterOrder r) {
  return find_value(kRasters, r, "raster order").token;
}
RasterOrder parse_raster_token(std::string_view t) {
  return find_token(kRasters, t, "raster order");
}

std::string_view math_token(MathMode m) { return find_value(kMathModes, m, "math mode").token; }
MathMode parse_math_token(std::string_view t) { return find_token(kMathModes, t, "math mode"); }

std::string_view activation_cpp(Activation a, bool accurate_float) {
  if (accurate_float) {
    for (const auto& entry : kAccurateFloatActivations) {
      if (entry.value == a) return entry.cpp;
    }
  }
  return cpp_of(kActivations, a, "activation");
}
std::string_view activation_token(Activation a) {
  return find_value(kActivations, a, "activation").token;
}
Activation parse_activation_token(std::string_view t) {
  return find_token(kActivations, t, "activation");
}

std::string_view epilogue_link_cpp(EpilogueStep::Kind k) {
  return cpp_of(kEpilogueKinds, k, "epilogue step");
}
std::string_view epilogue_kind_token(EpilogueStep::Kind k) {
  return find_value(kEpilogueKinds, k, "epilogue step").token;
}
EpilogueStep::Kind parse_epilogue_kind_token(std::string_view t) {
  return find_token(kEpilogueKinds, t, "epilogue step");
}

}  // namespace fact::gemm
