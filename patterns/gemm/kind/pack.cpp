#include "patterns/gemm/kind/pack.hpp"

#include "patterns/gemm/epilogue/op_table.hpp"

#include <cstddef>
#include <cstring>
#include <stdexcept>

#include "fact/graph/graph_builder.hpp"
#include "patterns/gemm/kind/abi_names.hpp"
#include "patterns/gemm/kind/step_hooks.hpp"

namespace fact::gemm {

namespace {

// True when a step of the epilogue accepts `d` as a view of D's dense M×N rows other than the
// row-major matrix (the step's pattern registers it: step_hooks.hpp).
bool output_view_accepted(const GemmProblem& p, const graph::TensorDesc& d) {
  for (const EpilogueStep& step : p.epilogue) {
    const StepKindHooks* hooks = step_kind_hooks(step.kind);
    if (hooks != nullptr && hooks->accepts_output_view && hooks->accepts_output_view(p, d)) return true;
  }
  return false;
}

// Every integer of the struct through ArgImage::put, so that the image records its int fields
// (a declared dynamic range fits them: docs/dynamic_shapes.md); floats stay as copied.
void put_int_fields(ArgImage& image, const FactGemmArgs& args) {
#define FACT_PUT_FIELD(field) image.put(offsetof(FactGemmArgs, field), args.field)
  image.put_header(offsetof(FactGemmArgs, header), args.header);
  FACT_PUT_FIELD(m);
  FACT_PUT_FIELD(n);
  FACT_PUT_FIELD(k);
  FACT_PUT_FIELD(batch);
  FACT_PUT_FIELD(outer_batch);
  FACT_PUT_FIELD(a_type);
  FACT_PUT_FIELD(b_type);
  FACT_PUT_FIELD(d_type);
  FACT_PUT_FIELD(a_layout);
  FACT_PUT_FIELD(b_layout);
  FACT_PUT_FIELD(padded);
  FACT_PUT_FIELD(lda);
  FACT_PUT_FIELD(stride_a);
  FACT_PUT_FIELD(outer_stride_a);
  FACT_PUT_FIELD(ldb);
  FACT_PUT_FIELD(stride_b);
  FACT_PUT_FIELD(outer_stride_b);
  FACT_PUT_FIELD(ldd);
  FACT_PUT_FIELD(stride_d);
  FACT_PUT_FIELD(outer_stride_d);
  FACT_PUT_FIELD(split_k);
  FACT_PUT_FIELD(sm_count);
  FACT_PUT_FIELD(num_steps);
#undef FACT_PUT_FIELD
  for (int32_t i = 0; i < args.num_steps; ++i) {
    const FactGemmStep& step = args.steps[i];
    const size_t base = offsetof(FactGemmArgs, steps) + static_cast<size_t>(i) * sizeof(FactGemmStep);
#define FACT_PUT_STEP_FIELD(field) image.put(base + offsetof(FactGemmStep, field), step.field)
    FACT_PUT_STEP_FIELD(kind);
    FACT_PUT_STEP_FIELD(activation);
    FACT_PUT_STEP_FIELD(operand_type);
    FACT_PUT_STEP_FIELD(ld);
    FACT_PUT_STEP_FIELD(batch_stride);
    FACT_PUT_STEP_FIELD(outer_batch_stride);
    FACT_PUT_STEP_FIELD(period);
    FACT_PUT_STEP_FIELD(period_stride);
    FACT_PUT_STEP_FIELD(group);
    FACT_PUT_STEP_FIELD(interleaved);
#undef FACT_PUT_STEP_FIELD
  }
}

}  // namespace

static ArgImage pack_padded_d(const GemmProblem& p, const graph::TensorDesc& d);
static ArgImage pack_checked(const GemmProblem& p, ResultSpec result);

FactGemmArgs gemm_args(const GemmProblem& p) {
  FactGemmArgs args;
  std::memset(&args, 0, sizeof(args));
  args.header.abi_version = FACT_ABI_VERSION;
  args.header.kind = fact_kind_id(FACT_GEMM_KIND_NAME);
  args.header.size = sizeof(FactGemmArgs);
  args.m = p.m;
  args.n = p.n;
  args.k = p.k;
  args.batch = p.batch;
  args.outer_batch = p.outer_batch;
  args.a_type = abi_dtype(p.a.dtype);
  args.b_type = abi_dtype(p.b.dtype);
  args.d_type = abi_dtype(p.d.dtype);
  args.a_layout = abi_layout(p.a.layout);
  args.b_layout = abi_layout(p.b.layout);
  args.padded = (p.a.padded ? FACT_GEMM_PADDED_A : 0) | (p.b.padded ? FACT_GEMM_PADDED_B : 0) |
                (p.d.padded ? FACT_GEMM_PADDED_D : 0);
  args.lda = p.a.ld;
  args.stride_a = p.a.batch_stride;
  args.outer_stride_a = p.a.outer_batch_stride;
  args.ldb = p.b.ld;
  args.stride_b = p.b.batch_stride;
  args.outer_stride_b = p.b.outer_batch_stride;
  args.ldd = p.d.ld;
  args.stride_d = p.d.batch_stride;
  args.outer_stride_d = p.d.outer_batch_stride;
  const KernelEpilogue epilogue = kernel_epilogue(p);
  if (epilogue.steps.size() > FACT_GEMM_MAX_STEPS) {
    throw std::invalid_argument("epilogue of " + std::to_string(epilogue.steps.size()) +
                                " steps (a call carries at most " +
                                std::to_string(FACT_GEMM_MAX_STEPS) + ")");
  }
  args.alpha = static_cast<float>(epilogue.alpha);
  args.split_k = 0;
  args.sm_count = 0;
  args.num_steps = static_cast<int32_t>(epilogue.steps.size());
  for (size_t i = 0; i < epilogue.steps.size(); ++i) {
    const EpilogueStep& step = epilogue.steps[i];
    FactGemmStep& out = args.steps[i];
    // Which constants and operand fields a step carries: ops.def's CONSTANTS and OPERAND columns.
    const StepOp& op = step_op(step.kind);
    out.kind = op.abi_id;
    if (op.constants == StepConstantsRead::ACTIVATION) {
      out.activation = abi_activation(step.activation);
      out.p0 = static_cast<float>(step.p0);
      out.p1 = static_cast<float>(step.p1);
    }
    if (op.constants == StepConstantsRead::VALUE || op.constants == StepConstantsRead::VALUE_DEFAULT_ONE) {
      out.value = static_cast<float>(step.value);
    }
    if (reads_operand(step.kind)) {
      out.operand_type = abi_dtype(step.operand_dtype);
      out.ld = step.operand_ld;
      out.batch_stride = step.operand_batch_stride;
      out.outer_batch_stride = step.operand_outer_batch_stride;
    }
    if (op.operand == OperandShape::TABLES) {
      out.period = step.period;
      out.period_stride = step.period_stride;
      out.group = static_cast<int32_t>(step.group);
      out.interleaved = step.interleaved ? 1 : 0;
    }
  }
  return args;
}

ArgImage pack_gemm(const GemmProblem& p, const graph::Graph& captured) {
  for (const auto* operand : {&p.a, &p.b, &p.d}) {
    if (operand->value.empty()) throw std::invalid_argument("a GEMM operand has no graph value");
  }
  if (!captured.has_value(p.d.value)) {
    throw std::invalid_argument("output '" + p.d.value + "' is not a value of the captured graph");
  }
  const graph::TensorDesc& d = captured.value(p.d.value).desc;
  // Dense row-major: [outer_batch][batch][M][N], or (two batch modes whose kernel mode is the
  // outer one in memory) [batch][outer_batch][M][N]; either way every element once. A D given
  // padded (GemmOperand::padded: rows of ld > N elements) is dense over [..][M][ld] instead.
  if (p.d.padded) return pack_padded_d(p, d);
  const int64_t mn = p.m * p.d_cols();
  const bool batch_major = (p.batch == 1 || p.d.batch_stride == mn) &&
                           (p.outer_batch == 1 || p.d.outer_batch_stride == p.batch * mn);
  const bool outer_major = (p.outer_batch == 1 || p.d.outer_batch_stride == mn) &&
                           (p.batch == 1 || p.d.batch_stride == p.outer_batch * mn);
  const bool dense_batches = batch_major || outer_major;
  if (!(d.is_contiguous() || output_view_accepted(p, d)) || d.numel() != p.batches() * mn ||
      p.d.ld != p.d_cols() || !dense_batches) {
    throw std::invalid_argument("output '" + p.d.value + "' " + d.to_string() +
                                " is not a dense row-major " + p.shape_string() +
                                (p.gated() ? " (gated: N/2 columns)" : "") + " tensor");
  }
  return pack_checked(p, ResultSpec{p.d.value, d.shape, d.stride, p.d.dtype, {}});
}

static ArgImage pack_padded_d(const GemmProblem& p, const graph::TensorDesc& d) {
  // The graph's D is a contiguous [.., N] value; the call writes it as the [..., :N] view of a
  // dense [.., ld] allocation (docs/plan.md, a result's "alloc_shape").
  const int64_t cols = p.d_cols();
  const bool fits = !p.gated() && p.outer_batch <= 1 && p.d.layout == Layout::RowMajor &&
                    p.d.offset == 0 && d.is_contiguous() && !d.shape.empty() &&
                    d.shape.back() == cols && d.numel() == p.batches() * p.m * cols &&
                    p.d.ld >= cols && (p.d.ld * graph::dtype_bytes(p.d.dtype)) % 16 == 0 &&
                    (p.batch == 1 || p.d.batch_stride == p.m * p.d.ld);
  if (!fits) {
    throw std::invalid_argument("output '" + p.d.value + "' " + d.to_string() +
                                " cannot be written with padded rows (ld " + std::to_string(p.d.ld) +
                                ") as the [..., :N] view of a dense " + p.shape_string() + " tensor");
  }
  ResultSpec result{p.d.value, d.shape, {}, p.d.dtype, d.shape};
  result.alloc_shape.back() = p.d.ld;
  result.stride = graph::contiguous_strides(result.alloc_shape);
  return pack_checked(p, std::move(result));
}

static ArgImage pack_checked(const GemmProblem& p, ResultSpec result) {
  if (p.gated() && p.n % 2 != 0) {
    throw std::invalid_argument("a gated GEMM pairs columns: N=" + std::to_string(p.n) + " is odd");
  }
  for (size_t i = 0; i + 1 < p.epilogue.size(); ++i) {
    if (step_op(p.epilogue[i].kind).stores_d)
      throw std::invalid_argument("a " + std::string(step_op(p.epilogue[i].kind).name) +
                                  " step must be the epilogue's last");
  }
  for (size_t i = 0; i < p.epilogue.size(); ++i) {
    const StepKindHooks* hooks = step_kind_hooks(p.epilogue[i].kind);
    if (hooks != nullptr && hooks->check_problem) hooks->check_problem(p, i);
  }
  const FactGemmArgs args = gemm_args(p);
  ArgImage image;
  image.bytes.resize(sizeof(FactGemmArgs));
  std::memcpy(image.bytes.data(), &args, sizeof(args));
  put_int_fields(image, args);
  auto slot = [&](size_t offset, PointerSlot::From from, size_t index, int64_t element_offset) {
    image.pointers.push_back({offset, from, index, element_offset});
  };
  slot(offsetof(FactGemmArgs, a), PointerSlot::From::Operand, image.operand(p.a.value, p.a.dtype),
       p.a.offset);
  slot(offsetof(FactGemmArgs, b), PointerSlot::From::Operand, image.operand(p.b.value, p.b.dtype),
       p.b.offset);
  image.results.push_back(std::move(result));
  slot(offsetof(FactGemmArgs, d), PointerSlot::From::Result, 0, p.d.offset);
  const KernelEpilogue epilogue = kernel_epilogue(p);
  for (size_t i = 0; i < epilogue.steps.size(); ++i) {
    const EpilogueStep& step = epilogue.steps[i];
    if (!reads_operand(step.kind)) continue;
    if (step.operand.empty()) {
      throw std::invalid_argument("epilogue step " + std::string(epilogue_kind_name(step.kind)) +
                                  " has no graph value");
    }
    const size_t offset = offsetof(FactGemmArgs, steps) + i * sizeof(FactGemmStep) +
                          offsetof(FactGemmStep, operand);
    slot(offset, PointerSlot::From::Operand, image.operand(step.operand, step.operand_dtype), 0);
    if (step_op(step.kind).operand == OperandShape::TABLES) {
      const size_t offset2 = offsetof(FactGemmArgs, steps) + i * sizeof(FactGemmStep) +
                             offsetof(FactGemmStep, operand2);
      slot(offset2, PointerSlot::From::Operand, image.operand(step.operand2, step.operand_dtype), 0);
    }
  }
  return image;
}

}  // namespace fact::gemm
