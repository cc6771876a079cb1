#include "patterns/gemm/runtime/gemm_verify_case.hpp"

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "fact/runtime/cuda_check.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/padding.hpp"
#include "patterns/gemm/runtime/blas_baselines.hpp"

namespace fact::gemm {

using runtime::element_bytes;
using Kind = EpilogueStep::Kind;

namespace {

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

// The strict-mode accuracy peer: cuBLAS SGEMM's error is "the framework's float32 path".
constexpr const char* kPeer = "cublas";

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

FactGemmArgs GemmComputation::call(const runtime::BufferSet& buffers) const {
  FactGemmArgs args = gemm_args(problem_);
  if (static_cast<size_t>(args.num_steps) != problem_.epilogue.size()) {
    throw std::invalid_argument("the problem's epilogue is not in kernel form");
  }
  args.a = buffers[index_.a];
  args.b = buffers[index_.b];
  args.d = buffers[index_.d];
  for (int i = 0; i < args.num_steps; ++i) {
    args.steps[i].operand = index_.operand[size_t(i)] >= 0 ? buffers[size_t(index_.operand[size_t(i)])] : nullptr;
    args.steps[i].operand2 = index_.operand2[size_t(i)] >= 0 ? buffers[size_t(index_.operand2[size_t(i)])] : nullptr;
  }
  return args;
}

runtime::ArgBytes GemmComputation::arguments(const runtime::BufferSet& buffers) const {
  const FactGemmArgs args = call(buffers);
  runtime::ArgBytes bytes(sizeof args);
  std::memcpy(bytes.data(), &args, sizeof args);
  return bytes;
}

void GemmComputation::reference(runtime::VerifyBackend& backend, const runtime::BufferSet& buffers,
                                const std::vector<double*>& refs) const {
  std::array<const void*, FACT_GEMM_MAX_STEPS> operands{}, operands2{};
  for (size_t i = 0; i < FACT_GEMM_MAX_STEPS; ++i) {
    if (index_.operand[i] >= 0) operands[i] = buffers[size_t(index_.operand[i])];
    if (index_.operand2[i] >= 0) operands2[i] = buffers[size_t(index_.operand2[i])];
  }
  const ReferenceParams params =
      reference_params(problem_, buffers[index_.a], buffers[index_.b], operands, refs.at(0), operands2);
  launch_reference_gemm(params, static_cast<cudaStream_t>(backend.stream_handle(runtime::StreamId::Primary)));
}

GemmVerifyCase::GemmVerifyCase(GemmCase gemm_case, bool with_accuracy_peer, bool vary_bias_multiplier)
    : case_(std::move(gemm_case)), with_accuracy_peer_(with_accuracy_peer), vary_bias_multiplier_(vary_bias_multiplier) {
  const GemmProblem& p = case_.problem;
  auto add = [&](std::string name, DType dtype, int64_t elements) {
    runtime::BufferSpec spec;
    spec.name = std::move(name);
    spec.type = element_type(dtype);
    spec.bytes = bytes_of(dtype, elements);
    buffers_.push_back(std::move(spec));
    return buffers_.size() - 1;
  };
  index_.a = add("A", p.a.dtype, operand_elements(p.m, p.k, p.a.ld, p.a.layout, p.batch, p.a.batch_stride,
                                                  p.outer_batch, p.a.outer_batch_stride));
  // A B given padded (a weight the plan padded once) is read at the padded extents: its buffer
  // holds them (their contents only reach D's columns past N and zeros of a staged A along K).
  const padding::Extents padded = padded_extents(p);
  index_.b = add("B", p.b.dtype, operand_elements(p.b.padded ? padded.k : p.k, p.b.padded ? padded.n : p.n,
                                                  p.b.ld, p.b.layout, p.batch, p.b.batch_stride,
                                                  p.outer_batch, p.b.outer_batch_stride));
  if (p.epilogue.size() > size_t(FACT_GEMM_MAX_STEPS)) {
    throw std::invalid_argument("epilogue of " + std::to_string(p.epilogue.size()) + " steps");
  }
  index_.operand.fill(-1);
  index_.operand2.fill(-1);
  for (size_t i = 0; i < p.epilogue.size(); ++i) {
    const EpilogueStep& step = p.epilogue[i];
    const OperandShape shape = step_op(step.kind).operand;
    const std::string name = "step " + std::to_string(i) + " operand";
    if (shape == OperandShape::COLUMN_VECTOR) {
      index_.operand[i] = int(add(name, step.operand_dtype,
                                  (p.outer_batch - 1) * step.operand_outer_batch_stride +
                                      (p.batch - 1) * step.operand_batch_stride + p.n));
    } else if (shape == OperandShape::ROW_VECTOR) {
      index_.operand[i] = int(add(name, step.operand_dtype,
                                  (p.outer_batch - 1) * step.operand_outer_batch_stride +
                                      (p.batch - 1) * step.operand_batch_stride + p.m));
    } else if (shape == OperandShape::MATRIX) {
      index_.operand[i] = int(add(name, step.operand_dtype,
                                  operand_elements(p.m, p.n, step.operand_ld, p.d.layout, p.batch,
                                                   step.operand_batch_stride, p.outer_batch,
                                                   step.operand_outer_batch_stride)));
    } else if (shape == OperandShape::TABLES) {
      // cos and sin: one [period, group] table per sequence (or one for all, period_stride 0).
      if (step.period <= 0 || p.m % step.period != 0) {
        throw std::invalid_argument("a " + std::string(step_op(step.kind).name) +
                                    " step's period must divide M");
      }
      const int64_t sequences = p.m / step.period;
      const int64_t elements = (sequences - 1) * step.period_stride +
                               (step.period - 1) * step.operand_ld + step.group;
      index_.operand[i] = int(add(name, step.operand_dtype, elements));
      index_.operand2[i] = int(add("step " + std::to_string(i) + " operand2", step.operand_dtype, elements));
    }
  }
  // D is M × d_cols(): N, or N/2 behind a step that pairs product columns into one; compared as [outer][batch][row][col] with the
  // reference's dense order.
  // A D given padded rows (GemmOperand::padded) is written up to its ld in every row, the
  // last one included: its buffer holds the whole [.., M, ld] allocation.
  index_.d = add("D", p.d.dtype, operand_elements(p.m, p.d.padded ? p.d.ld : p.d_cols(), p.d.ld, p.d.layout,
                                                  p.batch, p.d.batch_stride, p.outer_batch,
                                                  p.d.outer_batch_stride));
  runtime::BufferSpec& d = buffers_[index_.d];
  d.output = true;
  d.gaps_writable = p.d.padded;  // the padded run writes every row's padding columns
  const bool row_major = p.d.layout == Layout::RowMajor;
  d.shape = {p.outer_batch, p.batch, p.m, p.d_cols()};
  d.stride = {p.d.outer_batch_stride, p.d.batch_stride, row_major ? p.d.ld : 1, row_major ? 1 : p.d.ld};
}

GemmVerifyCase::~GemmVerifyCase() = default;

std::vector<runtime::BufferSpec> GemmVerifyCase::buffers() const { return buffers_; }

void GemmVerifyCase::fill_inputs(runtime::VerifyBackend& backend, const runtime::BufferSet& buffers,
                                 uint64_t seed, int) {
  const GemmProblem& p = case_.problem;
  const float b_scale = static_cast<float>(std::min(1.0, 3.0 / std::sqrt(double(p.k))));
  // Distinct seeds per operand so that no two operands hold the same values.
  auto fill = [&](size_t buffer, uint64_t stream_of_numbers, float scale) {
    const runtime::BufferSpec& spec = buffers_[buffer];
    backend.fill_uniform(buffers[buffer], spec.type, int64_t(spec.bytes) / element_bytes(spec.type),
                         seed * 16 + stream_of_numbers, scale);
  };
  fill(index_.a, 0, 1.0f);
  fill(index_.b, 1, b_scale);
  for (size_t i = 0; i < p.epilogue.size(); ++i) {
    if (index_.operand[i] >= 0) fill(size_t(index_.operand[i]), 2 + i, 1.0f);
    if (index_.operand2[i] >= 0) fill(size_t(index_.operand2[i]), 2 + FACT_GEMM_MAX_STEPS + i, 1.0f);
  }
}

std::shared_ptr<const runtime::Computation> GemmVerifyCase::computation() const {
  return std::make_shared<GemmComputation>(case_.problem, index_);
}

std::optional<runtime::VariedCheck> GemmVerifyCase::varied() const {
  return runtime::VariedCheck{"scalars", std::make_shared<GemmComputation>(
                                             with_adversarial_constants(case_, vary_bias_multiplier_).problem, index_)};
}

double GemmVerifyCase::tolerance() const { return core::tolerance_for(case_.precision, case_.problem.d.dtype); }

BlasContext& GemmVerifyCase::blas() {
  if (!blas_) blas_ = std::make_unique<BlasContext>();
  return *blas_;
}

runtime::Baseline GemmVerifyCase::make_baseline(const std::string& name, runtime::VerifyBackend&,
                                                const runtime::BufferSet& buffers) {
  Baseline made;
  if (name == "cublas") {
    made = make_cublas_baseline(blas(), case_);
  } else if (name == "cublaslt") {
    made = make_cublaslt_baseline(blas(), case_, GemmComputation(case_.problem, index_).call(buffers));
  } else {
    throw std::invalid_argument("the gemm kind has no baseline '" + name + "'");
  }
  runtime::Baseline b;
  b.name = name;
  b.computes = made.computes.fusion_name();
  b.fused = made.fused;
  b.config = made.config;
  b.computation = std::make_shared<GemmComputation>(made.computes, index_);
  b.state = made.state;
  GemmLauncher launch = made.launch;
  b.call = [launch](const FactCallHeader* args, void*, size_t* workspace_size, void* stream) {
    if (workspace_size) {
      *workspace_size = 0;  // the BlasContext holds the baselines' workspace
      return int(FACT_OK);
    }
    return launch(*reinterpret_cast<const FactGemmArgs*>(args), static_cast<cudaStream_t>(stream));
  };
  return b;
}

std::optional<runtime::AccuracyPeer> GemmVerifyCase::accuracy_peer(runtime::VerifyBackend& backend,
                                                                   const runtime::BufferSet& buffers) {
  if (!with_accuracy_peer_ || case_.precision != PrecisionMode::Strict ||
      case_.problem.a.dtype != DType::Float32) {
    return std::nullopt;
  }
  return runtime::AccuracyPeer{make_baseline(kPeer, backend, buffers), core::kSgemmErrorRatioLimit};
}

}  // namespace fact::gemm
