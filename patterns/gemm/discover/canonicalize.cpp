// fact.gemm: matmul-family ATen ops with the view-like ops around them (see canonicalize.hpp).
#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>

#include "fact/discover/canonicalize.hpp"
#include "patterns/gemm/discover/canonicalize.hpp"
#include "patterns/gemm/discover/chain.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "fact/discover/rule.hpp"
#include "fact/discover/strided_view.hpp"
#include "fact/discover/graph_rewrite.hpp"

namespace fact::gemm {

namespace {

using namespace fact::discover;  // NOLINT: the rule DSL and view helpers

using graph::Arg;
using graph::Graph;
using graph::Node;
using graph::ValueId;
using nlohmann::json;

const std::vector<std::string> kMatmulOps{"aten.linear", "aten.addmm", "aten.baddbmm",
                                          "aten.mm",     "aten.bmm",   "aten.matmul",
                                          "aten.einsum"};

// A two-operand einsum that is a (batched) matrix product: the output's indices are batch
// indices, then M indices (A's only), then N indices (B's only); K indices are in A and B and
// not in the output. "bhqd,bhkd->bhqk": batch [b, h], M [q], N [k], K [d].
struct EinsumPlan {
  std::string a, b, out;                      // index letters per dim
  std::string batch, m, n, k;                 // letters of each role, in output (K: A's) order
  std::string equation;
};

std::optional<EinsumPlan> plan_einsum(std::string equation) {
  equation.erase(std::remove(equation.begin(), equation.end(), ' '), equation.end());
  const auto arrow = equation.find("->");
  const auto comma = equation.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow) return std::nullopt;
  EinsumPlan p;
  p.equation = equation;
  p.a = equation.substr(0, comma);
  p.b = equation.substr(comma + 1, arrow - comma - 1);
  p.out = equation.substr(arrow + 2);
  if (p.b.find(',') != std::string::npos) return std::nullopt;  // three or more operands
  auto letters_ok = [](const std::string& s) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (!std::isalpha(static_cast<unsigned char>(s[i]))) return false;  // "...", digits
      if (s.find(s[i], i + 1) != std::string::npos) return false;      // a diagonal
    }
    return true;
  };
  if (!letters_ok(p.a) || !letters_ok(p.b) || !letters_ok(p.out)) return std::nullopt;
  auto in = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  for (char c : p.out) {
    if (!in(p.a, c) && !in(p.b, c)) return std::nullopt;
  }
  for (char c : p.a) {
    if (in(p.b, c) && !in(p.out, c)) p.k += c;
    if (!in(p.b, c) && !in(p.out, c)) return std::nullopt;  // a sum over one operand
  }
  for (char c : p.b) {
    if (!in(p.a, c) && !in(p.out, c)) return std::nullopt;
  }
  // The output ends in B-only (N) indices, after A-only (M) ones; the rest are batch indices.
  size_t end = p.out.size();
  while (end > 0 && in(p.b, p.out[end - 1]) && !in(p.a, p.out[end - 1])) --end;
  p.n = p.out.substr(end);
  size_t mid = end;
  while (mid > 0 && in(p.a, p.out[mid - 1]) && !in(p.b, p.out[mid - 1])) --mid;
  p.m = p.out.substr(mid, end - mid);
  p.batch = p.out.substr(0, mid);
  if (p.m.empty() || p.n.empty() || p.k.empty()) return std::nullopt;  // no matrix product
  return p;
}

// The operand (letters `letters`, viewed as `v`) as the product reads it: its batch dims in
// the plan's order (size 1 / absent: broadcast, stride 0), then the `rows` letters merged into
// one dim, then the `cols` letters merged. `sizes`: every letter's size. nullopt with `why` set
// when a merged group does not collapse into one stride (the product would need a copy).
std::optional<StridedView> einsum_view(const StridedView& v, const std::string& letters,
                                       const EinsumPlan& plan, const std::string& rows,
                                       const std::string& cols,
                                       const std::map<char, int64_t>& sizes, std::string* why) {
  if (v.rank() != letters.size()) return std::nullopt;
  StridedView out;
  for (char c : plan.batch) {
    const auto at = letters.find(c);
    out.shape.push_back(sizes.at(c));
    out.stride.push_back(at == std::string::npos || v.shape[at] == 1 ? 0 : v.stride[at]);
  }
  for (const std::string* group : {&rows, &cols}) {
    StridedView merged;
    int64_t size = 1;
    for (char c : *group) {
      const auto at = letters.find(c);
      merged.shape.push_back(v.shape[at]);
      merged.stride.push_back(v.stride[at]);
      size *= v.shape[at];
    }
    const auto stride = collapse_dims(merged, 0, merged.rank());
    if (!stride) {
      if (why != nullptr && why->empty()) {
        *why = "einsum '" + plan.equation + "': dims [" + std::string(group->begin(), group->end()) +
               "] of " + shape_text(v.shape) + " with strides " + shape_text(v.stride) +
               " do not collapse into one " + (group == &rows ? "row" : "column") +
               " stride (the product needs a copy)";
      }
      return std::nullopt;
    }
    out.shape.push_back(size);
    out.stride.push_back(size == 1 ? 1 : *stride);
  }
  return out;
}

// The letters' sizes from both operands (a batch letter of size 1 in one broadcasts); nullopt
// when they disagree.
std::optional<std::map<char, int64_t>> einsum_sizes(const EinsumPlan& plan, const StridedView& a,
                                                    const StridedView& b) {
  if (a.rank() != plan.a.size() || b.rank() != plan.b.size()) return std::nullopt;
  std::map<char, int64_t> sizes;
  auto add = [&](const std::string& letters, const StridedView& v) {
    for (size_t i = 0; i < letters.size(); ++i) {
      auto [it, fresh] = sizes.emplace(letters[i], v.shape[i]);
      if (fresh || it->second == v.shape[i] || v.shape[i] == 1) continue;
      if (it->second != 1 || plan.batch.find(letters[i]) == std::string::npos) return false;
      it->second = v.shape[i];
    }
    return true;
  };
  if (!add(plan.a, a) || !add(plan.b, b)) return std::nullopt;
  for (char c : plan.k) {
    if (a.shape[plan.a.find(c)] != b.shape[plan.b.find(c)]) return std::nullopt;
  }
  return sizes;
}

struct MatmulCall {
  ValueId a, b;
  std::optional<ValueId> bias;
  double alpha = 1.0, beta = 1.0;
  bool b_is_weight = false;  // aten.linear: B = weightᵀ
  std::optional<EinsumPlan> einsum;
};

std::optional<ValueId> tensor_argument(const Node& n, size_t index, const char* name) {
  const Arg* arg = detail::argument(n, index, name);
  if (arg == nullptr || arg->kind != Arg::Kind::Tensor) return std::nullopt;
  return arg->tensor;
}

std::optional<double> scalar_argument(const Node& n, size_t index, const char* name) {
  const Arg* arg = detail::argument(n, index, name);
  if (arg == nullptr || (arg->kind == Arg::Kind::Constant && arg->constant.is_null())) return 1.0;
  return detail::number_constant(*arg);
}

std::optional<MatmulCall> read_call(const Node& n) {
  MatmulCall call;
  std::optional<ValueId> a, b;
  if (target_is(n, "aten.linear")) {
    a = tensor_argument(n, 0, "input");
    b = tensor_argument(n, 1, "weight");
    call.bias = tensor_argument(n, 2, "bias");
    call.b_is_weight = true;
  } else if (target_in(n, {"aten.addmm", "aten.baddbmm"})) {
    const bool batched = target_is(n, "aten.baddbmm");
    call.bias = tensor_argument(n, 0, "self");
    a = tensor_argument(n, 1, batched ? "batch1" : "mat1");
    b = tensor_argument(n, 2, batched ? "batch2" : "mat2");
    auto beta = scalar_argument(n, 3, "beta");
    auto alpha = scalar_argument(n, 4, "alpha");
    if (!beta || !alpha) return std::nullopt;
    call.beta = *beta;
    call.alpha = *alpha;
  } else if (target_in(n, {"aten.mm", "aten.bmm", "aten.matmul"})) {
    a = tensor_argument(n, 0, "self");
    b = tensor_argument(n, 1, target_is(n, "aten.matmul") ? "other" : "mat2");
  } else if (target_is(n, "aten.einsum")) {
    const Arg* equation = detail::argument(n, 0, "equation");
    const Arg* operands = detail::argument(n, 1, "tensors");
    if (equation == nullptr || operands == nullptr || !equation->constant.is_string() ||
        operands->kind != Arg::Kind::TensorList || operands->tensors.size() != 2 ||
        !operands->tensors[0] || !operands->tensors[1]) {
      return std::nullopt;
    }
    call.einsum = plan_einsum(equation->constant.get<std::string>());
    if (!call.einsum) return std::nullopt;
    a = *operands->tensors[0];
    b = *operands->tensors[1];
  }
  if (!a || !b) return std::nullopt;
  call.a = *a;
  call.b = *b;
  return call;
}

struct MatrixLayout {
  Layout layout;
  int64_t ld;
};

// How a rows×cols matrix with these strides is read: row-major (cols contiguous) or
// column-major (rows contiguous), with its leading dimension.
std::optional<MatrixLayout> matrix_layout(int64_t rows, int64_t cols, int64_t row_stride,
                                          int64_t col_stride) {
  if (col_stride == 1 || cols == 1) {
    const int64_t ld = leading_dimension(rows, cols, row_stride);
    if (ld >= cols && ld > 0) return MatrixLayout{Layout::RowMajor, ld};
  }
  if (row_stride == 1 || rows == 1) {
    const int64_t ld = leading_dimension(cols, rows, col_stride);
    if (ld >= rows && ld > 0) return MatrixLayout{Layout::ColumnMajor, ld};
  }
  return std::nullopt;
}

std::optional<MatrixLayout> trailing_layout(const StridedView& v) {
  const size_t r = v.rank();
  return matrix_layout(v.shape[r - 2], v.shape[r - 1], v.stride[r - 2], v.stride[r - 1]);
}

StridedView transpose_last_two(StridedView v) {
  const size_t r = v.rank();
  std::swap(v.shape[r - 2], v.shape[r - 1]);
  std::swap(v.stride[r - 2], v.stride[r - 1]);
  return v;
}

std::string describe(const char* name, const StridedView& v) {
  return std::string("operand ") + name + " " + shape_text(v.shape) + " with strides " +
         shape_text(v.stride);
}

struct OperandForm {
  Layout layout = Layout::RowMajor;
  int64_t ld = 0;
  int64_t batch_stride = 0;
  int64_t outer_batch_stride = 0;
};

struct GemmForm {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t outer_batch = 1;  // a second batch mode (two_batch_modes)
  std::vector<int64_t> batch_shape;
  bool folded_m = false;
  OperandForm a, b;
  int64_t d_batch_stride = 0, d_outer_batch_stride = 0;  // D: dense [batch dims][M][N]
  std::vector<int> dim_modes;  // per batch dim: 0 kernel batch, 1 outer, -1 size 1 / folded
  std::string unsupported;
};

// Runs of consecutive batch dims [first, last) of `v` that one stride walks (dims of size 1
// ignored): 0 for none, 1 when they collapse (collapse_dims), 2 for two batch modes, ...
size_t batch_runs(const StridedView& v, size_t first, size_t last) {
  size_t runs = 0;
  int64_t run_stride = 0, run_size = 0;  // innermost stride and total size of the open run
  for (size_t i = last; i-- > first;) {
    if (v.shape[i] == 1) continue;
    if (runs > 0 && v.stride[i] == run_stride * run_size) {
      run_size *= v.shape[i];
      continue;
    }
    ++runs;
    run_stride = v.stride[i];
    run_size = v.shape[i];
  }
  return runs;
}

// Two batch modes: the batch dims (aligned for A and B, broadcast dims at stride 0) grouped
// into runs of consecutive dims that A, B and the dense output D each walk with one stride.
// Two runs become the kernel's batch mode (the larger run; the inner one on a tie) and an
// outer mode the kernel's entry loops over (gemm_abi.h). nullopt for more than two runs.
struct BatchModes {
  int64_t batch = 1, outer = 1;
  OperandForm a, b;  // batch strides only
  int64_t d = 0, d_outer = 0;
  std::vector<int> dim_modes;  // per batch dim: 0 batch, 1 outer, -1 size 1
};
std::optional<BatchModes> two_batch_modes(const StridedView& aa, const StridedView& ba, size_t nb,
                                          int64_t mn) {
  struct Run {
    int64_t size, a, b, d;  // total size; strides of the run's innermost dim
  };
  std::vector<Run> runs;  // innermost first
  std::vector<int> run_of(nb, -1);
  int64_t d_stride = mn;
  for (size_t i = nb; i-- > 0;) {
    const int64_t size = aa.shape[i];
    const int64_t d = d_stride;
    d_stride *= size;
    if (size == 1) continue;
    if (!runs.empty()) {
      Run& run = runs.back();
      if (aa.stride[i] == run.a * run.size && ba.stride[i] == run.b * run.size) {
        run.size *= size;  // D is dense: its strides always chain
        run_of[i] = int(runs.size()) - 1;
        continue;
      }
    }
    runs.push_back({size, aa.stride[i], ba.stride[i], d});
    run_of[i] = int(runs.size()) - 1;
  }
  if (runs.size() != 2) return std::nullopt;
  const int kernel_run = runs[0].size >= runs[1].size ? 0 : 1;
  const Run& inner = runs[kernel_run];
  const Run& outer = runs[1 - kernel_run];
  BatchModes modes;
  for (int r : run_of) modes.dim_modes.push_back(r < 0 ? -1 : (r == kernel_run ? 0 : 1));
  modes.batch = inner.size;
  modes.outer = outer.size;
  modes.a.batch_stride = inner.a;
  modes.a.outer_batch_stride = outer.a;
  modes.b.batch_stride = inner.b;
  modes.b.outer_batch_stride = outer.b;
  modes.d = inner.d;
  modes.d_outer = outer.d;
  return modes;
}

// A (…×M×K) times B (…×K×N), batch dims broadcast as torch.matmul does. nullopt when the
// shapes do not multiply; `unsupported` set when they do but cannot be read in place.
std::optional<GemmForm> gemm_form(const StridedView& a, const StridedView& b) {
  if (a.rank() < 2 || b.rank() < 2) return std::nullopt;
  const size_t ra = a.rank(), rb = b.rank();
  GemmForm form;
  form.m = a.shape[ra - 2];
  form.k = a.shape[ra - 1];
  form.n = b.shape[rb - 1];
  if (b.shape[rb - 2] != form.k) return std::nullopt;
  const size_t nb = std::max(ra, rb) - 2;
  StridedView aa, ba;  // aligned to the broadcast batch dims
  for (size_t i = 0; i < nb; ++i) {
    const int64_t ia = static_cast<int64_t>(i) - static_cast<int64_t>(nb - (ra - 2));
    const int64_t ib = static_cast<int64_t>(i) - static_cast<int64_t>(nb - (rb - 2));
    int64_t size_a = ia >= 0 ? a.shape[ia] : 1, stride_a = ia >= 0 ? a.stride[ia] : 0;
    int64_t size_b = ib >= 0 ? b.shape[ib] : 1, stride_b = ib >= 0 ? b.stride[ib] : 0;
    if (size_a != size_b && size_a != 1 && size_b != 1) return std::nullopt;
    const int64_t size = std::max(size_a, size_b);
    if (size_a == 1) stride_a = 0;
    if (size_b == 1) stride_b = 0;
    form.batch_shape.push_back(size);
    aa.shape.push_back(size);
    aa.stride.push_back(stride_a);
    ba.shape.push_back(size);
    ba.stride.push_back(stride_b);
  }
  for (size_t i = ra - 2; i < ra; ++i) {
    aa.shape.push_back(a.shape[i]);
    aa.stride.push_back(a.stride[i]);
  }
  for (size_t i = rb - 2; i < rb; ++i) {
    ba.shape.push_back(b.shape[i]);
    ba.stride.push_back(b.stride[i]);
  }
  const int64_t batch = std::accumulate(form.batch_shape.begin(), form.batch_shape.end(),
                                        int64_t{1}, std::multiplies<>());
  const auto b_batch = collapse_dims(ba, 0, nb);
  const auto b_layout = trailing_layout(ba);
  if (!b_layout) {
    form.unsupported = describe("B", b) + " has no unit stride in its last two dims (not " +
                       "expressible with a leading dimension)";
  } else {
    form.b = {b_layout->layout, b_layout->ld, b_batch.value_or(0)};
  }

  // A weight shared by every batch: fold the batch dims of A into M when they collapse.
  if (batch > 1 && b_batch && *b_batch == 0) {
    const auto rows = collapse_dims(aa, 0, nb + 1);
    if (rows) {
      const auto layout = matrix_layout(batch * form.m, form.k, *rows, aa.stride[nb + 1]);
      if (layout) {
        form.folded_m = true;
        form.m *= batch;
        form.batch = 1;
        form.dim_modes.assign(nb, -1);
        form.a = {layout->layout, layout->ld, 0};
        form.b.batch_stride = 0;
        return form;
      }
    }
  }
  form.batch = batch;
  form.d_batch_stride = batch > 1 ? form.m * form.n : 0;
  for (int64_t size : form.batch_shape) form.dim_modes.push_back(size == 1 ? -1 : 0);
  const auto a_batch = collapse_dims(aa, 0, nb);
  const auto a_layout = trailing_layout(aa);
  if (form.unsupported.empty() && !a_layout) {
    form.unsupported = describe("A", a) + " has no unit stride in its last two dims (not " +
                       "expressible with a leading dimension)";
  }
  if (a_layout) form.a = {a_layout->layout, a_layout->ld, batch > 1 ? a_batch.value_or(0) : 0, 0};
  if (batch == 1) form.b.batch_stride = 0;
  if (form.unsupported.empty() && (!a_batch || !b_batch)) {
    // The batch dims need two strides (heads split from a fused projection, a transposed
    // batch, a GQA expand): two batch modes when they group into two runs.
    if (auto modes = two_batch_modes(aa, ba, nb, form.m * form.n)) {
      form.batch = modes->batch;
      form.outer_batch = modes->outer;
      form.a.batch_stride = modes->a.batch_stride;
      form.a.outer_batch_stride = modes->a.outer_batch_stride;
      form.b.batch_stride = modes->b.batch_stride;
      form.b.outer_batch_stride = modes->b.outer_batch_stride;
      form.d_batch_stride = modes->d;
      form.d_outer_batch_stride = modes->d_outer;
      form.dim_modes = modes->dim_modes;
    } else {
      form.unsupported = "operands " + describe("A", a).substr(8) + " and " +
                         describe("B", b).substr(8) + ": batch dims " +
                         shape_text(form.batch_shape) +
                         " need more than two batch strides (a kernel takes two batch modes)";
    }
  }
  return form;
}

// Whether the rows of an [batch..., M, K] operand view fold into one strided M.
bool rows_fold(const StridedView& v) {
  return v.rank() >= 2 && collapse_dims(v, 0, v.rank() - 1).has_value();
}

// An operand view the kernels can read: a leading dimension, and batch dims that one stride or
// two (two batch modes) walk, or (A) that fold into M.
bool accept_a(const StridedView& v) {
  if (v.rank() < 2 || !trailing_layout(v)) return false;
  return batch_runs(v, 0, v.rank() - 2) <= 2 || rows_fold(v);
}

// Whether a traced operand was read through a copy (clone / contiguous).
bool reads_through_a_copy(const Graph& g, const TracedOperand& t) {
  for (const auto& id : t.absorbed) {
    const Node* node = g.node(id);
    if (node != nullptr && target_in(*node, {"aten.clone", "aten.contiguous"})) return true;
  }
  return false;
}

bool accept_b(const StridedView& v) {
  return v.rank() >= 2 && trailing_layout(v) && batch_runs(v, 0, v.rank() - 2) <= 2;
}

bool accept_weight(const StridedView& v) {
  return v.rank() == 2 && trailing_layout(transpose_last_two(v));
}

json operand_json(const Graph& g, const TracedOperand& t, const StridedView& logical,
                  const OperandForm& form) {
  return {{"value", t.source},
          {"dtype", graph::dtype_name(g.value(t.source).desc.dtype)},
          {"layout", layout_name(form.layout)},
          {"ld", form.ld},
          {"batch_stride", form.batch_stride},
          {"outer_batch_stride", form.outer_batch_stride},
          {"shape", logical.shape},
          {"stride", logical.stride}};
}

// The bias of linear / addmm / baddbmm: a length-N vector broadcast over the rows (one for every
// batch, or one per batch: baddbmm's [B, 1, N], ALiBi's slopes), or a full output-shaped matrix.
json bias_json(const Graph& g, const ValueId& bias, double beta, const GemmForm& form,
               const std::vector<int64_t>& output_shape, std::string& unsupported) {
  const auto& desc = g.value(bias).desc;
  json j = {{"value", bias}, {"dtype", graph::dtype_name(desc.dtype)}, {"beta", beta}};
  const int64_t r = desc.rank();
  const bool along_n = r >= 1 && desc.shape[r - 1] == form.n && (desc.stride[r - 1] == 1 || form.n == 1);
  const bool over_rows = r < 2 || desc.shape[r - 2] == 1;
  if (along_n && over_rows) {
    BatchDims dims{form.batch_shape, form.dim_modes};
    const std::vector<int64_t> shape(desc.shape.begin(), desc.shape.end() - std::min<int64_t>(r, 2));
    const std::vector<int64_t> stride(desc.stride.begin(), desc.stride.end() - std::min<int64_t>(r, 2));
    if (auto strides = batch_mode_strides(dims, shape, stride)) {
      j["broadcast"] = "row";
      j["batch_stride"] = strides->first;
      j["outer_batch_stride"] = strides->second;
      return j;
    }
  }
  if (desc.shape == output_shape && desc.is_contiguous()) {
    j["broadcast"] = "full";
    return j;
  }
  if (unsupported.empty()) {
    unsupported = "bias " + shape_text(desc.shape) + " with strides " + shape_text(desc.stride) +
                  " is neither a length-" + std::to_string(form.n) +
                  " vector (per batch or shared) nor a contiguous output-shaped matrix";
  }
  j["broadcast"] = "unsupported";
  return j;
}

// Reshapes of the product that only regroup its rows (the output stays contiguous and keeps
// N as its last dim): the view back to [B, T, N] after an addmm over B*T rows.
std::vector<graph::NodeId> absorb_output_reshapes(const Graph& g, ValueId& out) {
  std::vector<graph::NodeId> absorbed;
  while (single_use(g, out)) {
    const Node* reader = g.consumers(out).front();
    if (!is_reshape(*reader) || reader->outputs.size() != 1) break;
    const auto inputs = tensor_args(*reader);
    if (inputs.empty() || inputs.front() != out) break;
    const auto& next = g.value(reader->outputs.front()).desc;
    const auto& now = g.value(out).desc;
    if (!next.is_contiguous() || next.numel() != now.numel() || next.rank() < 2 ||
        next.shape.back() != now.shape.back()) {
      break;
    }
    absorbed.push_back(reader->id);
    out = reader->outputs.front();
  }
  return absorbed;
}

void canonicalize_one(Graph& g, const Node& node) {
  const auto call = read_call(node);
  if (!call || node.outputs.size() != 1) return;
  if (!g.has_value(call->a) || !g.has_value(call->b)) return;
  const EinsumPlan* einsum = call->einsum ? &*call->einsum : nullptr;
  if (!einsum && (g.value(call->a).desc.rank() < 2 || g.value(call->b).desc.rank() < 2)) return;
  std::map<char, int64_t> sizes;
  if (einsum) {
    auto found = einsum_sizes(*einsum, view_of(g.value(call->a).desc), view_of(g.value(call->b).desc));
    if (!found) return;
    sizes = std::move(*found);
  }
  // The operands as the product reads them ([batch..., M, K] and [batch..., K, N]).
  auto logical_a = [&](const StridedView& v, std::string* why) -> std::optional<StridedView> {
    if (!einsum) return v;
    return einsum_view(v, einsum->a, *einsum, einsum->m, einsum->k, sizes, why);
  };
  auto logical_b = [&](const StridedView& v, std::string* why) -> std::optional<StridedView> {
    if (einsum) return einsum_view(v, einsum->b, *einsum, einsum->k, einsum->n, sizes, why);
    return call->b_is_weight ? transpose_last_two(v) : v;
  };

  TracedOperand ta = trace_operand(g, call->a, [&](const StridedView& v) {
    const auto logical = logical_a(v, nullptr);
    return logical && accept_a(*logical);
  });
  // A linear's rows read through a contiguous copy (a head merge after an attention whose
  // output is laid out in another order) can come out as a batch of products, where the copy's
  // own rows fold into one M: then stop at the copy. Whoever produced the copied value may
  // absorb the copy (the attention writes its output merged), and one product of B·T rows beats
  // B products of T.
  if (call->b_is_weight && !einsum && reads_through_a_copy(g, ta) && !rows_fold(ta.view)) {
    TracedOperand folded = trace_operand(g, call->a, [&](const StridedView& v) {
      return accept_a(v) && rows_fold(v);
    });
    if (folded.accepted) ta = std::move(folded);
  }
  const TracedOperand tb = trace_operand(g, call->b, [&](const StridedView& v) {
    if (call->b_is_weight) return accept_weight(v);
    const auto logical = logical_b(v, nullptr);
    return logical && accept_b(*logical);
  });
  if (call->b_is_weight && tb.view.rank() != 2) return;
  std::string why;
  auto a_view = logical_a(ta.view, &why);
  auto b_view = logical_b(tb.view, &why);
  if (!a_view || !b_view) {
    if (why.empty()) return;
    // An einsum whose contraction needs a copy: a fact.gemm that declines with the reason, on
    // placeholder (compact) views of the product's sizes.
    auto compact = [&](const std::string& batch, int64_t rows, int64_t cols) {
      StridedView v;
      for (char c : batch) v.shape.push_back(sizes.at(c));
      v.shape.push_back(rows);
      v.shape.push_back(cols);
      v.stride.assign(v.shape.size(), 1);
      for (size_t i = v.shape.size() - 1; i-- > 0;) v.stride[i] = v.stride[i + 1] * v.shape[i + 1];
      return v;
    };
    auto product = [&](const std::string& letters) {
      int64_t size = 1;
      for (char c : letters) size *= sizes.at(c);
      return size;
    };
    a_view = compact(einsum->batch, product(einsum->m), product(einsum->k));
    b_view = compact(einsum->batch, product(einsum->k), product(einsum->n));
  }
  auto form = gemm_form(*a_view, *b_view);
  if (!form) return;
  if (!why.empty()) form->unsupported = why;

  ValueId out = node.outputs.front();
  const auto output_reshapes = absorb_output_reshapes(g, out);
  const auto& out_desc = g.value(out).desc;
  const auto& core_out_desc = g.value(node.outputs.front()).desc;

  json attrs;
  attrs["op"] = node.target;
  attrs["m"] = form->m;
  attrs["n"] = form->n;
  attrs["k"] = form->k;
  attrs["batch"] = form->batch;
  attrs["outer_batch"] = form->outer_batch;
  std::vector<int64_t> batch_shape = form->batch_shape;
  if (!form->folded_m && out_desc.rank() >= 2) {
    std::vector<int64_t> leading(out_desc.shape.begin(), out_desc.shape.end() - 2);
    const int64_t count = std::accumulate(leading.begin(), leading.end(), int64_t{1},
                                          std::multiplies<>());
    if (count == form->batch * form->outer_batch &&
        out_desc.shape[out_desc.rank() - 2] == form->m) {
      batch_shape = leading;
    }
  }
  attrs["batch_shape"] = batch_shape;
  attrs["folded_m"] = form->folded_m;
  attrs["batch_dims"] = {{"shape", form->batch_shape}, {"modes", form->dim_modes}};
  attrs["output_shape"] = out_desc.shape;
  attrs["dtype"] = graph::dtype_name(out_desc.dtype);
  attrs["alpha"] = call->alpha;
  attrs["a"] = operand_json(g, ta, *a_view, form->a);
  attrs["b"] = operand_json(g, tb, *b_view, form->b);
  if (einsum) attrs["equation"] = einsum->equation;
  attrs["d"] = {{"ld", form->n},
                {"batch_stride", form->d_batch_stride},
                {"outer_batch_stride", form->d_outer_batch_stride}};
  std::string unsupported = form->unsupported;
  attrs["bias"] = nullptr;
  std::vector<Arg> args{Arg::of_tensor(ta.source), Arg::of_tensor(tb.source)};
  if (call->bias && g.has_value(*call->bias)) {
    attrs["bias"] = bias_json(g, *call->bias, call->beta, *form, core_out_desc.shape, unsupported);
    args.push_back(Arg::of_tensor(*call->bias));
  }
  if (!unsupported.empty()) attrs["unsupported"] = unsupported;

  std::vector<graph::NodeId> region = ta.absorbed;
  region.insert(region.end(), tb.absorbed.begin(), tb.absorbed.end());
  region.push_back(node.id);
  region.insert(region.end(), output_reshapes.begin(), output_reshapes.end());

  Node gemm;
  gemm.id = node.id;
  gemm.target = "fact.gemm";
  gemm.args = std::move(args);
  gemm.outputs = {out};
  gemm.attrs = std::move(attrs);
  detail::replace_region(g, region, std::move(gemm));
}

}  // namespace

void canonicalize_gemms(Graph& g) {
  std::vector<graph::NodeId> candidates;
  for (const auto& node : g.nodes()) {
    if (target_in(node, kMatmulOps)) candidates.push_back(node.id);
  }
  for (const auto& id : candidates) {
    const Node* node = g.node(id);
    if (node == nullptr) continue;
    const Node copy = *node;
    canonicalize_one(g, copy);
  }
}

const discover::CanonicalPassRegistrar kPass{{"gemms", 100, &canonicalize_gemms}};

}  // namespace fact::gemm
