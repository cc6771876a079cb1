#include "fact/runtime/verify_case.hpp"

#include <stdexcept>

namespace fact::runtime {

Baseline VerifyCase::make_baseline(const std::string& name, VerifyBackend&, const BufferSet&) {
  throw std::invalid_argument("this problem has no baseline '" + name + "'");
}

std::optional<AccuracyPeer> VerifyCase::accuracy_peer(VerifyBackend&, const BufferSet&) { return std::nullopt; }

}  // namespace fact::runtime
