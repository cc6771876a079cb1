// The attention pattern's realizer (fact/realize/realizer.hpp): bf16/fp16 attention in
// precision native as FACT's own sm_90a FMHA (fmha_sm90.cuh), float32 attention in precision
// strict (3xTF32) or tf32 (TF32) as its float32 flash attention (fmha_f32_sm90.cuh). Declines
// with the same reasons discovery gives (kind/problem.hpp's attention_decline_reason).
#include "fact/realize/realizer.hpp"
#include "fact/realize/cutlass_names.hpp"
#include "patterns/attention/realize/spec.hpp"

namespace fact::attention {
namespace {

class AttentionRealizer final : public realize::Realizer {
 public:
  std::string pattern() const override { return "attention"; }
  std::string kind() const override { return kKindName; }

  std::optional<std::string> declines(const Problem& problem, core::PrecisionMode precision) const override {
    try {
      const AttentionProblem p = attention_problem_of(problem);
      if (auto why = attention_decline_reason(p, precision)) return why;
      if (auto error = attention_spec_error(default_spec(p, precision))) return error;
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::nullopt;
  }
  realize::KernelSpec problem_class(const Problem& problem, core::PrecisionMode precision) const override {
    const AttentionProblem p = attention_problem_of(problem);
    if (auto why = attention_decline_reason(p, precision)) throw std::invalid_argument(*why);
    return default_spec(p, precision).to_kernel_spec();
  }
  // The pattern's space: every candidate takes a sliding window (a causal kernel always does).
  realize::ParamSpace space(const realize::KernelSpec& problem_class, const Problem& /*problem*/,
                            const realize::SpaceOptions& options) const override {
    return attention_space(AttentionSpec::of(problem_class), options);
  }
  realize::KernelTemplate render(const realize::KernelSpec& spec) const override {
    return render_attention_template(AttentionSpec::of(spec));
  }
  // "bf16|d96|causal" ("f32|d96|causal|3xtf32"): what a tuned choice is valid for besides the sizes.
  std::string class_token(const realize::KernelSpec& problem_class) const override {
    const AttentionSpec s = AttentionSpec::of(problem_class);
    std::string token = std::string(realize::dtype_token(s.dtype)) + "|d" + std::to_string(s.head_dim) + "|" +
                        (s.causal ? "causal" : s.key_mask ? "keymask" : "nomask");
    if (is_float32_kernel(s)) token += s.products == 1 ? "|tf32" : "|3xtf32";
    return token;
  }
  std::string family(const realize::KernelSpec& spec) const override {
    const AttentionSpec s = AttentionSpec::of(spec);
    if (is_float32_kernel(s)) return "f32/m" + std::to_string(s.block_m) + "/n" + std::to_string(s.block_n);
    // "cooperative/": the consumer schedule (the only one), kept so families match tuning records.
    return std::string("cooperative/") + (s.dynamic_schedule ? "dynamic" : "static") +
           "/" + (s.persistent ? "persistent" : "grid") + "/n" + std::to_string(s.block_n);
  }
};

const realize::RealizerRegistrar kAttentionRealizer{std::make_unique<AttentionRealizer>()};

}  // namespace
}  // namespace fact::attention
