// AttentionSpec: the attention pattern's frozen description of one kernel instantiation (the
// parameters of its realize::KernelSpec, and exactly the template parameters of
// fact::attention::Config in fmha_sm90.cuh for bf16/fp16, of F32Config in fmha_f32_sm90.cuh for
// float32), the single source of truth for rendering, naming and caching.
// A float32 spec uses dtype, head_dim, causal, block_m, block_n and products; its other members
// keep their fixed values (one stage, cooperative, static, one CTA per tile, ...). The parameter
// space (space.cpp), the renderer (render.cpp) and the realizer (realizer.cpp) read it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/core/precision.hpp"
#include "fact/realize/kernel_spec.hpp"
#include "fact/realize/param_space.hpp"
#include "fact/realize/render.hpp"
#include "patterns/attention/kind/problem.hpp"

namespace fact::attention {

struct AttentionSpec {
  // Problem class (one kernel serves every size and stride it can implement).
  DType dtype = DType::BFloat16;  // Q, K, V, O: bf16, fp16 or float32; float32 softmax and accumulation
  int head_dim = 128;             // of Q, K, V and O (the kernel has one)
  bool causal = true;             // built for causal masks (either alignment) or for none
  bool key_mask = false;          // built to read a boolean key mask (non-causal bf16/fp16 only)
  // Tuning parameters (Config's template parameters).
  int block_m = 128;              // query rows per CTA tile: 64 per consumer warpgroup
  int block_n = 128;              // keys per block
  int stages = 2;                 // K/V ring depth
  bool dynamic_schedule = true;   // atomic tile counter in the workspace (else static stride)
  bool persistent = true;         // one CTA per SM (else one CTA per tile)
  int q_stages = 2;               // Q buffers (2: the next tile's Q loads early)
  int l2_percent = 40;            // share of L2 one section's K and V may fill
  int tile_order = 1;             // 0: L2 sections, longest first; 1: head-major
  bool o_alias_q = false;         // O staged in the tile's Q stage (frees shared memory for stages)
  int tile_head_dim = 0;          // head dim of the shared-memory tiles and GEMMs (0: head_dim; wider:
                                  // zero-padded by TMA to a multiple of 64, 128-byte swizzled rows)
  // float32 only: TF32 products per multiply, 3 (3xTF32 split operands: precision strict) or 1
  // (precision tf32); 0 for bf16/fp16.
  int products = 0;

  bool operator==(const AttentionSpec&) const = default;

  // "attn_bf16_d96_causal_m128n128s3_coop_dyn_q2_o1" (the instances' spelling; "_coop": the
  // cooperative consumer schedule, the only one, kept so names match the measured results), plus
  // "_np" (not persistent), "_oq" (O in the Q buffer), "_l2<percent>" when not 40 and "_t<dim>"
  // for a padded tile head dim, "_km" for a key mask);
  // float32: "attn_f32_d96_causal_m64n64_3xtf32" (or "_tf32").
  std::string name() const;
  nlohmann::json to_json() const;
  // Throws std::invalid_argument naming a missing or malformed field.
  static AttentionSpec from_json(const nlohmann::json& j);
  realize::KernelSpec to_kernel_spec() const;       // kind "attention", pattern "attention"
  static AttentionSpec of(const realize::KernelSpec& spec);  // throws for another kind
};

// Bytes of shared memory the kernel asks for (fmha_sm90.cuh's SharedStorage + 1 KB for the
// 1024-byte alignment of the base), and the per-CTA limit on sm90.
int shared_memory_bytes(const AttentionSpec& spec);
inline constexpr int kSharedMemoryLimit = 227 * 1024;

// Why the template cannot instantiate `spec` (nullopt: it can): dtype, head dim, tile shapes,
// warpgroups, Q stages with O in the Q buffer, a dynamic schedule without a persistent grid,
// shared memory over the limit; for float32, the products and tiles the kernel builds without
// spilling. render_kernel refuses such a spec.
std::optional<std::string> attention_spec_error(const AttentionSpec& spec);

// The problem class of `p` under `precision` with the default configuration for its head dim and
// mask: the configurations patterns/attention/KERNEL.md measured best on an H100 (d128 causal: 2
// stages, one Q stage, L2 sections; d128 non-causal: 2 stages, head-major; d64/80/96: 3 stages,
// head-major; all cooperative, dynamic longest-first schedule, persistent); float32: 3xTF32
// products (tf32: one), 64-row tiles (128 at d128), 64-key blocks.
AttentionSpec default_spec(const AttentionProblem& p, core::PrecisionMode precision = core::PrecisionMode::Native);

// Whether `spec` is one of the float32 kernels (fmha_f32_sm90.cuh).
inline bool is_float32_kernel(const AttentionSpec& spec) { return spec.dtype == DType::Float32; }

// The configurations worth compiling for `problem_class` (its dtype, head dim and mask),
// pruned, best first: the default, then the other tile order, the static schedule, the other Q
// ring depth, one stage more or less, a non-persistent grid, tile M 64 against 128, padded
// against native tiles, O in the Q buffer, and (exhaustive only) 64-key blocks with deeper
// rings, other Q stages with O in the Q buffer, other L2 shares.
realize::ParamSpace attention_space(const AttentionSpec& problem_class, const realize::SpaceOptions& options);

// The rendered instance: Config alias, the C entry fact_<key> and fact_kernel_info (kind
// "attention", abi_version, the KernelSpec JSON). Throws RenderError for an invalid spec.
realize::KernelTemplate render_attention_template(const AttentionSpec& spec);

}  // namespace fact::attention
