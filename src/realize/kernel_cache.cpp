#include "fact/realize/kernel_cache.hpp"

#include "fact/util/cache_root.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "fact/util/atomic_file.hpp"
#include "fact/util/sha256.hpp"

namespace fact::realize {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLibrary = "lib.so";
constexpr const char* kSource = "source.cu";
constexpr const char* kLog = "build.log";
constexpr const char* kMeta = "meta.json";
constexpr const char* kFailed = "failed.json";
constexpr size_t kMaxStoredLog = 64 * 1024;

bool valid_key(const std::string& key) {
  if (key.empty() || key.size() > 200 || key.front() == '.') return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::string tail_bytes(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  return "[... " + std::to_string(text.size() - max) + " bytes cut ...]\n" + text.substr(text.size() - max);
}

}  // namespace

fs::path fact_cache_root() { return util::cache_root(); }

fs::path default_kernel_cache_dir() { return fact_cache_root() / "kernels"; }

nlohmann::json FailedBuild::to_json() const {
  return {{"key", key},         {"reason", reason},       {"command", command},
          {"compiler", compiler}, {"log", tail_bytes(log, kMaxStoredLog)},
          {"exit_code", exit_code}, {"date", date},       {"spec", spec}};
}

FailedBuild FailedBuild::from_json(const nlohmann::json& j) {
  FailedBuild f;
  f.key = j.at("key").get<std::string>();
  f.reason = j.at("reason").get<std::string>();
  f.command = j.value("command", std::vector<std::string>{});
  f.compiler = j.value("compiler", std::string());
  f.log = j.value("log", std::string());
  f.exit_code = j.value("exit_code", -1);
  f.date = j.value("date", std::string());
  f.spec = j.value("spec", nlohmann::json());
  return f;
}

std::string_view entry_state_name(EntryState s) {
  switch (s) {
    case EntryState::Missing: return "missing";
    case EntryState::Built: return "built";
    case EntryState::Failed: return "failed";
    case EntryState::Corrupt: return "corrupt";
  }
  return "unknown";
}

KernelCache::KernelCache(fs::path root) : root_(std::move(root)) {}

fs::path KernelCache::entry_dir(const std::string& key) const {
  if (!valid_key(key)) throw std::invalid_argument("kernel cache: invalid key '" + key + "'");
  return root_ / key;
}

fs::path KernelCache::lock_path(const std::string& key) const {
  if (!valid_key(key)) throw std::invalid_argument("kernel cache: invalid key '" + key + "'");
  return root_ / ".locks" / (key + ".lock");
}

EntryLookup KernelCache::lookup(const std::string& key) const {
  EntryLookup result;
  fs::path dir = entry_dir(key);
  std::error_code error;
  if (!fs::is_directory(dir, error)) return result;

  auto corrupt = [&](std::string problem) {
    result.state = EntryState::Corrupt;
    result.problem = std::move(problem);
    result.kernel.reset();
    result.failure.reset();
    return result;
  };

  if (fs::exists(dir / kFailed, error)) {
    try {
      result.failure = FailedBuild::from_json(nlohmann::json::parse(util::read_file(dir / kFailed)));
      result.state = EntryState::Failed;
      return result;
    } catch (const std::exception& e) {
      return corrupt(std::string("unreadable failed.json: ") + e.what());
    }
  }
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(util::read_file(dir / kMeta));
  } catch (const std::exception& e) {
    return corrupt(std::string("missing or unreadable meta.json: ") + e.what());
  }
  fs::path library = dir / kLibrary;
  if (!fs::is_regular_file(library, error)) return corrupt("lib.so missing");
  if (!meta.contains("lib_sha256") || !meta["lib_sha256"].is_string()) {
    return corrupt("meta.json has no lib_sha256");
  }
  if (meta.contains("lib_bytes") && meta["lib_bytes"].is_number_unsigned() &&
      meta["lib_bytes"].get<uintmax_t>() != fs::file_size(library, error)) {
    return corrupt("lib.so size differs from meta.json");
  }
  try {
    if (util::sha256_file_hex(library) != meta["lib_sha256"].get<std::string>()) {
      return corrupt("lib.so checksum mismatch");
    }
  } catch (const std::exception& e) {
    return corrupt(std::string("lib.so unreadable: ") + e.what());
  }
  result.state = EntryState::Built;
  result.kernel = CachedKernel{key, library, dir / kSource, dir / kLog, std::move(meta)};
  return result;
}

util::FileLock KernelCache::lock(const std::string& key) const {
  return util::FileLock::acquire(lock_path(key));
}

std::optional<util::FileLock> KernelCache::try_lock(const std::string& key) const {
  return util::FileLock::try_acquire(lock_path(key));
}

fs::path KernelCache::make_staging_dir(const std::string& key) const {
  entry_dir(key);  // validates the key
  fs::path staging = root_ / ".staging" / (key + "." + util::unique_suffix());
  fs::create_directories(staging);
  return staging;
}

void KernelCache::replace_entry(const std::string& key, const fs::path& staging) const {
  fs::path dir = entry_dir(key);
  std::error_code error;
  fs::path trash;
  if (fs::exists(dir, error)) {
    trash = root_ / ".staging" / ("trash." + key + "." + util::unique_suffix());
    fs::rename(dir, trash);
  }
  fs::rename(staging, dir);
  if (!trash.empty()) fs::remove_all(trash, error);
}

CachedKernel KernelCache::commit_built(const std::string& key, const fs::path& staging,
                                       nlohmann::json meta) const {
  fs::path library = staging / kLibrary;
  std::error_code error;
  if (!fs::is_regular_file(library, error)) {
    throw std::runtime_error("kernel cache: no lib.so in " + staging.string());
  }
  fs::remove(staging / kFailed, error);
  meta["key"] = key;
  meta["lib_sha256"] = util::sha256_file_hex(library);
  meta["lib_bytes"] = static_cast<uintmax_t>(fs::file_size(library));
  meta["built_at"] = util::utc_timestamp();
  util::write_file_atomically(staging / kMeta, meta.dump(2) + "\n");
  replace_entry(key, staging);
  fs::path dir = entry_dir(key);
  return CachedKernel{key, dir / kLibrary, dir / kSource, dir / kLog, std::move(meta)};
}

void KernelCache::commit_failed(const std::string& key, const fs::path& staging,
                                const FailedBuild& failure) const {
  std::error_code error;
  fs::remove(staging / kLibrary, error);
  fs::remove(staging / kMeta, error);
  FailedBuild stored = failure;
  stored.key = key;
  if (stored.date.empty()) stored.date = util::utc_timestamp();
  util::write_file_atomically(staging / kFailed, stored.to_json().dump(2) + "\n");
  replace_entry(key, staging);
}

void KernelCache::remove(const std::string& key) const {
  fs::path dir = entry_dir(key);
  std::error_code error;
  if (!fs::exists(dir, error)) return;
  fs::path trash = root_ / ".staging" / ("trash." + key + "." + util::unique_suffix());
  fs::create_directories(trash.parent_path());
  fs::rename(dir, trash);
  fs::remove_all(trash, error);
}

std::vector<std::string> KernelCache::keys() const {
  std::vector<std::string> found;
  std::error_code error;
  if (!fs::is_directory(root_, error)) return found;
  for (const auto& item : fs::directory_iterator(root_, error)) {
    std::string name = item.path().filename().string();
    if (item.is_directory() && valid_key(name)) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace fact::realize
