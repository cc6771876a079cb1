#include "patterns/gemm/realize/cutlass_names.hpp"

#include "fact/realize/spelling_table.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"

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

// Activations and step kinds: ops.def's columns (op_table.hpp).
std::string_view activation_cpp(Activation a, bool accurate_float) {
  const ActivationOp& op = activation_op(a);
  // The identity is dropped before rendering (kernel_epilogue): it has no device spelling.
  if (op.activation == Activation::Identity) {
    throw std::invalid_argument("activation 'identity' has no CUTLASS spelling");
  }
  return accurate_float ? op.functor_f32 : op.functor_16bit;
}
std::string_view activation_token(Activation a) { return activation_op(a).name; }
Activation parse_activation_token(std::string_view t) {
  if (const ActivationOp* op = find_activation_op(t)) return op->activation;
  std::string known;
  for (const ActivationOp& op : kActivationOps) known += (known.empty() ? "" : ", ") + std::string(op.name);
  throw std::invalid_argument("unknown activation '" + std::string(t) + "' (known: " + known + ")");
}

std::string_view epilogue_link_cpp(EpilogueStep::Kind k) { return step_op(k).device_link; }
std::string_view epilogue_kind_token(EpilogueStep::Kind k) { return step_op(k).kernel_token; }
EpilogueStep::Kind parse_epilogue_kind_token(std::string_view t) {
  for (const StepOp& op : kStepOps) {
    if (op.kernel_token == t) return op.kind;
  }
  std::string known;
  for (const StepOp& op : kStepOps) known += (known.empty() ? "" : ", ") + std::string(op.kernel_token);
  throw std::invalid_argument("unknown epilogue step '" + std::string(t) + "' (known: " + known + ")");
}

}  // namespace fact::gemm
