#include "patterns/gemm/runtime/store_reference.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace fact::gemm {
namespace {

std::vector<StoreReference>& registry() {
  static std::vector<StoreReference> stores;
  return stores;
}

}  // namespace

const StoreReference* find_store_reference(int32_t abi_id) {
  for (const StoreReference& store : registry()) {
    if (store.abi_id == abi_id) return &store;
  }
  return nullptr;
}

StoreReferenceRegistrar::StoreReferenceRegistrar(StoreReference store) {
  if (find_store_reference(store.abi_id) != nullptr) {
    throw std::logic_error("the reference store of step kind " + std::to_string(store.abi_id) +
                           " is registered twice");
  }
  registry().push_back(store);
}

}  // namespace fact::gemm
