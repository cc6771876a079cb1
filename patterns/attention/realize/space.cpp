// The attention pattern's parameter space: the measured best configuration first, then one
// change at a time (patterns/attention/KERNEL.md's alternatives), pruned by the template's
// rules (attention_spec_error: shared memory, Q stages with O in the Q buffer, ...).
#include <set>

#include "patterns/attention/realize/spec.hpp"

namespace fact::attention {

realize::ParamSpace attention_space(const AttentionSpec& problem_class, const realize::SpaceOptions& options) {
  AttentionProblem p;
  p.dtype = problem_class.dtype;
  p.head_dim = p.v_head_dim = problem_class.head_dim;
  p.mask = problem_class.causal ? MaskKind::CausalTopLeft : MaskKind::None;
  if (problem_class.key_mask) p.key_mask = KeyMask{};
  const AttentionSpec base = default_spec(p, problem_class.products == 1 ? core::PrecisionMode::Tf32 : core::PrecisionMode::Strict);

  std::vector<AttentionSpec> configs{base};
  auto vary = [&](auto change) {
    AttentionSpec s = base;
    change(s);
    configs.push_back(s);
  };
  if (is_float32_kernel(base)) {
    // The float32 kernel's choices: rows per CTA (64: two CTAs per SM; 128 at d128, one) and
    // keys per block.
    vary([](AttentionSpec& s) { s.block_m = 192 - s.block_m; });
    vary([](AttentionSpec& s) { s.block_n = 32; });
    vary([](AttentionSpec& s) { s.block_m = 192 - s.block_m; s.block_n = 32; });
  } else {
    vary([](AttentionSpec& s) { s.tile_order = 1 - s.tile_order; });
    vary([](AttentionSpec& s) { s.dynamic_schedule = false; });
    vary([](AttentionSpec& s) { s.q_stages = 3 - s.q_stages; });
    vary([](AttentionSpec& s) { ++s.stages; });
    vary([](AttentionSpec& s) { --s.stages; });
    vary([](AttentionSpec& s) { s.dynamic_schedule = false; s.persistent = false; });
    // Tile M 64 (one consumer WG, two CTAs per SM where they fit) against 128: the faster at d64
    // (causal), 2% behind at d96 (M 64, N 64, 3 stages), 23% behind at d128 (H200, 2026-11-27).
    vary([](AttentionSpec& s) {
      s.block_m = 192 - s.block_m;
      if (s.block_m == 64 && s.head_dim > 64) { s.block_n = 64; s.stages = 3; }
      if (s.block_m == 128) { s.block_n = 128; s.stages = 3; }
    });
    // The tile head dim: padded to 128 where the default pads (d80, d96: faster by 14% and 66%
    // on an H200) against native, and O staged in the tile's Q stage (no O buffer).
    if (base.tile_head_dim != 0) {
      vary([](AttentionSpec& s) { s.tile_head_dim = 0; s.stages = 3; });
    } else if (base.head_dim % 64 != 0 && base.head_dim < 128) {
      vary([](AttentionSpec& s) { s.tile_head_dim = (s.head_dim + 63) / 64 * 64; s.stages = 2; });
    }
    vary([](AttentionSpec& s) { s.o_alias_q = true; });
    if (options.exhaustive) {
      // Not measured yet: 64-key blocks with deeper rings, O in a single Q stage; measured even:
      // three Q stages with O in the tile's stage.
      for (int stages : {4, 6}) vary([&](AttentionSpec& s) { s.block_n = 64; s.stages = stages; });
      vary([](AttentionSpec& s) { s.o_alias_q = true; s.q_stages = 1; ++s.stages; });
      vary([](AttentionSpec& s) { s.o_alias_q = true; s.q_stages = 3; });
      for (int l2 : {25, 60}) vary([&](AttentionSpec& s) { s.l2_percent = l2; });
      if (base.head_dim <= 64) vary([](AttentionSpec& s) { s.block_m = 192; });
    }
  }

  realize::ParamSpace space;
  std::set<std::string> seen;
  for (const AttentionSpec& s : configs) {
    if (!seen.insert(s.name()).second) continue;
    if (auto why = attention_spec_error(s)) {
      space.pruned.push_back({s.to_kernel_spec(), *why});
    } else if (s.block_m == 192 && s.head_dim > 64) {
      space.pruned.push_back({s.to_kernel_spec(), "3 consumer warpgroups spill above head dim 64"});
    } else if (static_cast<int>(space.candidates.size()) >= options.max_candidates) {
      space.pruned.push_back({s.to_kernel_spec(), "over the cap of " + std::to_string(options.max_candidates) + " candidates"});
    } else {
      space.candidates.push_back(s.to_kernel_spec());
    }
  }
  return space;
}

}  // namespace fact::attention
