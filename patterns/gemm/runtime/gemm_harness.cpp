#include "patterns/gemm/runtime/gemm_harness.hpp"

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/kernel_library.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/kind/pack.hpp"

namespace fact::gemm {

using runtime::element_bytes;
using runtime::fact_status_name;
using Kind = EpilogueStep::Kind;

namespace {

// Layout of the scratch buffer: the comparison sums, then two counters.
struct Scratch {
  ErrorSums sums;
  unsigned long long checksum;
  unsigned long long guard_changes;
};

MatrixView view_of(const void* data, DType dtype, Layout layout, int64_t ld, int64_t batch_stride,
                   int64_t outer_stride) {
  MatrixView v;
  v.data = data;
  v.type = element_type(dtype);
  v.row_stride = layout == Layout::RowMajor ? ld : 1;
  v.col_stride = layout == Layout::RowMajor ? 1 : ld;
  v.batch_stride = batch_stride;
  v.outer_stride = outer_stride;
  return v;
}

size_t bytes_of(DType dtype, int64_t elements) {
  return static_cast<size_t>(elements) * static_cast<size_t>(element_bytes(element_type(dtype)));
}

// Extent of a batched operand: the last batch's offset (in both batch modes) plus one matrix.
int64_t operand_elements(int64_t rows, int64_t cols, int64_t ld, Layout layout, int64_t batch,
                         int64_t batch_stride, int64_t outer_batch, int64_t outer_stride) {
  const int64_t matrix = layout == Layout::RowMajor ? (rows - 1) * ld + cols : (cols - 1) * ld + rows;
  return (outer_batch - 1) * outer_stride + (batch - 1) * batch_stride + matrix;
}

std::string format_number(double v) {
  std::ostringstream out;
  out.precision(3);
  out << v;
  return out.str();
}

}  // namespace

ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ElementType::F32;
    case DType::BFloat16: return ElementType::BF16;
    case DType::Float16: return ElementType::F16;
    default:
      throw std::invalid_argument("dtype " + std::string(graph::dtype_name(dtype)) +
                                  " has no device storage type in the runner");
  }
}

ReferenceParams reference_params(const GemmProblem& p, const void* a, const void* b,
                                 const std::array<const void*, FACT_GEMM_MAX_STEPS>& operands,
                                 double* out,
                                 const std::array<const void*, FACT_GEMM_MAX_STEPS>& operands2) {
  ReferenceParams r;
  r.m = p.m;
  r.n = p.n;
  r.k = p.k;
  r.batch = p.batch;
  r.outer_batch = p.outer_batch;
  r.a = view_of(a, p.a.dtype, p.a.layout, p.a.ld, p.a.batch_stride, p.a.outer_batch_stride);
  r.b = view_of(b, p.b.dtype, p.b.layout, p.b.ld, p.b.batch_stride, p.b.outer_batch_stride);
  // The constants as the call carries them: FactGemmArgs holds float32 (a reference in the
  // problem's double constants would differ from what every kernel computes by their rounding).
  r.alpha = static_cast<float>(p.alpha);
  r.out = out;
  if (p.epilogue.size() > static_cast<size_t>(kMaxReferenceSteps)) {
    throw std::invalid_argument("epilogue has more than " + std::to_string(kMaxReferenceSteps) +
                                " steps");
  }
  for (size_t i = 0; i < p.epilogue.size(); ++i) {
    const EpilogueStep& step = p.epilogue[i];
    RefEpilogueStep& s = r.steps[r.step_count++];
    const StepOp& op = step_op(step.kind);
    s.kind = op.abi_id;
    s.activation = activation_op(step.activation).abi_id;
    s.value = static_cast<float>(step.value);
    s.p0 = static_cast<float>(step.p0);
    s.p1 = static_cast<float>(step.p1);
    if (op.operand == OperandShape::COLUMN_VECTOR) {
      s.operand.data = operands[i];
      s.operand.type = element_type(step.operand_dtype);
      s.operand.row_stride = 0;  // bias[n]: the same for every row
      s.operand.col_stride = 1;
      s.operand.batch_stride = step.operand_batch_stride;
      s.operand.outer_stride = step.operand_outer_batch_stride;
    }
    if (op.operand == OperandShape::ROW_VECTOR) {
      s.operand.data = operands[i];
      s.operand.type = element_type(step.operand_dtype);
      s.operand.row_stride = 1;  // scale[m]: the same for every column
      s.operand.col_stride = 0;
      s.operand.batch_stride = step.operand_batch_stride;
      s.operand.outer_stride = step.operand_outer_batch_stride;
    }
    if (op.operand == OperandShape::MATRIX) {
      s.operand = view_of(operands[i], step.operand_dtype, p.d.layout, step.operand_ld,
                          step.operand_batch_stride, step.operand_outer_batch_stride);
    }
    if (op.operand == OperandShape::TABLES) {
      // The tables [sequence][position][column]: row_stride = positions, batch_stride =
      // sequences (the reference kernel splits the row itself).
      s.operand = view_of(operands[i], step.operand_dtype, Layout::RowMajor, step.operand_ld,
                          step.period_stride, 0);
      s.operand2 = view_of(operands2[i], step.operand_dtype, Layout::RowMajor, step.operand_ld,
                           step.period_stride, 0);
      s.period = step.period;
      s.group = step.group;
      s.interleaved = step.interleaved;
    }
  }
  return r;
}

std::string reference_key(const GemmProblem& p) {
  std::ostringstream key;
  key.precision(17);
  key << p.alpha;
  for (const EpilogueStep& s : p.epilogue) {
    key << '|' << static_cast<int>(s.kind) << ',' << static_cast<int>(s.activation) << ','
        << s.value << ',' << s.p0 << ',' << s.p1 << ',' << static_cast<int>(s.operand_dtype) << ','
        << s.operand_ld << ',' << s.operand_batch_stride << ',' << s.operand_outer_batch_stride;
    if (step_op(s.kind).operand == OperandShape::TABLES) {
      key << ',' << step_op(s.kind).name << ' ' << s.period << ',' << s.period_stride << ','
          << s.group << ',' << s.interleaved;
    }
  }
  key << "|batches " << p.batch << 'x' << p.outer_batch;
  return key.str();
}

GemmHarness::GemmHarness(GemmCase gemm_case) : case_(std::move(gemm_case)) {
  const GemmProblem& p = case_.problem;
  a_ = DeviceBuffer(bytes_of(p.a.dtype,
                            operand_elements(p.m, p.k, p.a.ld, p.a.layout, p.batch, p.a.batch_stride,
                                             p.outer_batch, p.a.outer_batch_stride)));
  b_ = DeviceBuffer(bytes_of(p.b.dtype,
                            operand_elements(p.k, p.n, p.b.ld, p.b.layout, p.batch, p.b.batch_stride,
                                             p.outer_batch, p.b.outer_batch_stride)));
  // D is M × d_cols(): N, or N/2 behind a step that pairs product columns into one.
  d_elements_ = operand_elements(p.m, p.d_cols(), p.d.ld, p.d.layout, p.batch, p.d.batch_stride,
                                 p.outer_batch, p.d.outer_batch_stride);
  if (p.epilogue.size() > operands_.size()) {
    throw std::invalid_argument("epilogue of " + std::to_string(p.epilogue.size()) + " steps");
  }
  for (size_t i = 0; i < p.epilogue.size(); ++i) {
    const EpilogueStep& step = p.epilogue[i];
    const OperandShape shape = step_op(step.kind).operand;
    if (shape == OperandShape::COLUMN_VECTOR) {
      operands_[i] = DeviceBuffer(bytes_of(
          step.operand_dtype, (p.outer_batch - 1) * step.operand_outer_batch_stride +
                                  (p.batch - 1) * step.operand_batch_stride + p.n));
    } else if (shape == OperandShape::ROW_VECTOR) {
      operands_[i] = DeviceBuffer(bytes_of(
          step.operand_dtype, (p.outer_batch - 1) * step.operand_outer_batch_stride +
                                  (p.batch - 1) * step.operand_batch_stride + p.m));
    } else if (shape == OperandShape::MATRIX) {
      operands_[i] = DeviceBuffer(bytes_of(
          step.operand_dtype,
          operand_elements(p.m, p.n, step.operand_ld, p.d.layout, p.batch, step.operand_batch_stride,
                           p.outer_batch, step.operand_outer_batch_stride)));
    } else if (shape == OperandShape::TABLES) {
      // cos and sin: one [period, group] table per sequence (or one for all, period_stride 0).
      if (step.period <= 0 || p.m % step.period != 0) {
        throw std::invalid_argument("a " + std::string(step_op(step.kind).name) +
                                    " step's period must divide M");
      }
      const int64_t sequences = p.m / step.period;
      const int64_t elements = (sequences - 1) * step.period_stride +
                               (step.period - 1) * step.operand_ld + step.group;
      operands_[i] = DeviceBuffer(bytes_of(step.operand_dtype, elements));
      operands2_[i] = DeviceBuffer(bytes_of(step.operand_dtype, elements));
    }
  }
  const int d_bytes = element_bytes(element_type(p.d.dtype));
  guard_elements_ = static_cast<int64_t>(kGuardBytes) / d_bytes;
  d_storage_ = DeviceBuffer(bytes_of(p.d.dtype, d_elements_) + 2 * kGuardBytes);
  d_ = static_cast<char*>(d_storage_.data()) + kGuardBytes;
  reference_ = DeviceBuffer(static_cast<size_t>(p.m * p.n * p.batches()) * sizeof(double));
  scratch_ = DeviceBuffer(sizeof(Scratch));
}

void GemmHarness::randomize_inputs(uint64_t seed) {
  const GemmProblem& p = case_.problem;
  const cudaStream_t s = primary_.get();
  const float b_scale = static_cast<float>(std::min(1.0, 3.0 / std::sqrt(double(p.k))));
  // Distinct seeds per operand so that no two operands hold the same values.
  auto fill = [&](const DeviceBuffer& buffer, DType dtype, uint64_t stream_of_numbers, float scale) {
    const ElementType type = element_type(dtype);
    runtime::launch_fill_uniform(buffer.data(), type,
                                 static_cast<int64_t>(buffer.bytes() / element_bytes(type)),
                                 seed * 16 + stream_of_numbers, scale, s);
  };
  fill(a_, p.a.dtype, 0, 1.0f);
  fill(b_, p.b.dtype, 1, b_scale);
  for (size_t i = 0; i < p.epilogue.size(); ++i) {
    if (operands_[i].data()) fill(operands_[i], p.epilogue[i].operand_dtype, 2 + i, 1.0f);
    if (operands2_[i].data()) fill(operands2_[i], p.epilogue[i].operand_dtype, 2 + FACT_GEMM_MAX_STEPS + i, 1.0f);
  }
  FACT_CUDA_CHECK(cudaStreamSynchronize(s));
  seed_ = seed;
  reference_key_.reset();
}

std::array<const void*, FACT_GEMM_MAX_STEPS> GemmHarness::operand_pointers() const {
  std::array<const void*, FACT_GEMM_MAX_STEPS> pointers{};
  for (size_t i = 0; i < operands_.size(); ++i) pointers[i] = operands_[i].data();
  return pointers;
}

FactGemmArgs GemmHarness::abi_args(const GemmProblem& problem) const {
  FactGemmArgs args = gemm_args(problem);
  if (static_cast<size_t>(args.num_steps) != problem.epilogue.size()) {
    throw std::invalid_argument("the problem's epilogue is not in kernel form");
  }
  args.a = a_.data();
  args.b = b_.data();
  args.d = d_;
  for (int i = 0; i < args.num_steps; ++i) {
    args.steps[i].operand = operands_[i].data();
    args.steps[i].operand2 = operands2_[i].data();
  }
  return args;
}

void GemmHarness::ensure_reference(const GemmProblem& problem, cudaStream_t stream) {
  const std::string key = reference_key(problem);
  if (reference_key_ && *reference_key_ == key) return;
  reference_key_.reset();
  std::array<const void*, FACT_GEMM_MAX_STEPS> sin_tables{};
  for (size_t i = 0; i < operands2_.size(); ++i) sin_tables[i] = operands2_[i].data();
  const ReferenceParams params = reference_params(problem, a_.data(), b_.data(), operand_pointers(),
                                                  reference_.as<double>(), sin_tables);
  launch_reference_gemm(params, stream);
  FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
  reference_key_ = key;
}

uint64_t GemmHarness::input_checksum(cudaStream_t stream) {
  Scratch* scratch = scratch_.as<Scratch>();
  // One sum per buffer, folded on the host in a fixed order.
  uint64_t combined = 0;
  int index = 0;
  std::vector<const DeviceBuffer*> buffers = {&a_, &b_};
  for (const DeviceBuffer& operand : operands_) buffers.push_back(&operand);
  for (const DeviceBuffer& operand : operands2_) buffers.push_back(&operand);
  for (const DeviceBuffer* buffer : buffers) {
    ++index;
    if (!buffer->data()) continue;
    const uint64_t sum = runtime::checksum_of(buffer->data(), buffer->bytes(), &scratch->checksum, stream);
    combined = combined * 0x100000001B3ull + sum + static_cast<uint64_t>(index);
  }
  return combined;
}

int64_t GemmHarness::guard_changes(cudaStream_t stream) {
  Scratch* scratch = scratch_.as<Scratch>();
  const ElementType type = element_type(case_.problem.d.dtype);
  FACT_CUDA_CHECK(cudaMemsetAsync(&scratch->guard_changes, 0, sizeof(unsigned long long), stream));
  runtime::launch_count_not_poison(d_storage_.data(), type, guard_elements_, &scratch->guard_changes, stream);
  runtime::launch_count_not_poison(static_cast<char*>(d_) + bytes_of(case_.problem.d.dtype, d_elements_),
                          type, guard_elements_, &scratch->guard_changes, stream);
  unsigned long long changes = 0;
  FACT_CUDA_CHECK(cudaMemcpyAsync(&changes, &scratch->guard_changes, sizeof changes,
                                  cudaMemcpyDeviceToHost, stream));
  FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return static_cast<int64_t>(changes);
}

CheckResult GemmHarness::check(const std::string& name, const GemmLauncher& launcher,
                               const GemmProblem& problem, cudaStream_t stream, double tolerance,
                               int* status) {
  const GemmProblem& p = case_.problem;
  CheckResult result;
  result.name = name;
  result.seed = seed_;
  result.tolerance = tolerance;
  result.elements = p.m * p.d_cols() * p.batches();
  result.stream = stream == secondary_.get() ? "secondary" : "primary";
  *status = FACT_OK;

  ensure_reference(problem, stream);
  const uint64_t inputs_before = input_checksum(stream);
  const ElementType d_type = element_type(p.d.dtype);
  if (stream == secondary_.get()) runtime::launch_spin_kernel(kStreamCheckDelayNs, stream);
  runtime::launch_fill_poison(d_storage_.data(), d_type,
                     static_cast<int64_t>(d_storage_.bytes()) / element_bytes(d_type), stream);

  const FactGemmArgs args = abi_args(problem);
  *status = launcher(args, stream);
  if (*status != FACT_OK) {
    FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
    result.failure = "returned " + fact_status_name(*status);
    return result;
  }
  FACT_CUDA_CHECK(cudaGetLastError());
  FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const uint64_t inputs_after = input_checksum(stream);
  const int64_t guard_changed = guard_changes(stream);
  Scratch* scratch = scratch_.as<Scratch>();
  FACT_CUDA_CHECK(cudaMemsetAsync(&scratch->sums, 0, sizeof(ErrorSums), stream));
  const MatrixView out =
      view_of(d_, p.d.dtype, p.d.layout, p.d.ld, p.d.batch_stride, p.d.outer_batch_stride);
  launch_compare(out, reference_.as<double>(), p.m, p.d_cols(), p.batch, p.outer_batch, &scratch->sums,
                 stream);
  FACT_CUDA_CHECK(cudaMemcpyAsync(&last_sums_, &scratch->sums, sizeof(ErrorSums),
                                  cudaMemcpyDeviceToHost, stream));
  FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
  // Work the launcher queued elsewhere (a kernel ignoring `stream`) must not leak into the
  // next check.
  FACT_CUDA_CHECK(cudaDeviceSynchronize());

  result.inputs_unchanged = inputs_after == inputs_before;
  result.out_of_bounds = guard_changed;

  const ErrorSums& sums = last_sums_;
  result.unwritten = static_cast<int64_t>(sums.unwritten);
  result.nonfinite = static_cast<int64_t>(sums.nonfinite);
  result.ref_norm = std::sqrt(sums.sum_sq_ref);
  result.max_abs_err = sums.max_abs_diff;
  if (sums.ref_nonfinite != 0) {
    result.failure = "the float64 reference has " + std::to_string(sums.ref_nonfinite) +
                     " non-finite elements (inputs or scalars out of range)";
    return result;
  }
  if (result.unwritten == 0 && result.nonfinite == 0) {
    const double diff = std::sqrt(sums.sum_sq_diff);
    result.rel_err = result.ref_norm > 0.0 ? diff / result.ref_norm : diff;
  }

  if (result.unwritten != 0) {
    result.failure = std::to_string(result.unwritten) + " of " + std::to_string(result.elements) +
                     " output elements not written";
  } else if (result.nonfinite != 0) {
    result.failure = std::to_string(result.nonfinite) + " output elements are NaN or Inf";
  } else if (result.out_of_bounds != 0) {
    result.failure = std::to_string(result.out_of_bounds) +
                     " elements written outside D (guard bands changed)";
  } else if (!result.inputs_unchanged) {
    result.failure = "the kernel modified its inputs";
  } else if (!(*result.rel_err <= tolerance)) {
    result.failure = "relative error " + format_number(*result.rel_err) + " above tolerance " +
                     format_number(tolerance);
  }
  result.passed = result.failure.empty();
  return result;
}

std::vector<unsigned char> GemmHarness::download_output() const {
  std::vector<unsigned char> host(bytes_of(case_.problem.d.dtype, d_elements_));
  FACT_CUDA_CHECK(cudaMemcpy(host.data(), d_, host.size(), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace fact::gemm
