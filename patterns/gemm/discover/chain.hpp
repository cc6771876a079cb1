// GEMM matches share this (the gemm rule and the patterns that produce gemm problems): reading a canonical fact.gemm node
// into a GemmProblem, growing its epilogue greedily over single-reader successors, and the
// checks every GEMM kernel must pass.
#pragma once
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "fact/discover/discover.hpp"
#include "fact/discover/rule.hpp"
#include "fact/graph/graph.hpp"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

using discover::DiscoverOptions;
using discover::RuleContext;
using discover::RuleResult;

// How the batch dims of a fact.gemm's output map onto its problem's batch modes (attrs
// "batch_dims": {"shape", "modes"}): per dim of `shape` (the broadcast batch dims of A and B),
// 0 for the kernel's batch mode, 1 for the outer one, -1 for a dim of size 1 or one folded into M.
struct BatchDims {
  std::vector<int64_t> shape;
  std::vector<int> modes;
};
BatchDims batch_dims_of(const graph::Node& gemm);

// The strides (batch, outer batch) with which a tensor whose batch dims are `shape` / `stride`
// (right-aligned to dims.shape; a missing or size-1 dim is broadcast) is read in each batch
// mode; nullopt when a dim's size is neither 1 nor the batch dim's, when the tensor varies over
// a dim folded into M, or when its dims of one mode do not collapse into one stride.
std::optional<std::pair<int64_t, int64_t>> batch_mode_strides(const BatchDims& dims,
                                                              const std::vector<int64_t>& shape,
                                                              const std::vector<int64_t>& stride);

struct GemmChain {
  GemmProblem problem;
  std::vector<graph::NodeId> nodes;  // canonical nodes: the fact.gemm, then the absorbed steps
  graph::ValueId output;             // the value the chain ends in (problem.d.value)
  // input, weight, output, and per operand step bias / residual / multiplier / saved (a second
  // one of a kind gets "_2", ...).
  std::map<std::string, graph::ValueId> roles;
  std::string unsupported;           // fact.gemm attrs.unsupported (layout), empty when readable
  BatchDims batch_dims;              // fact.gemm attrs.batch_dims: per-batch epilogue operands
};

// The leading dimension of a matrix whose outer extent may be 1: its stride when that is one
// (a single row of a strided view keeps its view's stride: x[:, 0] of [B, S, H] at B = 1 has
// S·H, as at every other B, so a plan over a range of B fits one polynomial), else the inner
// extent (the stride of an extent-1 dim says nothing).
int64_t leading_dimension(int64_t outer, int64_t inner, int64_t outer_stride);

// The problem a fact.gemm node describes: operands, layouts, leading dims, batch strides,
// alpha; a linear/addmm bias becomes the first epilogue step (Bias for a length-N vector,
// Residual with value = beta for a full matrix). Throws std::invalid_argument for a node that
// is not a fact.gemm.
GemmChain gemm_chain_from_node(const graph::Graph& g, const graph::Node& gemm);

struct EpilogueOptions {
  bool allow_multiply = true;   // x *= C[m, n] by another tensor of the output's shape
  size_t max_steps = 8;         // FACT_GEMM_MAX_STEPS
  const std::set<graph::NodeId>* claimed = nullptr;  // nodes another match took: not absorbed
};

// Absorbs, while the chain's output has exactly one reader (and is not a graph output), the
// reader when it is an epilogue step: bias add (a length-N vector along the rows, shared or one
// per batch: [B, 1, 1, N] over [B, H, M, N]), activation (fact.activation, fact.gelu_tanh,
// fact.gelu_erf), residual add or subtract (a contiguous tensor of the output's shape, or an M×N
// matrix with a leading dimension whose batch dims broadcast to the product's: an additive mask
// [1, 1, M, N]; on either side), scale (fact.scale), add of a constant
// (fact.add_scalar), multiply by a tensor of the output's shape, and a step the op table
// spells in aten (step_spellings.hpp: an activation's backward op — gelu_backward,
// threshold_backward at 0, silu_backward — with the chain's output as its first tensor and an
// M×N operand read like a residual as its second, role "saved"); in any order, each as often as
// it occurs, up to options.max_steps, never a node in options.claimed. Updates problem.epilogue,
// problem.d, nodes, output and roles.
void absorb_epilogue(const graph::Graph& g, GemmChain& chain, const EpilogueOptions& options = {});

// Why this GEMM cannot be realized, or nullopt: the operand layout (from canonicalization),
// dtypes (bf16 / fp16 natively; fp32 only in precision mode strict (3xTF32) or tf32; anything
// else "dtype float64 has no template"), devices (cpu / meta / cuda are fine), and TMA's
// 16-byte alignment of the contiguous extents, leading dims and batch strides
// ("K=770 not a multiple of 8 for bf16").
std::optional<std::string> check_gemm(const graph::Graph& g, const GemmChain& chain,
                                      const DiscoverOptions& options);

// The result of a GEMM-based rule over its chains (one kernel each): claims every chain's
// nodes, outputs the last chain's output, roles from the first chain unless `roles` is given;
// status Accepted when every chain passes check_gemm, else Declined with the first reason.
// extra: {"math": math_mode, "precision": options.precision}.
RuleResult gemm_rule_result(const RuleContext& context, const std::vector<GemmChain>& chains,
                            std::string rule, std::string pattern,
                            std::map<std::string, graph::ValueId> roles = {});

// How the GEMM multiplies in this precision mode: "native" (bf16/fp16), "3xtf32" (fp32,
// strict), "tf32" (fp32, tf32); empty when the mode does not allow the dtype.
std::string math_mode(graph::DType dtype, core::PrecisionMode precision);

using graph::dtype_label;

}  // namespace fact::gemm
