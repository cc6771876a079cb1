// Whole-file reads and crash-safe writes. A write goes to a uniquely named temporary file in
// the same folder, is flushed to disk, then renamed over the target: a reader sees the old
// contents or the new, never a torn file, even when the writer dies half way.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace fact::util {

// Throws std::system_error when the folder cannot be created or the file written.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

// Throws std::system_error when the file cannot be read.
std::string read_file(const std::filesystem::path& path);

// A name fragment unique to this process and call ("<pid>-<counter>-<random>"), for temporary
// files and staging folders next to their final place.
std::string unique_suffix();

// Current UTC time as ISO 8601 ("2026-11-22T00:24:53Z"), and today's date ("2026-11-22").
std::string utc_timestamp();
std::string utc_date();

}  // namespace fact::util
