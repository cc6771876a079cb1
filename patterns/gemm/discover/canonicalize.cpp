// fact.gemm: matmul-family ATen ops with the view-like ops around them (see canonicalize.hpp).
#include <numeric>

#include "fact/discover/canonicalize.hpp"
#include "patterns/gemm/discover/canonicalize.hpp"
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
                                          "aten.mm",     "aten.bmm",   "aten.matmul"};

struct MatmulCall {
  ValueId a, b;
  std::optional<ValueId> bias;
  double alpha = 1.0, beta = 1.0;
  bool b_is_weight = false;  // aten.linear: B = weightᵀ
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
    const int64_t ld = rows == 1 ? cols : row_stride;
    if (ld >= cols && ld > 0) return MatrixLayout{Layout::RowMajor, ld};
  }
  if (row_stride == 1 || rows == 1) {
    const int64_t ld = cols == 1 ? rows : col_stride;
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
};

struct GemmForm {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  std::vector<int64_t> batch_shape;
  bool folded_m = false;
  OperandForm a, b;
  std::string unsupported;
};

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
        form.a = {layout->layout, layout->ld, 0};
        form.b.batch_stride = 0;
        return form;
      }
    }
  }
  form.batch = batch;
  const auto a_batch = collapse_dims(aa, 0, nb);
  const auto a_layout = trailing_layout(aa);
  if (form.unsupported.empty() && !a_layout) {
    form.unsupported = describe("A", a) + " has no unit stride in its last two dims (not " +
                       "expressible with a leading dimension)";
  }
  if (form.unsupported.empty() && !a_batch) {
    form.unsupported = describe("A", a) + ": batch dims " + shape_text(form.batch_shape) +
                       " do not collapse into one batch stride";
  }
  if (form.unsupported.empty() && !b_batch) {
    form.unsupported = describe("B", b) + ": batch dims " + shape_text(form.batch_shape) +
                       " do not collapse into one batch stride";
  }
  if (a_layout) form.a = {a_layout->layout, a_layout->ld, batch > 1 ? a_batch.value_or(0) : 0};
  if (batch == 1) form.b.batch_stride = 0;
  return form;
}

bool accept_a(const StridedView& v) {
  if (v.rank() < 2 || !trailing_layout(v)) return false;
  return collapse_dims(v, 0, v.rank() - 2).has_value() ||
         collapse_dims(v, 0, v.rank() - 1).has_value();
}

bool accept_b(const StridedView& v) {
  return v.rank() >= 2 && trailing_layout(v) && collapse_dims(v, 0, v.rank() - 2).has_value();
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
          {"shape", logical.shape},
          {"stride", logical.stride}};
}

// The bias of linear / addmm / baddbmm: a length-N vector or a full output-shaped matrix.
json bias_json(const Graph& g, const ValueId& bias, double beta, const GemmForm& form,
               const std::vector<int64_t>& output_shape, std::string& unsupported) {
  const auto& desc = g.value(bias).desc;
  json j = {{"value", bias}, {"dtype", graph::dtype_name(desc.dtype)}, {"beta", beta}};
  const int64_t r = desc.rank();
  bool row = r >= 1 && desc.shape[r - 1] == form.n && (desc.stride[r - 1] == 1 || form.n == 1);
  for (int64_t i = 0; row && i + 1 < r; ++i) row = desc.shape[i] == 1;
  if (row) {
    j["broadcast"] = "row";
    return j;
  }
  if (desc.shape == output_shape && desc.is_contiguous()) {
    j["broadcast"] = "full";
    return j;
  }
  if (unsupported.empty()) {
    unsupported = "bias " + shape_text(desc.shape) + " with strides " + shape_text(desc.stride) +
                  " is neither a length-" + std::to_string(form.n) +
                  " vector nor a contiguous output-shaped matrix";
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
  if (g.value(call->a).desc.rank() < 2 || g.value(call->b).desc.rank() < 2) return;

  const TracedOperand ta = trace_operand(g, call->a, accept_a);
  const TracedOperand tb = trace_operand(g, call->b, call->b_is_weight ? accept_weight : accept_b);
  const StridedView b_logical = call->b_is_weight ? transpose_last_two(tb.view) : tb.view;
  if (call->b_is_weight && tb.view.rank() != 2) return;
  auto form = gemm_form(ta.view, b_logical);
  if (!form) return;

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
  std::vector<int64_t> batch_shape = form->batch_shape;
  if (!form->folded_m && out_desc.rank() >= 2) {
    std::vector<int64_t> leading(out_desc.shape.begin(), out_desc.shape.end() - 2);
    const int64_t count = std::accumulate(leading.begin(), leading.end(), int64_t{1},
                                          std::multiplies<>());
    if (count == form->batch && out_desc.shape[out_desc.rank() - 2] == form->m) batch_shape = leading;
  }
  attrs["batch_shape"] = batch_shape;
  attrs["folded_m"] = form->folded_m;
  attrs["output_shape"] = out_desc.shape;
  attrs["dtype"] = graph::dtype_name(out_desc.dtype);
  attrs["alpha"] = call->alpha;
  attrs["a"] = operand_json(g, ta, ta.view, form->a);
  attrs["b"] = operand_json(g, tb, b_logical, form->b);
  attrs["d"] = {{"ld", form->n}, {"batch_stride", form->batch > 1 ? form->m * form->n : 0}};
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
