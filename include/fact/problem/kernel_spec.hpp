// KernelSpec: the frozen description of one kernel instantiation, whatever its kind — the
// single source of truth for rendering, naming and caching. The engine holds it as {kind,
// pattern, readable name, parameters}; the pattern folder that renders it reads the parameters
// as its own typed spec (patterns/gemm/realize/spec.hpp: GemmSpec). It sits with the problem
// kinds, below both realize/ (which renders specs) and runtime/ (which reads a built library's).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace fact {

class KernelSpec {
 public:
  KernelSpec() = default;
  // `name`: readable and unique per configuration, usable as a C identifier
  // ("gemm_bias_gelu_tanh_bf16_tn_128x256x64_c2x1_coop_persistent"); never a cache key alone.
  KernelSpec(std::string kind, std::string pattern, std::string name, nlohmann::json params);

  const std::string& kind() const { return kind_; }        // problem kind: "gemm"
  const std::string& pattern() const { return pattern_; }  // folder that renders it
  const std::string& name() const { return name_; }
  const nlohmann::json& params() const { return params_; }  // the pattern's own fields

  // {"kind", "pattern", "name", "params"}
  nlohmann::json to_json() const;
  // Throws std::invalid_argument naming a missing field.
  static KernelSpec from_json(const nlohmann::json& j);

  bool operator==(const KernelSpec&) const = default;

 private:
  std::string kind_, pattern_, name_;
  nlohmann::json params_ = nlohmann::json::object();
};

}  // namespace fact
