// Reading and writing JSON fields with errors that name where they are ("gemm.a.ld: expected
// an integer"). Non-finite numbers are written as the strings "inf", "-inf", "nan".
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fact/core/dtype.hpp"

namespace fact::util {

nlohmann::json number(double v);
// The member `key` of `j`; throws std::invalid_argument "<where>: missing field '<key>'".
const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where);
double number_from(const nlohmann::json& j, const std::string& where);
double number_field(const nlohmann::json& j, const char* key, const std::string& where, double fallback);
int64_t int_field(const nlohmann::json& j, const char* key, const std::string& where);
std::string string_field(const nlohmann::json& j, const char* key, const std::string& where);
// Unknown when the field is absent.
core::DType dtype_field(const nlohmann::json& j, const char* key, const std::string& where);

}  // namespace fact::util
