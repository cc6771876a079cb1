// SHA-256 digests (OpenSSL) as lowercase hex: content checksums of built libraries and cache
// files. 64 hex characters.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace fact::util {

std::string sha256_hex(std::string_view data);
// Throws std::system_error when the file cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace fact::util
