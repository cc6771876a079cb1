#include "fact/realize/cutlass_names.hpp"

#include <array>
#include <stdexcept>

namespace fact::realize {
namespace {

template <class Enum>
struct Spelling {
  Enum value;
  std::string_view cpp;    // empty: no CUTLASS spelling
  std::string_view token;
};

template <class Enum, size_t N>
const Spelling<Enum>& find_value(const std::array<Spelling<Enum>, N>& table, Enum value,
                                 std::string_view what) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry;
  }
  throw std::invalid_argument("no " + std::string(what) + " spelling for enum value " +
                              std::to_string(static_cast<int>(value)));
}

template <class Enum, size_t N>
Enum find_token(const std::array<Spelling<Enum>, N>& table, std::string_view token,
                std::string_view what) {
  for (const auto& entry : table) {
    if (entry.token == token) return entry.value;
  }
  std::string known;
  for (const auto& entry : table) known += (known.empty() ? "" : ", ") + std::string(entry.token);
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(token) +
                              "' (known: " + known + ")");
}

template <class Enum, size_t N>
std::string_view cpp_of(const std::array<Spelling<Enum>, N>& table, Enum value,
                        std::string_view what) {
  const auto& entry = find_value(table, value, what);
  if (entry.cpp.empty()) {
    throw std::invalid_argument(std::string(what) + " '" + std::string(entry.token) +
                                "' has no CUTLASS spelling");
  }
  return entry.cpp;
}

constexpr std::array<Spelling<DType>, 11> kDTypes{{
    {DType::Float64, "double", "f64"},
    {DType::Float32, "float", "f32"},
    {DType::Float16, "cutlass::half_t", "f16"},
    {DType::BFloat16, "cutlass::bfloat16_t", "bf16"},
    {DType::Int64, "", "s64"},
    {DType::Int32, "int32_t", "s32"},
    {DType::Int16, "", "s16"},
    {DType::Int8, "int8_t", "s8"},
    {DType::UInt8, "uint8_t", "u8"},
    {DType::Bool, "", "b1"},
    {DType::Unknown, "", "unknown"},
}};

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

constexpr std::array<Spelling<Activation>, 8> kActivations{{
    {Activation::Identity, "", "identity"},
    {Activation::ReLU, "cutlass::epilogue::thread::ReLu", "relu"},
    {Activation::GeluErf, "cutlass::epilogue::thread::GELU", "gelu_erf"},
    {Activation::GeluTanh, "cutlass::epilogue::thread::GELU_taylor", "gelu_tanh"},
    {Activation::SiLU, "cutlass::epilogue::thread::SiLu", "silu"},
    {Activation::Sigmoid, "cutlass::epilogue::thread::Sigmoid", "sigmoid"},
    {Activation::LeakyReLU, "cutlass::epilogue::thread::LeakyReLU", "leaky_relu"},
    {Activation::HardTanh, "cutlass::epilogue::thread::Clamp", "hardtanh"},
}};

// Activations whose CUTLASS functor is approximate in float32, with FACT's accurate functor.
constexpr std::array<Spelling<Activation>, 1> kAccurateFloatActivations{{
    {Activation::GeluTanh, "fact::gemm::epilogue::GeluTanhAccurate", "gelu_tanh"},
}};

constexpr std::array<Spelling<EpilogueStep::Kind>, 5> kEpilogueKinds{{
    {EpilogueStep::Kind::Scale, "", "scale"},
    {EpilogueStep::Kind::Bias, "fact::gemm::epilogue::ColumnBias", "bias"},
    {EpilogueStep::Kind::Activation, "fact::gemm::epilogue::Activation", "act"},
    {EpilogueStep::Kind::Residual, "fact::gemm::epilogue::Residual", "residual"},
    {EpilogueStep::Kind::Multiply, "fact::gemm::epilogue::MultiplySource", "mul"},
}};

}  // namespace

std::string_view dtype_cpp(DType d) { return cpp_of(kDTypes, d, "dtype"); }
std::string_view dtype_token(DType d) { return find_value(kDTypes, d, "dtype").token; }
DType parse_dtype_token(std::string_view t) { return find_token(kDTypes, t, "dtype"); }

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

}  // namespace fact::realize
