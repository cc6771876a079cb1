#include "fact/realize/param_space.hpp"

namespace fact::realize {

nlohmann::json ParamSpace::to_json() const {
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& spec : candidates) {
    kept.push_back({{"name", spec.name()}, {"spec", spec.to_json()}});
  }
  nlohmann::json dropped = nlohmann::json::array();
  for (const auto& entry : pruned) {
    dropped.push_back(
        {{"name", entry.spec.name()}, {"reason", entry.reason}, {"spec", entry.spec.to_json()}});
  }
  return {{"candidates", std::move(kept)}, {"pruned", std::move(dropped)}};
}

}  // namespace fact::realize
