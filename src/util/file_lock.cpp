#include "fact/util/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace fact::util {
namespace {

int open_lock_file(const std::filesystem::path& path) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  int descriptor = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (descriptor < 0) {
    throw std::system_error(errno, std::generic_category(), "cannot open lock file " + path.string());
  }
  return descriptor;
}

int flock_operation(FileLock::Mode mode) { return mode == FileLock::Mode::Exclusive ? LOCK_EX : LOCK_SH; }

}  // namespace

FileLock FileLock::acquire(const std::filesystem::path& path, Mode mode) {
  int descriptor = open_lock_file(path);
  while (::flock(descriptor, flock_operation(mode)) != 0) {
    if (errno == EINTR) continue;
    int error = errno;
    ::close(descriptor);
    throw std::system_error(error, std::generic_category(), "cannot lock " + path.string());
  }
  return FileLock(path, descriptor);
}

std::optional<FileLock> FileLock::try_acquire(const std::filesystem::path& path, Mode mode) {
  int descriptor = open_lock_file(path);
  while (::flock(descriptor, flock_operation(mode) | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    int error = errno;
    ::close(descriptor);
    if (error == EWOULDBLOCK) return std::nullopt;
    throw std::system_error(error, std::generic_category(), "cannot lock " + path.string());
  }
  return FileLock(path, descriptor);
}

FileLock::FileLock(FileLock&& other) noexcept
    : path_(std::move(other.path_)), descriptor_(other.descriptor_) {
  other.descriptor_ = -1;
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    descriptor_ = other.descriptor_;
    other.descriptor_ = -1;
  }
  return *this;
}

FileLock::~FileLock() { release(); }

void FileLock::release() {
  if (descriptor_ >= 0) {
    ::flock(descriptor_, LOCK_UN);
    ::close(descriptor_);
    descriptor_ = -1;
  }
}

}  // namespace fact::util
