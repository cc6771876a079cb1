#include "patterns/gemm/kind/reference_host.hpp"

#include "fact/problem/abi_elements.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/kind/abi_names.hpp"

namespace fact::gemm {

namespace {


// The element a step reads at (i, j), as ops.def's OPERAND column says (0 when it reads none;
// rope's tables are read by the store below).
double operand_element(const FactGemmStep& step, OperandShape shape, int64_t step0, int64_t i,
                       int64_t j) {
  switch (shape) {
    case OperandShape::COLUMN_VECTOR: return load_abi_element(step.operand, step0 + j, step.operand_type);
    case OperandShape::ROW_VECTOR: return load_abi_element(step.operand, step0 + i, step.operand_type);
    case OperandShape::MATRIX:
      return load_abi_element(step.operand, step0 + i * step.ld + j, step.operand_type);
    case OperandShape::NONE:
    case OperandShape::TABLES: return 0.0;
  }
  return 0.0;
}

ops::StepConstants<double> constants_of(const FactGemmStep& step) {
  return {double(step.value), double(step.p0), double(step.p1), step.activation};
}

bool valid_type(int32_t type) { return abi_dtype_bytes(type) > 0; }

}  // namespace

int reference_gemm_host(const FactGemmArgs& args) {
  if (args.header.abi_version != FACT_ABI_VERSION ||
      args.header.kind != fact_kind_id(FACT_GEMM_KIND_NAME) ||
      args.header.size != sizeof(FactGemmArgs)) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (args.m <= 0 || args.n <= 0 || args.k <= 0 || args.batch <= 0) return FACT_ERR_INVALID_ARGS;
  if (!args.a || !args.b || !args.d) return FACT_ERR_INVALID_ARGS;
  if (!valid_type(args.a_type) || !valid_type(args.b_type) || !valid_type(args.d_type)) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (args.num_steps < 0 || args.num_steps > FACT_GEMM_MAX_STEPS) return FACT_ERR_INVALID_ARGS;
  for (int s = 0; s < args.num_steps; ++s) {
    const FactGemmStep& step = args.steps[s];
    const StepOp* op = find_step_op_by_abi_id(step.kind);
    if (op == nullptr) return FACT_ERR_INVALID_ARGS;
    const bool operand = op->operand != OperandShape::NONE;
    if (operand && (!step.operand || !valid_type(step.operand_type))) return FACT_ERR_INVALID_ARGS;
    // A gated step pairs columns: it is the last, over an even N.
    if (step.kind == FACT_STEP_GLU && (s != args.num_steps - 1 || args.n % 2 != 0))
      return FACT_ERR_INVALID_ARGS;
    // A rope step rotates pairs of columns within heads of `group` columns, rows of sequences
    // of `period` rows: the last step, one batch, whole heads and sequences, both tables.
    if (step.kind == FACT_STEP_ROPE &&
        (s != args.num_steps - 1 || !step.operand2 || step.group <= 0 || step.group % 2 != 0 ||
         args.n % step.group != 0 || step.period <= 0 || args.m % step.period != 0 ||
         step.ld < 0 || step.period_stride < 0 || args.batch != 1 || args.outer_batch > 1))
      return FACT_ERR_INVALID_ARGS;
  }
  const bool gated = args.num_steps > 0 && args.steps[args.num_steps - 1].kind == FACT_STEP_GLU;
  const bool roped = fact_gemm_roped(&args) != 0;
  const int steps_before_output = gated || roped ? args.num_steps - 1 : args.num_steps;
  if (args.outer_batch < 0) return FACT_ERR_INVALID_ARGS;
  const int64_t m = args.m, n = args.n, k = args.k;
  const int64_t outer_batches = args.outer_batch > 1 ? args.outer_batch : 1;
  const bool a_row = args.a_layout == FACT_ROW_MAJOR;
  const bool b_row = args.b_layout == FACT_ROW_MAJOR;
  std::vector<double> a_row_major(static_cast<size_t>(m * k));
  std::vector<double> b_col_major(static_cast<size_t>(k * n));
  for (int64_t o = 0; o < outer_batches; ++o) {
    for (int64_t l = 0; l < args.batch; ++l) {
      // Element offsets of batch (o, l) of every operand.
      const int64_t a0 = o * args.outer_stride_a + l * args.stride_a;
      const int64_t b0 = o * args.outer_stride_b + l * args.stride_b;
      const int64_t d0 = o * args.outer_stride_d + l * args.stride_d;
      int64_t step0[FACT_GEMM_MAX_STEPS];
      OperandShape shape[FACT_GEMM_MAX_STEPS];
      for (int s = 0; s < args.num_steps; ++s) {
        shape[s] = find_step_op_by_abi_id(args.steps[s].kind)->operand;  // checked above
        step0[s] = o * args.steps[s].outer_batch_stride + l * args.steps[s].batch_stride;
      }
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t kk = 0; kk < k; ++kk) {
          const int64_t at = a0 + (a_row ? i * args.lda + kk : kk * args.lda + i);
          a_row_major[static_cast<size_t>(i * k + kk)] = load_abi_element(args.a, at, args.a_type);
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t kk = 0; kk < k; ++kk) {
          const int64_t at = b0 + (b_row ? kk * args.ldb + j : j * args.ldb + kk);
          b_col_major[static_cast<size_t>(j * k + kk)] = load_abi_element(args.b, at, args.b_type);
        }
      }
      // Rows [i_begin, i_end) of this batch: float64 dot products (four partial sums per dot
      // product, so the loop is not one serial chain), the steps, the store.
      std::atomic<bool> bad_step{false};
      auto compute_rows = [&](int64_t i_begin, int64_t i_end) {
        std::vector<double> row(static_cast<size_t>(n));
        for (int64_t i = i_begin; i < i_end; ++i) {
          const double* a_i = &a_row_major[static_cast<size_t>(i * k)];
          for (int64_t j = 0; j < n; ++j) {
            const double* b_j = &b_col_major[static_cast<size_t>(j * k)];
            double acc0 = 0.0, acc1 = 0.0, acc2 = 0.0, acc3 = 0.0;
            int64_t kk = 0;
            for (; kk + 4 <= k; kk += 4) {
              acc0 += a_i[kk] * b_j[kk];
              acc1 += a_i[kk + 1] * b_j[kk + 1];
              acc2 += a_i[kk + 2] * b_j[kk + 2];
              acc3 += a_i[kk + 3] * b_j[kk + 3];
            }
            for (; kk < k; ++kk) acc0 += a_i[kk] * b_j[kk];
            double x = double(args.alpha) * ((acc0 + acc1) + (acc2 + acc3));
            for (int s = 0; s < steps_before_output; ++s) {
              const FactGemmStep& step = args.steps[s];
              bool known = true;
              x = ops::apply_step<double>(step.kind, x, operand_element(step, shape[s], step0[s], i, j),
                                          constants_of(step), &known);
              if (!known) {
                bad_step = true;
                return;
              }
            }
            row[static_cast<size_t>(j)] = x;
          }
          if (gated) {
            const FactGemmStep& glu = args.steps[args.num_steps - 1];
            for (int64_t j = 0; j < n / 2; ++j) {
              const double gate = row[static_cast<size_t>(2 * j)];
              const double up = row[static_cast<size_t>(2 * j + 1)];
              store_abi_element(args.d, d0 + i * args.ldd + j, args.d_type,
                    ops::activate<double>(glu.activation, gate, glu.p0, glu.p1) * up);
            }
          } else if (roped) {
            // Pairs (2p, 2p+1) of each head's columns, each result to its original column.
            const FactGemmStep& rope = args.steps[args.num_steps - 1];
            const int64_t group = rope.group, half = group / 2;
            const int64_t table = (i / rope.period) * rope.period_stride + (i % rope.period) * rope.ld;
            auto cos_at = [&](int64_t c) { return load_abi_element(rope.operand, table + c, rope.operand_type); };
            auto sin_at = [&](int64_t c) { return load_abi_element(rope.operand2, table + c, rope.operand_type); };
            for (int64_t head = 0; head < n; head += group) {
              for (int64_t pair = 0; pair < half; ++pair) {
                const double xa = row[static_cast<size_t>(head + 2 * pair)];
                const double xb = row[static_cast<size_t>(head + 2 * pair + 1)];
                const int64_t ca = rope.interleaved ? 2 * pair : pair;
                const int64_t cb = rope.interleaved ? 2 * pair + 1 : pair + half;
                store_abi_element(args.d, d0 + i * args.ldd + head + ca, args.d_type,
                                  xa * cos_at(ca) - xb * sin_at(ca));
                store_abi_element(args.d, d0 + i * args.ldd + head + cb, args.d_type,
                                  xb * cos_at(cb) + xa * sin_at(cb));
              }
            }
          } else {
            for (int64_t j = 0; j < n; ++j) store_abi_element(args.d, d0 + i * args.ldd + j, args.d_type, row[static_cast<size_t>(j)]);
          }
        }
      };
      // Large products split their rows over the host's cores (the CPU path verifies full-size
      // models with this reference); each row is computed the same way on any split.
      const double macs = double(m) * double(n) * double(k);
      const int64_t threads = macs < 1e7 ? 1 : std::min<int64_t>(m, std::max(1u, std::thread::hardware_concurrency()));
      if (threads == 1) {
        compute_rows(0, m);
      } else {
        std::vector<std::thread> pool;
        for (int64_t t = 0; t < threads; ++t) {
          pool.emplace_back(compute_rows, m * t / threads, m * (t + 1) / threads);
        }
        for (auto& worker : pool) worker.join();
      }
      if (bad_step) return FACT_ERR_INVALID_ARGS;
    }
  }
  return FACT_OK;
}

}  // namespace fact::gemm
