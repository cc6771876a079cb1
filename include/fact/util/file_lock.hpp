// Advisory whole-file locks (flock) for state shared between concurrent FACT runs: kernel cache
// entries, the tuning database. A lock is held by an open file description, so two threads of
// one process contend exactly like two processes. Released on destruction (or process exit).
#pragma once
#include <filesystem>
#include <optional>

namespace fact::util {

class FileLock {
 public:
  enum class Mode { Exclusive, Shared };

  // Blocks until the lock on `path` is held; creates `path` (and its folder) when absent.
  // Throws std::system_error when the file cannot be opened.
  static FileLock acquire(const std::filesystem::path& path, Mode mode = Mode::Exclusive);
  // Returns nullopt at once when another holder has a conflicting lock.
  static std::optional<FileLock> try_acquire(const std::filesystem::path& path,
                                             Mode mode = Mode::Exclusive);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  void release();
  bool held() const { return descriptor_ >= 0; }
  const std::filesystem::path& path() const { return path_; }

 private:
  FileLock(std::filesystem::path path, int descriptor) : path_(std::move(path)), descriptor_(descriptor) {}
  std::filesystem::path path_;
  int descriptor_ = -1;
};

}  // namespace fact::util
