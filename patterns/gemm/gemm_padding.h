// Zero padding for GEMMs whose rows are not 16-byte aligned (patterns/gemm/README.md,
// "Alignment: padding"). TMA (every sm90 mainloop and TMA epilogue FACT renders) needs 16-byte
// aligned leading dimensions and batch strides, and CUTLASS's can_implement also asks the
// contiguous extents (K of a K-major operand, N of a row-major B or D, M of a column-major A)
// to be multiples of 16 bytes. A call that breaks either runs padded:
//
//   - the kernel runs at padded extents: K, and M or N where an operand is contiguous along
//     them, rounded up to a multiple of 16 bytes (padded_extents);
//   - every operand whose rows do not fit the padded run is staged: copied, once per call and
//     on the call's stream, into the workspace, compact and zero-filled up to the padded
//     extents — A and B, each epilogue operand, and D, which the kernel then writes into the
//     workspace and the entry copies back (its first M x N elements). An operand the plan
//     padded once (a weight: FactGemmArgs::padded) is read in place, and a D whose rows hold
//     the padded N (FACT_GEMM_PADDED_D: a result allocated with padded rows) written in place;
//   - zeros along K add nothing to the product, and rows or columns past M or N are computed and
//     dropped, so the result is the unpadded call's, exactly.
//
// A call that is aligned stages nothing and runs as it is (plan.copies empty). Everything here
// is plain C++ over FactGemmArgs: the entries execute a plan on the GPU (gemm_padding.cuh), the
// host computes the same plan to choose a kernel's alignments (realize/spec_from_problem.cpp)
// and the tests execute it on the host (tests/test_kind_padding.cpp). The plan depends on the
// call's sizes, layouts, dtypes, strides and `padded` bits only, never on its addresses, so a
// size query and the call it sizes agree.
#pragma once
#include <cstddef>
#include <cstdint>

#include "patterns/gemm/gemm_abi.h"

#if defined(__CUDACC__)
#define FACT_PADDING_HD __host__ __device__
#else
#define FACT_PADDING_HD
#endif

namespace fact::gemm::padding {

inline constexpr int64_t kAlignBytes = 16;     // TMA's row alignment
inline constexpr size_t kRegionAlign = 256;    // each staged buffer starts 256-byte aligned

inline int64_t round_up(int64_t x, int64_t a) { return a <= 1 ? x : (x + a - 1) / a * a; }

// Elements of `type` per 16 bytes (1 for an unknown type).
inline int64_t align_elements(int32_t type) {
  const int64_t bytes = fact_gemm_dtype_bytes(type);
  return bytes > 0 ? kAlignBytes / bytes : 1;
}

inline bool aligned(int64_t elements, int64_t align) { return elements % align == 0; }

// What a step kind reads (ops.def's OPERAND column), by its ABI id.
enum class StepOperand { None, ColumnVector, RowVector, Matrix, Tables };
inline StepOperand step_operand(int32_t kind) {
  switch (kind) {
#define FACT_GEMM_OPERAND_NONE StepOperand::None
#define FACT_GEMM_OPERAND_COLUMN_VECTOR StepOperand::ColumnVector
#define FACT_GEMM_OPERAND_ROW_VECTOR StepOperand::RowVector
#define FACT_GEMM_OPERAND_MATRIX StepOperand::Matrix
#define FACT_GEMM_OPERAND_TABLES StepOperand::Tables
#define FACT_GEMM_STEP(C_NAME, CPP, ID, NAME, TOKEN, LINK, OPERAND, ...) \
    case ID: return FACT_GEMM_OPERAND_##OPERAND;
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_STEP
#undef FACT_GEMM_OPERAND_NONE
#undef FACT_GEMM_OPERAND_COLUMN_VECTOR
#undef FACT_GEMM_OPERAND_ROW_VECTOR
#undef FACT_GEMM_OPERAND_MATRIX
#undef FACT_GEMM_OPERAND_TABLES
    default: return StepOperand::None;
  }
}

struct Extents {
  int64_t m = 0, n = 0, k = 0;
};

// The extents the kernel runs `args` at. K is padded when A or B is K-major, M when A is
// column-major, N when B is row-major, or when an M x N epilogue operand (row-major, its
// contiguous extent N) or D is not a whole number of 16-byte vectors wide — D only when
// `d_direct` is false (a direct-store kernel writes D element by element:
// gemm_direct_store.cuh). A gated D (N/2 columns) pads N by twice D's alignment.
inline Extents padded_extents(const FactGemmArgs& args, bool d_direct) {
  const int64_t al = align_elements(args.a_type) > align_elements(args.b_type)
                         ? align_elements(args.a_type)
                         : align_elements(args.b_type);
  Extents e{args.m, args.n, args.k};
  if (args.a_layout == FACT_ROW_MAJOR || args.b_layout == FACT_COLUMN_MAJOR) e.k = round_up(args.k, al);
  if (args.a_layout == FACT_COLUMN_MAJOR) e.m = round_up(args.m, al);
  if (args.b_layout == FACT_ROW_MAJOR) e.n = round_up(e.n, al);
  const int32_t steps = args.num_steps < 0 ? 0
                        : args.num_steps > FACT_GEMM_MAX_STEPS ? FACT_GEMM_MAX_STEPS
                                                               : args.num_steps;
  for (int32_t i = 0; i < steps; ++i) {
    const FactGemmStep& step = args.steps[i];
    // An M x N operand is read in D's row-major layout (ld along M, N contiguous).
    if (step_operand(step.kind) == StepOperand::Matrix) {
      e.n = round_up(e.n, align_elements(step.operand_type));
    }
  }
  if (!d_direct) {
    const int64_t factor = fact_gemm_last_step_stores_d(&args) == 2 ? 2 : 1;
    e.n = round_up(e.n, factor * align_elements(args.d_type));
  }
  return e;
}

// One staging copy: a [outer][batch][dst_rows][dst_cols] destination, element (o, l, r, c)
// taken from the source when r < rows and c < cols and zero otherwise. Rows are the
// non-contiguous mode, columns the contiguous one.
struct Copy2D {
  const void* src = nullptr;
  void* dst = nullptr;
  int32_t bytes = 0;  // element size: 2, 4 or 8
  int64_t rows = 0, cols = 0;          // read from the source
  int64_t dst_rows = 0, dst_cols = 0;  // written (>= rows, cols)
  int64_t src_ld = 0, src_batch_stride = 0, src_outer_stride = 0;
  int64_t dst_ld = 0, dst_batch_stride = 0, dst_outer_stride = 0;
  int64_t batch = 1, outer = 1;        // copies per mode (1 where the operand is shared: stride 0)
};

// The value of destination element (o, l, r, c) of `c` (the copy kernel and host tests).
template <class T>
FACT_PADDING_HD inline T copied_element(const Copy2D& c, int64_t o, int64_t l, int64_t r, int64_t col) {
  if (r >= c.rows || col >= c.cols) return T(0);
  const T* src = static_cast<const T*>(c.src);
  return src[o * c.src_outer_stride + l * c.src_batch_stride + r * c.src_ld + col];
}

FACT_PADDING_HD inline int64_t copy_elements(const Copy2D& c) { return c.outer * c.batch * c.dst_rows * c.dst_cols; }

// What the entry runs for one call: the padded call the kernel sees, the copies into the
// workspace before it (`copies_in`), the copy of D back after it, and the staging bytes (at
// the workspace's start; the kernel's own workspace follows).
struct Plan {
  int status = FACT_OK;  // FACT_ERR_CANNOT_IMPLEMENT: padding the call would change what a
                         // step reads (a TABLES step over padded rows or columns)
  FactGemmArgs args{};
  Copy2D copies_in[2 + FACT_GEMM_MAX_STEPS];
  int num_copies_in = 0;
  bool staged_a = false, staged_b = false;  // A or B among copies_in
  bool copy_out = false;                    // D written into the workspace and copied back
  Copy2D out;
  size_t staging_bytes = 0;
  Extents extents;
  bool padded_extents = false;              // the kernel runs at extents other than the call's
  // True when nothing is padded or staged (args is the call itself). A call whose operands are
  // all given padded (a weight padded once, D with padded rows) stages nothing but still runs at
  // the padded extents: not the identity.
  bool identity() const { return num_copies_in == 0 && !copy_out && staging_bytes == 0 && !padded_extents; }
};

namespace detail {

// Reserves `bytes` in the staging area; the region's start (an offset from `base` when base is
// null, as in a size query: never dereferenced then).
inline char* reserve(char* base, size_t& used, size_t bytes) {
  used = (used + kRegionAlign - 1) / kRegionAlign * kRegionAlign;
  char* p = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(base) + used);
  used += bytes;
  return p;
}

// A compact [outer][batch][dst_rows][dst_cols] copy of an operand read as rows x cols with
// leading dimension ld; a batch or outer stride of 0 (shared) keeps one copy.
inline Copy2D stage(const void* src, int32_t type, int64_t rows, int64_t cols, int64_t dst_rows,
                    int64_t dst_cols, int64_t ld, int64_t batch, int64_t batch_stride,
                    int64_t outer, int64_t outer_stride, char* base, size_t& used) {
  Copy2D c;
  c.src = src;
  c.bytes = static_cast<int32_t>(fact_gemm_dtype_bytes(type));
  c.rows = rows;
  c.cols = cols;
  c.dst_rows = dst_rows;
  c.dst_cols = dst_cols;
  c.src_ld = ld;
  c.batch = batch > 1 && batch_stride != 0 ? batch : 1;
  c.outer = outer > 1 && outer_stride != 0 ? outer : 1;
  c.src_batch_stride = c.batch > 1 ? batch_stride : 0;
  c.src_outer_stride = c.outer > 1 ? outer_stride : 0;
  c.dst_ld = dst_cols;
  c.dst_batch_stride = c.batch > 1 ? dst_rows * dst_cols : 0;
  c.dst_outer_stride = c.outer > 1 ? c.batch * dst_rows * dst_cols : 0;
  c.dst = reserve(base, used, static_cast<size_t>(copy_elements(c) * c.bytes));
  return c;
}

// True when an operand's strides are 16-byte aligned in the modes the call uses.
inline bool strides_aligned(int64_t ld, int64_t batch, int64_t batch_stride, int64_t outer,
                            int64_t outer_stride, int64_t align) {
  return aligned(ld, align) && (batch <= 1 || aligned(batch_stride, align)) &&
         (outer <= 1 || aligned(outer_stride, align));
}

}  // namespace detail

// True when `call` is malformed in a way padding must not paper over: a negative count or
// stride, a leading dimension shorter than the row it holds, a step count out of range, an odd
// N under a last step that stores D at half width (it pairs columns: an odd N pairs none). The
// entries hand such a call to the kernel's own checks unpadded (they refuse it).
inline bool malformed(const FactGemmArgs& call) {
  if (call.m <= 0 || call.n <= 0 || call.k <= 0 || call.batch <= 0 || call.outer_batch < 0) return true;
  if (call.num_steps < 0 || call.num_steps > FACT_GEMM_MAX_STEPS) return true;
  if (call.stride_a < 0 || call.stride_b < 0 || call.stride_d < 0 || call.outer_stride_a < 0 ||
      call.outer_stride_b < 0 || call.outer_stride_d < 0)
    return true;
  const bool a_row = call.a_layout == FACT_ROW_MAJOR, b_row = call.b_layout == FACT_ROW_MAJOR;
  if (call.lda < (a_row ? call.k : call.m) || call.ldb < (b_row ? call.n : call.k)) return true;
  const int64_t halve = fact_gemm_last_step_stores_d(&call) == 2 ? 2 : 1;
  if (call.n % halve != 0) return true;
  if (call.ldd < call.n / halve) return true;
  for (int32_t i = 0; i < call.num_steps; ++i) {
    const FactGemmStep& step = call.steps[i];
    if (step.batch_stride < 0 || step.outer_batch_stride < 0 || step.ld < 0) return true;
    if (step_operand(step.kind) == StepOperand::Matrix && step.ld < call.n) return true;
  }
  return false;
}

// The plan for `call` (sizes, layouts and dtypes as the entry checks them: positive sizes,
// known dtypes). `base` is the workspace's start (null for a size query: the plan's pointers
// into it are then offsets, and its sizes are the ones the call will use).
inline Plan plan(const FactGemmArgs& call, bool d_direct, char* base) {
  Plan p;
  p.args = call;
  const Extents e = padded_extents(call, d_direct);
  p.extents = e;
  FactGemmArgs& a = p.args;
  a.m = e.m;
  a.n = e.n;
  a.k = e.k;
  a.padded = 0;
  const int64_t outer = fact_gemm_outer_count(&call);
  const int64_t batch = call.batch;
  size_t used = 0;
  const bool padded_m = e.m != call.m, padded_n = e.n != call.n;
  p.padded_extents = padded_m || padded_n || e.k != call.k;

  // A (M x K) and B (K x N): rows and columns as stored.
  struct Side {
    const void* ptr; int32_t type; int32_t layout; int64_t rows, cols, ld, bs, os;
    int64_t prow, pcol; bool given_padded;
    const void** out_ptr; int64_t* out_ld; int64_t* out_bs; int64_t* out_os; bool* staged;
  };
  const bool a_row = call.a_layout == FACT_ROW_MAJOR, b_row = call.b_layout == FACT_ROW_MAJOR;
  Side sides[2] = {
      {call.a, call.a_type, call.a_layout, a_row ? call.m : call.k, a_row ? call.k : call.m,
       call.lda, call.stride_a, call.outer_stride_a, a_row ? e.m : e.k, a_row ? e.k : e.m,
       (call.padded & FACT_GEMM_PADDED_A) != 0, &a.a, &a.lda, &a.stride_a, &a.outer_stride_a, &p.staged_a},
      {call.b, call.b_type, call.b_layout, b_row ? call.k : call.n, b_row ? call.n : call.k,
       call.ldb, call.stride_b, call.outer_stride_b, b_row ? e.k : e.n, b_row ? e.n : e.k,
       (call.padded & FACT_GEMM_PADDED_B) != 0, &a.b, &a.ldb, &a.stride_b, &a.outer_stride_b, &p.staged_b},
  };
  for (Side& s : sides) {
    const int64_t al = align_elements(s.type);
    const bool fits = s.prow == s.rows && s.pcol == s.cols &&
                      detail::strides_aligned(s.ld, batch, s.bs, outer, s.os, al);
    if (s.given_padded || fits) continue;
    Copy2D c = detail::stage(s.ptr, s.type, s.rows, s.cols, s.prow, s.pcol, s.ld, batch, s.bs, outer,
                             s.os, base, used);
    *s.out_ptr = c.dst;
    *s.out_ld = c.dst_ld;
    *s.out_bs = c.dst_batch_stride;
    *s.out_os = c.dst_outer_stride;
    *s.staged = true;
    p.copies_in[p.num_copies_in++] = c;
  }

  // Epilogue operands: vectors along N (COLUMN_VECTOR) or M (ROW_VECTOR), M x N matrices in
  // D's layout, tables (never padded).
  const int32_t steps = call.num_steps < 0 ? 0
                        : call.num_steps > FACT_GEMM_MAX_STEPS ? FACT_GEMM_MAX_STEPS
                                                               : call.num_steps;
  for (int32_t i = 0; i < steps; ++i) {
    const FactGemmStep& step = call.steps[i];
    FactGemmStep& out = a.steps[i];
    const StepOperand shape = step_operand(step.kind);
    if (shape == StepOperand::None) continue;
    const int64_t al = align_elements(step.operand_type);
    if (shape == StepOperand::Tables) {
      if (padded_m || padded_n) p.status = FACT_ERR_CANNOT_IMPLEMENT;
      continue;
    }
    Copy2D c;
    if (shape == StepOperand::Matrix) {
      const bool fits = !padded_m && !padded_n &&
                        detail::strides_aligned(step.ld, batch, step.batch_stride, outer,
                                                step.outer_batch_stride, al);
      if (fits) continue;
      c = detail::stage(step.operand, step.operand_type, call.m, call.n, e.m, e.n, step.ld, batch,
                        step.batch_stride, outer, step.outer_batch_stride, base, used);
      out.ld = c.dst_ld;
    } else {  // a vector: N long (COLUMN_VECTOR, a bias) or M long (ROW_VECTOR)
      const bool by_row = shape == StepOperand::RowVector;
      const int64_t length = by_row ? call.m : call.n, padded = by_row ? e.m : e.n;
      const bool fits = padded == length &&
                        detail::strides_aligned(0, batch, step.batch_stride, outer,
                                                step.outer_batch_stride, al);
      if (fits) continue;
      c = detail::stage(step.operand, step.operand_type, 1, length, 1, padded, 0, batch,
                        step.batch_stride, outer, step.outer_batch_stride, base, used);
      out.ld = 0;
    }
    out.operand = c.dst;
    out.batch_stride = c.dst_batch_stride;
    out.outer_batch_stride = c.dst_outer_stride;
    p.copies_in[p.num_copies_in++] = c;
  }

  // D: written into the workspace when the run is padded or D's rows are not TMA-addressable.
  const int64_t halve = fact_gemm_last_step_stores_d(&call) == 2 ? 2 : 1;
  const int64_t d_cols = call.n / halve, d_cols_padded = e.n / halve;
  const int64_t ald = align_elements(call.d_type);
  // D given padded (FACT_GEMM_PADDED_D): its rows hold the padded columns, so a run padded
  // along N (not M: D has no extra rows) writes it in place when its strides are aligned.
  const bool d_given_padded = (call.padded & FACT_GEMM_PADDED_D) != 0 && !padded_m &&
                              call.ldd >= d_cols_padded &&
                              detail::strides_aligned(call.ldd, batch, call.stride_d, outer,
                                                      call.outer_stride_d, ald) &&
                              (batch <= 1 || call.stride_d >= call.m * call.ldd);
  const bool d_fits = d_given_padded ||
                      (!padded_m && !padded_n &&
                       (d_direct || detail::strides_aligned(call.ldd, batch, call.stride_d, outer,
                                                            call.outer_stride_d, ald)));
  if (!d_fits) {
    Copy2D back = detail::stage(nullptr, call.d_type, call.m, d_cols, e.m, d_cols_padded, 0, batch,
                                1, outer, 1, base, used);
    a.d = back.dst;
    a.ldd = back.dst_ld;
    a.stride_d = back.dst_batch_stride;
    a.outer_stride_d = back.dst_outer_stride;
    // The copy back: the staged D's first M x N elements into D as the call lays it out.
    p.out.src = back.dst;
    p.out.dst = call.d;
    p.out.bytes = back.bytes;
    p.out.rows = p.out.dst_rows = call.m;
    p.out.cols = p.out.dst_cols = d_cols;
    p.out.src_ld = back.dst_ld;
    p.out.src_batch_stride = back.dst_batch_stride;
    p.out.src_outer_stride = back.dst_outer_stride;
    p.out.dst_ld = call.ldd;
    p.out.dst_batch_stride = call.stride_d;
    p.out.dst_outer_stride = call.outer_stride_d;
    p.out.batch = back.batch;
    p.out.outer = back.outer;
    p.copy_out = true;
  }
  if (used > 0) used = (used + kRegionAlign - 1) / kRegionAlign * kRegionAlign;
  p.staging_bytes = used;
  return p;
}

}  // namespace fact::gemm::padding
