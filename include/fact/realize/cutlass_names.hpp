// Lookup tables from FACT's enums to CUTLASS C++ spellings and to the short tokens used in
// kernel names and JSON (DESIGN.md rule 4): one table per enum, nothing spelled elsewhere.
//
// Every `*_token` function has an inverse `parse_*` that throws std::invalid_argument naming
// the unknown token. `*_cpp` functions throw std::invalid_argument for values that have no
// CUTLASS spelling (e.g. an int dtype as a GEMM operand).
#pragma once
#include <string>
#include <string_view>

#include "fact/realize/kernel_spec.hpp"

namespace fact::realize {

// Element types. float32 operands are spelled `float`: the sm90 collective builder maps float
// A/B to TF32 tensor-core MMAs (MathMode::Tf32).
std::string_view dtype_cpp(DType dtype);      // "cutlass::bfloat16_t", "cutlass::half_t", "float"
std::string_view dtype_token(DType dtype);    // "bf16", "f16", "f32", "f64", "s8", ...
DType parse_dtype_token(std::string_view token);

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
// accurate-tanh GELU where CUTLASS's uses tanh.approx (used for float32 outputs).
// Identity has no functor (the epilogue step is dropped): throws std::invalid_argument.
std::string_view activation_cpp(Activation a, bool accurate_float);
std::string_view activation_token(Activation a);  // "relu", "gelu_erf", "gelu_tanh", ...
Activation parse_activation_token(std::string_view token);

// Epilogue step kinds: the chain link template in patterns/gemm/gemm_epilogue.cuh (Scale has
// none: it is alpha) and the token used in names ("scale", "bias", "act", "residual", "mul").
std::string_view epilogue_link_cpp(EpilogueStep::Kind k);
std::string_view epilogue_kind_token(EpilogueStep::Kind k);
EpilogueStep::Kind parse_epilogue_kind_token(std::string_view token);

}  // namespace fact::realize
