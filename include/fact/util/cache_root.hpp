// Where FACT keeps what outlives a run (kernel cache, tuning database, device profile).
#pragma once
#include <filesystem>

namespace fact::util {

// $FACT_CACHE_DIR, else $XDG_CACHE_HOME/fact, else ~/.cache/fact (a temporary folder when
// none of them is set).
std::filesystem::path cache_root();

}  // namespace fact::util
