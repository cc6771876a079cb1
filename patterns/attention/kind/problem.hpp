// The attention kind's problem: O = softmax(scale · Q Kᵀ + mask) V per (batch, head), with
// grouped-query heads (K/V head h / (heads / kv_heads)), as fact.attention describes it
// (discover/canonicalize.hpp) and FactAttentionArgs carries it (attention_abi.h).
//
// Every tensor is a [batch, heads, seq, dim] view over a graph value's memory: the value, the
// view's strides in elements and the element where it starts. So Q, K and V can be three views
// of one fused QKV projection output and O a view of the merged-head tensor the output
// projection reads ([B, T, H·D]: strides T·H·D, D, H·D, 1).
//
// Discovery, the realizer and the kind share the checks below (attention_decline_reason), so a
// problem is declined with the same reason wherever it is looked at.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/graph/graph.hpp"
#include "fact/problem/problem.hpp"

namespace fact::attention {

using graph::DType;

inline constexpr const char* kKindName = "attention";

// Head dims the bf16/fp16 kernel is built and measured for (patterns/attention/KERNEL.md); the
// float32 kernel takes any multiple of 8 from 16 to 128 (fmha_f32_sm90.cuh's static_assert: its
// mma.sync k-steps are 8 dims). Q/K and V/O head dims must be equal.
inline constexpr std::array<int64_t, 4> kKernelHeadDims = {64, 80, 96, 128};
inline constexpr bool float32_kernel_head_dim(int64_t d) { return d % 8 == 0 && d >= 16 && d <= 128; }

enum class MaskKind {
  None,               // every key visible
  CausalTopLeft,      // query i sees keys j <= i (torch is_causal, a tril mask)
  CausalBottomRight,  // query i sees keys j <= i + kv_seq - seq (FlashAttention's alignment)
};
std::string_view mask_kind_name(MaskKind kind);  // "none", "causal_top_left", "causal_bottom_right"
std::optional<MaskKind> parse_mask_kind(std::string_view name);

// A [batch, heads, seq, dim] view of a graph value's memory (rank 4 always: a missing head
// dim has extent 1).
struct TensorView {
  graph::ValueId value;
  std::vector<int64_t> shape;   // [B, H, T, D]
  std::vector<int64_t> stride;  // elements
  int64_t offset = 0;           // elements from the value's first element to the view's
  bool operator==(const TensorView&) const = default;
};

// A boolean key mask read in place (a padding mask discovery proved the same for every query
// and head): key j of batch entry b is visible iff (mask[offset + b·batch_stride + j·key_stride]
// != 0) == keep. A stride of 0 broadcasts. The mask's memory is the graph value `value` (bool).
struct KeyMask {
  graph::ValueId value;
  bool keep = true;  // true: visible where the mask is true (SDPA's boolean attn_mask)
  int64_t batch_stride = 0, key_stride = 0, offset = 0;
  bool operator==(const KeyMask&) const = default;
};

struct AttentionProblem {
  int64_t batch = 1, heads = 1, kv_heads = 1, seq = 0, kv_seq = 0, head_dim = 0, v_head_dim = 0;
  DType dtype = DType::Unknown;          // of Q, K, V and O
  DType softmax_dtype = DType::Unknown;  // what the captured softmax computed in (reports)
  MaskKind mask = MaskKind::None;
  // A causal sliding window (Mistral's and Phi-3's `sliding_window`): with a causal mask, query i
  // sees only the `window` newest keys up to its diagonal, i + off - window < j <= i + off (off
  // 0 top-left, kv_seq - seq bottom-right); 0: no window (and always 0 without a mask).
  int64_t window = 0;
  double scale = 1.0;
  std::string mask_evidence;             // why the mask is what `mask` says
  // Why this attention cannot be one kernel call although it was recognized (an arbitrary
  // mask, dropout in training mode, an unknown causal alignment, ...); empty when it can.
  std::string unsupported;
  double dropout = 0.0;                  // dropout probability in training mode (0: none)
  std::optional<KeyMask> key_mask;       // with mask None only (a causal kernel takes none)
  TensorView q, k, v, o;

  double flops() const;      // 2·B·H·Tq·Tk·(D + Dv), halved for causal masks; the visible
                             // (query, key) pairs exactly with a sliding window
  double min_bytes() const;  // Q, K, V read once, O written once
  // "128x8x512xd96", "4x32/8x2048xd128", "2x4x16/32xd64", "4x32x2048xd96w2047" (a window)
  std::string shape_string() const;
  // "attention", "attention_causal" or "attention_key_mask"
  std::string fusion_name() const;
};

// JSON form (fact.attention's attrs plus "dtype"; the plan's "problem"):
// {"batch","heads","kv_heads","seq","kv_seq","head_dim","v_head_dim","dtype","softmax_dtype",
//  "mask_kind","causal","causal_evidence","window","scale","unsupported","dropout",
//  "q"/"k"/"v"/"out": {"value","shape","stride","offset"},
//  "key_mask": null or {"value","keep","batch_stride","key_stride","offset"}, ...} (members it does not know are
// kept by discovery for reports: "mask"). from_json throws std::invalid_argument naming the
// missing or malformed field; "out" and the views may be absent for a problem written on a
// command line (then dense [B, T, H, D] tensors are assumed by the runtime).
nlohmann::json attention_problem_to_json(const AttentionProblem& p);
AttentionProblem attention_problem_from_json(const nlohmann::json& j);
Problem to_problem(const AttentionProblem& p);
AttentionProblem attention_problem_of(const Problem& problem);  // throws for another kind

// Dense views for a problem without graph values: Q [B, Tq, H, D], K/V [B, Tk, Hkv, D] and O
// [B, Tq, H, Dv] row-major (what bench_attention.py calls "bshd"), named "q", "k", "v", "o".
void set_dense_views(AttentionProblem& p);

// Why no FACT attention kernel computes `p` under `precision` (nullopt: one does): the
// canonicalization's `unsupported` reason, a key mask with a causal mask or on float32, a float32 problem in another precision than strict
// (3xTF32 kernel) or tf32 (TF32 kernel), another dtype than bf16/fp16/float32, head dims no
// kernel has (above) or unequal, a head dim that is not contiguous, a stride or offset that is
// not a multiple of 16 bytes (TMA), a GQA group that does not divide.
std::optional<std::string> attention_decline_reason(const AttentionProblem& p,
                                                    core::PrecisionMode precision);

}  // namespace fact::attention
