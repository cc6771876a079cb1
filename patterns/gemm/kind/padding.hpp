// The host's view of zero padding (gemm_padding.h: how an entry runs a call whose rows are not
// 16-byte aligned): the same plan, computed on a problem's argument struct, so discovery, the
// spec's alignments and the report agree with what the kernel's entry does.
#pragma once
#include <optional>
#include <string>

#include "patterns/gemm/gemm_padding.h"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

// Why the direct-store variant (an unaligned row-major D written element by element without
// TMA, gemm_direct_store.cuh) cannot run `p`, or nullopt when it can: bf16/fp16 operands, no
// step that stores D itself or reads tables, one batch mode. Where it cannot, an unaligned D is
// padded instead (written into the workspace and copied back).
std::optional<std::string> direct_store_obstacle(const GemmProblem& p);

struct GemmPadding {
  bool d_direct = false;         // D written by the direct-store variant as it is
  padding::Plan plan;            // the entry's plan on gemm_args(p) (addresses null)
  bool any() const { return !plan.identity(); }
  bool staged_a() const { return plan.staged_a; }  // A copied per call (not given padded)
  bool staged_b() const { return plan.staged_b; }
  bool staged_d() const { return plan.copy_out; }
};

// The padding the entry applies to `p`'s calls.
GemmPadding gemm_padding(const GemmProblem& p);

// The extents `p` runs at (its M, N, K when nothing is padded).
padding::Extents padded_extents(const GemmProblem& p);

// "K padded 5921→5924", "K padded 770→776, N padded 2949→2952", or "" when the call runs as it
// is; an operand copied only because its strides are unaligned says so ("A staged (lda=1001)").
std::string padding_summary(const GemmProblem& p);

// Gives `p`'s D padded rows (GemmOperand::padded, ld = N rounded up to 16 bytes, the batch
// stride M * ld) when the kernel can then write it in place at the padded N, or says why not
// (leaving `p` as it is): D row-major and dense with rows not 16-byte aligned, one batch mode,
// no step that stores D itself (a gated product at half width) or reads tables by row and column, a run padded along N only
// (not M: a column-major A) whose D is not staged. Whether D's value may be handed on as a view
// of padded rows is the graph's question (discover/checks.cpp, pad_result_rows).
std::optional<std::string> give_d_padded_rows(GemmProblem& p);

// Why `p` cannot run padded (a step that reads tables over padded rows or columns), or nullopt.
std::optional<std::string> padding_obstacle(const GemmProblem& p);

}  // namespace fact::gemm
