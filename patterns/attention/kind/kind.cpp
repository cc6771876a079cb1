// The "attention" problem kind: softmax(q·kᵀ·scale + mask)·v as fact.attention describes it
// (discover/canonicalize.hpp). Discovery ranks and reports attention through it.
#include <algorithm>
#include <stdexcept>

#include "fact/problem/problem.hpp"
#include "fact/runtime/precision.hpp"

namespace fact::attention {
namespace {

double number(const nlohmann::json& desc, const char* key, double fallback) {
  auto it = desc.find(key);
  return it != desc.end() && it->is_number() ? it->get<double>() : fallback;
}

class AttentionKind final : public ProblemKind {
 public:
  std::string name() const override { return "attention"; }

  std::string fusion(const nlohmann::json& desc) const override {
    return desc.value("causal", false) ? "attention_causal" : "attention";
  }
  std::string shape(const nlohmann::json& desc) const override {
    const auto i = [&](const char* key) { return std::to_string(int64_t(number(desc, key, 0))); };
    std::string text = i("batch") + "x" + i("heads");
    if (number(desc, "kv_heads", 0) != number(desc, "heads", 0)) text += "/" + i("kv_heads");
    text += "x" + i("seq");
    if (number(desc, "kv_seq", 0) != number(desc, "seq", 0)) text += "/" + i("kv_seq");
    return text + "xd" + i("head_dim");
  }
  graph::DType dtype(const nlohmann::json& desc) const override {
    return graph::parse_dtype(desc.value("dtype", std::string()));
  }
  double flops(const nlohmann::json& desc) const override {
    const double batch = number(desc, "batch", 1), heads = number(desc, "heads", 1);
    const double seq = number(desc, "seq", 0), kv_seq = number(desc, "kv_seq", 0);
    const double dim = number(desc, "head_dim", 0), v_dim = number(desc, "v_head_dim", dim);
    double flops = 2.0 * batch * heads * seq * kv_seq * (dim + v_dim);
    if (desc.value("causal", false)) flops *= 0.5;
    return flops;
  }
  double min_bytes(const nlohmann::json& desc) const override {
    const double batch = number(desc, "batch", 1), heads = number(desc, "heads", 1);
    const double kv_heads = number(desc, "kv_heads", heads);
    const double seq = number(desc, "seq", 0), kv_seq = number(desc, "kv_seq", 0);
    const double dim = number(desc, "head_dim", 0), v_dim = number(desc, "v_head_dim", dim);
    const int bytes = std::max(graph::dtype_bytes(dtype(desc)), 1);
    return bytes * batch *
           (heads * seq * dim + kv_heads * kv_seq * (dim + v_dim) + heads * seq * v_dim);
  }
  double fused_seconds(const nlohmann::json& desc, const DeviceProfile& device,
                       const std::string& precision) const override {
    const graph::DType t = dtype(desc);
    const bool half = t == graph::DType::BFloat16 || t == graph::DType::Float16;
    const double rate = half ? device.bf16_flops
                             : (precision == "tf32" ? device.tf32_flops : device.tf32_flops / 3.0);
    return roofline_seconds(flops(desc), rate, min_bytes(desc), device);
  }
  std::vector<int64_t> tuning_dims(const nlohmann::json& desc) const override {
    return {int64_t(number(desc, "batch", 1)), int64_t(number(desc, "heads", 1)),
            int64_t(number(desc, "seq", 0)), int64_t(number(desc, "kv_seq", 0)),
            int64_t(number(desc, "head_dim", 0))};
  }
  double tolerance(const nlohmann::json& desc, const std::string& precision) const override {
    return runtime::tolerance_for(runtime::parse_precision(precision), dtype(desc));
  }
  ArgImage pack(const nlohmann::json&, const graph::Graph&) const override {
    throw std::invalid_argument("no kernel realizes attention yet");
  }
  int reference(const FactCallHeader*) const override { return FACT_ERR_INVALID_ARGS; }
  std::optional<nlohmann::json> from_command_line(
      const std::map<std::string, std::string>&) const override {
    return std::nullopt;
  }
};

const KindRegistrar kAttentionKind{std::make_unique<AttentionKind>()};

}  // namespace
}  // namespace fact::attention
