#include "fact/util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

namespace fact::util {
namespace {

[[noreturn]] void throw_errno(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

std::string format_utc(const char* format) {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, format, &utc);
  return buffer;
}

}  // namespace

std::string unique_suffix() {
  static std::atomic<unsigned long> counter{0};
  thread_local std::mt19937_64 generator{std::random_device{}()};
  std::ostringstream text;
  text << ::getpid() << "-" << counter.fetch_add(1) << "-" << std::hex << (generator() & 0xffffffffULL);
  return text.str();
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) throw std::system_error(error, "cannot create " + folder.string());
  std::filesystem::path temporary = folder / ("." + path.filename().string() + ".tmp-" + unique_suffix());
  int descriptor = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (descriptor < 0) throw_errno(errno, "cannot create " + temporary.string());
  const char* data = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t written = ::write(descriptor, data, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      ::close(descriptor);
      ::unlink(temporary.c_str());
      throw_errno(saved, "cannot write " + temporary.string());
    }
    data += written;
    left -= static_cast<size_t>(written);
  }
  if (::fsync(descriptor) != 0 || ::close(descriptor) != 0) {
    int saved = errno;
    ::unlink(temporary.c_str());
    throw_errno(saved, "cannot flush " + temporary.string());
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(temporary.c_str());
    throw_errno(saved, "cannot rename " + temporary.string() + " to " + path.string());
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_errno(errno ? errno : ENOENT, "cannot read " + path.string());
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string utc_timestamp() { return format_utc("%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_date() { return format_utc("%Y-%m-%d"); }

}  // namespace fact::util
