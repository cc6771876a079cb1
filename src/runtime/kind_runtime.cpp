#include "fact/runtime/kind_runtime.hpp"

#include <stdexcept>

namespace fact::runtime {

KindRuntimeRegistry& KindRuntimeRegistry::global() {
  static KindRuntimeRegistry registry;
  return registry;
}

void KindRuntimeRegistry::add(std::unique_ptr<KindRuntime> runtime) {
  if (!runtime) throw std::logic_error("KindRuntimeRegistry::add: null runtime");
  if (find(runtime->kind()) != nullptr) {
    throw std::logic_error("kind '" + runtime->kind() + "' registers two runtimes");
  }
  runtimes_.push_back(std::move(runtime));
}

const KindRuntime* KindRuntimeRegistry::find(const std::string& kind) const {
  for (const auto& r : runtimes_) {
    if (r->kind() == kind) return r.get();
  }
  return nullptr;
}

}  // namespace fact::runtime
