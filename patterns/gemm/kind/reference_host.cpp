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
#include "patterns/gemm/kind/step_hooks.hpp"

namespace fact::gemm {

namespace {


// The element a step reads at (i, j), as ops.def's OPERAND column says (0 when it reads none;
// tables are read by the store of the step that reads them).
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
    // A step that stores D pairs columns: it is the last, over an even N, and its pattern
    // stores it (the hooks it registers).
    const StepKindHooks* hooks = step_kind_hooks(op->kind);
    if (op->stores_d &&
        (s != args.num_steps - 1 || args.n % 2 != 0 || hooks == nullptr || !hooks->store_row))
      return FACT_ERR_INVALID_ARGS;
    if (hooks != nullptr && hooks->call_valid && !hooks->call_valid(args, s)) {
      return FACT_ERR_INVALID_ARGS;
    }
  }
  const StepKindHooks* store =
      fact_gemm_last_step_stores_d(&args) != 0
          ? step_kind_hooks_by_abi_id(args.steps[args.num_steps - 1].kind)
          : nullptr;
  const int steps_before_output = store != nullptr ? args.num_steps - 1 : args.num_steps;
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
          if (store != nullptr) {
            // The last step writes D's row itself (its pattern's store).
            struct RowOut {
              const FactGemmArgs* args;
              int64_t at;
            } out{&args, d0 + i * args.ldd};
            store->store_row(args, args.steps[args.num_steps - 1], i, row.data(),
                             [](void* context, int64_t column, double value) {
                               const auto* o = static_cast<const RowOut*>(context);
                               store_abi_element(o->args->d, o->at + column, o->args->d_type, value);
                             },
                             &out);
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
