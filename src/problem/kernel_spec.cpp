#include "fact/problem/kernel_spec.hpp"

#include <stdexcept>

namespace fact {

KernelSpec::KernelSpec(std::string kind, std::string pattern, std::string name, nlohmann::json params)
    : kind_(std::move(kind)), pattern_(std::move(pattern)), name_(std::move(name)),
      params_(std::move(params)) {}

nlohmann::json KernelSpec::to_json() const {
  return {{"kind", kind_}, {"pattern", pattern_}, {"name", name_}, {"params", params_}};
}

KernelSpec KernelSpec::from_json(const nlohmann::json& j) {
  for (const char* key : {"kind", "pattern", "name", "params"}) {
    if (!j.contains(key)) throw std::invalid_argument(std::string("kernel spec: missing field '") + key + "'");
  }
  return KernelSpec(j.at("kind").get<std::string>(), j.at("pattern").get<std::string>(),
                    j.at("name").get<std::string>(), j.at("params"));
}

}  // namespace fact
