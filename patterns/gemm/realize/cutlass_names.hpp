// The GEMM pattern's lookup tables from its enums to CUTLASS C++ spellings and to the short
// tokens used in kernel names and JSON (one table per enum): one table per enum, nothing spelled
// elsewhere. Every `*_token` function has an inverse `parse_*` that throws
// std::invalid_argument naming the unknown token; `*_cpp` functions throw
// std::invalid_argument for values that have no CUTLASS spelling.
#pragma once
#include <string>
#include <string_view>

#include "fact/realize/cutlass_names.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {

using realize::dtype_cpp;
using realize::dtype_token;
using realize::parse_dtype_token;

std::string_view layout_cpp(Layout layout);   // "cutlass::layout::RowMajor" / "...ColumnMajor"
char layout_letter(Layout layout);            // 't' (row-major) / 'n' (column-major)
std::string_view layout_json(Layout layout);  // "row" / "col"
Layout parse_layout_json(std::string_view token);

std::string_view mainloop_cpp(MainloopSchedule s);  // "cutlass::gemm::KernelTmaWarpSpecializedCooperative"
std::string_view mainloop_token(MainloopSchedule s);  // "auto", "ws", "coop", "pp", "ms"
MainloopSchedule parse_mainloop_token(std::string_view token);

std::string_view epilogue_schedule_cpp(EpilogueSchedule s);  // "cutlass::epilogue::TmaWarpSpecialized"
std::string_view epilogue_schedule_token(EpilogueSchedule s);  // "auto", "tma", "tmacoop", "nosmem"
EpilogueSchedule parse_epilogue_schedule_token(std::string_view token);

std::string_view tile_scheduler_cpp(TileScheduler s);    // "cutlass::gemm::PersistentScheduler"
std::string_view tile_scheduler_token(TileScheduler s);  // "persistent", "streamk"
TileScheduler parse_tile_scheduler_token(std::string_view token);

std::string_view raster_cpp(RasterOrder r);    // "cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM"
std::string_view raster_token(RasterOrder r);  // "heuristic", "m", "n"
RasterOrder parse_raster_token(std::string_view token);

std::string_view math_token(MathMode m);  // "native", "tf32", "3xtf32", "simt"
MathMode parse_math_token(std::string_view token);

// The CUTLASS epilogue functor template for an activation. `accurate_float` selects FACT's
// accurate functors where CUTLASS's use tanh.approx (tanh-GELU, tanh; for float32 outputs).
// Identity has no functor (the epilogue step is dropped): throws std::invalid_argument.
std::string_view activation_cpp(Activation a, bool accurate_float);
std::string_view activation_token(Activation a);  // "relu", "gelu_erf", "gelu_tanh", ...
Activation parse_activation_token(std::string_view token);

// Epilogue step kinds: the chain link template in patterns/gemm/gemm_epilogue.cuh and the token
// used in names ("scale", "add", "bias", "act", "residual", "mul").
std::string_view epilogue_link_cpp(EpilogueStep::Kind k);
std::string_view epilogue_kind_token(EpilogueStep::Kind k);
EpilogueStep::Kind parse_epilogue_kind_token(std::string_view token);

}  // namespace fact::gemm
