#include "fact/util/cache_root.hpp"

#include <cstdlib>

namespace fact::util {

std::filesystem::path cache_root() {
  namespace fs = std::filesystem;
  if (const char* explicit_dir = std::getenv("FACT_CACHE_DIR"); explicit_dir && *explicit_dir) {
    return explicit_dir;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "fact";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "fact";
  return fs::temp_directory_path() / "fact-cache";
}

}  // namespace fact::util
