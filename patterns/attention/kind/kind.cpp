// The "attention" problem kind: softmax(scale · q·kᵀ + mask)·v as fact.attention describes it
// (discover/canonicalize.hpp, kind/problem.hpp). Registered here; nothing outside this folder
// knows the kind.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "fact/problem/problem.hpp"
#include "fact/core/precision.hpp"
#include "patterns/attention/kind/pack.hpp"
#include "patterns/attention/kind/problem.hpp"
#include "patterns/attention/kind/reference_host.hpp"

namespace fact::attention {
namespace {

// "b=4,h=32,kvh=8,s=2048,skv=2048,d=128,causal" (also batch=, heads=, kv_heads=, seq=, kv_seq=,
// head_dim=, mask=none|causal|causal_top_left|causal_bottom_right, window= (a causal sliding
// window, e.g. "s=2048,d=96,causal,window=1024"), key_mask (a dense boolean padding mask over
// [batch, kv_seq]), scale=); nullopt when the
// words do not name heads and a head dim (another kind's problem).
std::optional<nlohmann::json> parse_command_line(const std::map<std::string, std::string>& words) {
  auto found = words.find("problem");
  if (found == words.end()) return std::nullopt;
  std::map<std::string, std::string> fields;
  std::string text = found->second;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      fields[item.substr(0, eq)] = eq == std::string::npos ? "1" : item.substr(eq + 1);
    }
    start = comma + 1;
  }
  auto pick = [&](std::initializer_list<const char*> names) -> std::optional<std::string> {
    for (const char* n : names) {
      if (auto it = fields.find(n); it != fields.end()) return it->second;
    }
    return std::nullopt;
  };
  const auto heads = pick({"h", "heads"});
  const auto dim = pick({"d", "head_dim"});
  if (!heads || !dim) return std::nullopt;
  auto number = [&](std::initializer_list<const char*> names, std::optional<int64_t> fallback) {
    auto text = pick(names);
    if (!text) {
      if (!fallback) throw std::invalid_argument("attention problem '" + found->second + "' has no " + *names.begin());
      return *fallback;
    }
    try {
      size_t used = 0;
      const int64_t v = std::stoll(*text, &used);
      if (used != text->size() || v <= 0) throw std::invalid_argument("");
      return v;
    } catch (const std::exception&) {
      throw std::invalid_argument("attention problem: '" + *text + "' is not a positive integer");
    }
  };
  AttentionProblem p;
  p.batch = number({"b", "batch"}, 1);
  p.heads = number({"h", "heads"}, std::nullopt);
  p.kv_heads = number({"kvh", "kv_heads"}, p.heads);
  p.seq = number({"s", "seq"}, std::nullopt);
  p.kv_seq = number({"skv", "kv_seq"}, p.seq);
  p.head_dim = number({"d", "head_dim"}, std::nullopt);
  p.v_head_dim = number({"dv", "v_head_dim"}, p.head_dim);
  const std::string mask = pick({"mask"}).value_or(fields.count("causal") ? "causal" : "none");
  if (mask == "causal") {
    p.mask = MaskKind::CausalTopLeft;
  } else if (auto kind = parse_mask_kind(mask)) {
    p.mask = *kind;
  } else {
    throw std::invalid_argument("attention problem: unknown mask '" + mask + "'");
  }
  if (pick({"w", "window"})) {
    p.window = number({"w", "window"}, std::nullopt);
    if (p.mask == MaskKind::None) {
      throw std::invalid_argument("attention problem: a sliding window needs a causal mask (add 'causal')");
    }
  }
  if (fields.count("key_mask") || fields.count("keymask")) {
    if (p.mask != MaskKind::None) throw std::invalid_argument("attention problem: a key mask with a causal mask");
    // A dense [batch, kv_seq] boolean mask, 1 = visible (the runtime fills it as padding).
    p.key_mask = KeyMask{"key_mask", true, p.kv_seq, 1, 0};
  }
  auto dtype_word = words.find("dtype");
  const std::string dtype = dtype_word == words.end() || dtype_word->second.empty() ? "bf16" : dtype_word->second;
  p.dtype = graph::parse_dtype(dtype);  // any spelling of the dtype table
  if (p.dtype != DType::BFloat16 && p.dtype != DType::Float16 && p.dtype != DType::Float32) {
    throw std::invalid_argument("attention problem: unknown dtype '" + dtype + "'");
  }
  p.softmax_dtype = p.dtype;
  p.scale = 1.0 / std::sqrt(double(p.head_dim));
  if (auto s = pick({"scale"})) p.scale = std::stod(*s);
  p.mask_evidence = "command line";
  return attention_problem_to_json(p);
}

class AttentionKind final : public ProblemKind {
 public:
  std::string name() const override { return kKindName; }

  std::string fusion(const nlohmann::json& desc) const override {
    return attention_problem_from_json(desc).fusion_name();
  }
  std::string shape(const nlohmann::json& desc) const override {
    return attention_problem_from_json(desc).shape_string();
  }
  graph::DType dtype(const nlohmann::json& desc) const override {
    return graph::parse_dtype(desc.value("dtype", std::string()));
  }
  double flops(const nlohmann::json& desc) const override { return attention_problem_from_json(desc).flops(); }
  double min_bytes(const nlohmann::json& desc) const override {
    return attention_problem_from_json(desc).min_bytes();
  }
  double fused_seconds(const nlohmann::json& desc, const DeviceProfile& device,
                       core::PrecisionMode precision) const override {
    const AttentionProblem p = attention_problem_from_json(desc);
    const bool half = p.dtype == graph::DType::BFloat16 || p.dtype == graph::DType::Float16;
    const double rate = half ? device.bf16_flops
                             : (precision == core::PrecisionMode::Tf32 ? device.tf32_flops : device.tf32_flops / 3.0);
    return roofline_seconds(p.flops(), rate, p.min_bytes(), device);
  }
  std::vector<int64_t> tuning_dims(const nlohmann::json& desc) const override {
    const AttentionProblem p = attention_problem_from_json(desc);
    return {p.batch, p.heads, p.kv_heads, p.seq, p.kv_seq};
  }
  double tolerance(const nlohmann::json& desc, core::PrecisionMode precision) const override {
    return core::tolerance_for(precision, dtype(desc));
  }
  ArgImage pack(const nlohmann::json& desc, const graph::Graph& captured) const override {
    return pack_attention(attention_problem_from_json(desc), captured);
  }
  int reference(const FactCallHeader* args) const override {
    if (args->size != sizeof(FactAttentionArgs)) return FACT_ERR_INVALID_ARGS;
    FactAttentionArgs copy;
    std::memcpy(&copy, args, sizeof(copy));
    return reference_attention_host(copy);
  }
  std::optional<nlohmann::json> from_command_line(
      const std::map<std::string, std::string>& words) const override {
    return parse_command_line(words);
  }
};

const KindRegistrar kAttentionKind{std::make_unique<AttentionKind>()};

}  // namespace
}  // namespace fact::attention
