#include "fact/realize/cutlass_names.hpp"

#include <array>
#include <stdexcept>

#include "fact/realize/spelling_table.hpp"

namespace fact::realize {
namespace {

using graph::DType;


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

}  // namespace

std::string_view dtype_cpp(DType d) { return cpp_of(kDTypes, d, "dtype"); }
std::string_view dtype_token(DType d) { return find_value(kDTypes, d, "dtype").token; }
DType parse_dtype_token(std::string_view t) { return find_token(kDTypes, t, "dtype"); }

}  // namespace fact::realize
