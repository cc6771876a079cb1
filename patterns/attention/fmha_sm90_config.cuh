// The bf16/fp16 attention kernel's configuration (fmha_sm90.cuh): type choices only (logic
// lives in the other headers), the template parameters realize/spec.hpp's AttentionSpec
// spells. An instantiation file names one.
#pragma once

namespace fact::attention {

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kCausal_,
          bool kDynamicSchedule_ = false, bool kPersistent_ = true, int kQStages_ = 2, int kL2Percent_ = 40,
          int kTileOrder_ = 0, bool kOAliasQ_ = false, int kTileHeadDim_ = 0, bool kKeyMask_ = false>
struct Config {
  using Element = Element_;                         // cutlass::bfloat16_t or cutlass::half_t
  static constexpr int kHeadDim = kHeadDim_;        // head dim of Q, K and V
  static constexpr int kBlockM = kBlockM_;          // query rows per CTA tile (64 per consumer WG)
  static constexpr int kBlockN = kBlockN_;          // key rows per block
  static constexpr int kStages = kStages_;          // K and V ring depth
  static constexpr bool kCausal = kCausal_;         // built for causal masks (either alignment)
  static constexpr bool kDynamicSchedule = kDynamicSchedule_;  // atomic tile counter (workspace)
  static constexpr bool kPersistent = kPersistent_; // grid = SMs (else one CTA per tile)
  static constexpr int kQStages = kQStages_;        // Q buffers: 2 loads the next tile's Q early
  static constexpr int kL2Percent = kL2Percent_;    // share of L2 one section's K and V may fill
  static constexpr int kTileOrder = kTileOrder_;    // 0: L2 sections, longest first; 1: head-major
  static constexpr bool kOAliasQ = kOAliasQ_;       // O staged in the tile's Q stage (frees smem)
  // Head dim of the shared-memory tiles (0: kHeadDim). Wider than kHeadDim (a multiple of 64):
  // rows load with 128-byte swizzle boxes, TMA zero-fills the columns past kHeadDim, the stores
  // clip them; the GEMMs run over the padded width.
  static constexpr int kTileHeadDim = kTileHeadDim_ ? kTileHeadDim_ : kHeadDim_;
  // Built to read a boolean key mask (a padding mask shared by every query and head; not with
  // kCausal): every key block's scores are masked from it (fmha_sm90_mask.cuh's KeyMask).
  static constexpr bool kKeyMask = kKeyMask_;
  static_assert(!(kKeyMask_ && kCausal_), "a key mask is built for non-causal kernels only");
};

}  // namespace fact::attention
