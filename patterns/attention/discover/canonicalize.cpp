// fact.attention (see canonicalize.hpp).
#include <cmath>
#include <limits>

#include "fact/discover/canonicalize.hpp"
#include "patterns/attention/discover/canonicalize.hpp"
#include "fact/discover/rule.hpp"
#include "fact/discover/strided_view.hpp"
#include "fact/discover/graph_rewrite.hpp"

namespace fact::attention {

namespace {

using namespace fact::discover;  // NOLINT: the rule DSL and view helpers

using graph::Arg;
using graph::Graph;
using graph::Node;
using graph::ValueId;
using nlohmann::json;

// A tensor read in place: the source value and how it is viewed over its memory.
struct ViewedTensor {
  ValueId source;
  StridedView view;
};

// Walks back through view-like nodes that alias their input exactly (applying the node to the
// input's recorded layout reproduces the output's recorded layout, so no copy happened and the
// data pointer is the same) and whose output has no other reader.
ViewedTensor peel_aliases(const Graph& g, ViewedTensor t, std::vector<graph::NodeId>& region) {
  while (single_use(g, t.source)) {
    const Node* producer = g.producer(t.source);
    if (producer == nullptr || !is_view_like(*producer) || producer->outputs.size() != 1) break;
    const auto inputs = tensor_args(*producer);
    if (inputs.empty()) break;
    const auto& in_desc = g.value(inputs.front()).desc;
    auto simulated = apply_view_like(*producer, view_of(in_desc));
    if (!simulated || !(*simulated == view_of(g.value(t.source).desc))) break;
    region.push_back(producer->id);
    t.source = inputs.front();
  }
  return t;
}

ViewedTensor gemm_operand(const Node& gemm, const char* which) {
  const json& o = gemm.attrs.at(which);
  return {o.at("value").get<ValueId>(),
          {o.at("shape").get<std::vector<int64_t>>(), o.at("stride").get<std::vector<int64_t>>()}};
}

// Views the operand with the batch dims of the product's output ([B, H, T, D] rather than
// [B*H, T, D]) when they differ.
void reshape_batch(ViewedTensor& t, const std::vector<int64_t>& batch_shape) {
  const size_t r = t.view.rank();
  if (r < 2) return;
  std::vector<int64_t> wanted = batch_shape;
  wanted.push_back(t.view.shape[r - 2]);
  wanted.push_back(t.view.shape[r - 1]);
  if (wanted == t.view.shape) return;
  if (auto strides = restride(t.view, wanted)) t.view = {wanted, *strides};
}

// The nodes that compute a mask from its source (buffer, constant, input): single-reader
// nodes with one tensor argument (eq, alias, slice, to, logical_not, tril, ...).
struct MaskChain {
  ValueId source;
  std::vector<graph::NodeId> nodes;
  bool computes_triangle = false;
};

MaskChain trace_mask(const Graph& g, const ValueId& mask) {
  MaskChain chain{mask, {}, false};
  while (single_use(g, chain.source)) {
    const Node* producer = g.producer(chain.source);
    if (producer == nullptr || producer->outputs.size() != 1) break;
    const auto inputs = tensor_args(*producer);
    if (inputs.size() > 1) break;
    chain.nodes.push_back(producer->id);
    if (target_in(*producer, {"aten.tril", "aten.triu"})) chain.computes_triangle = true;
    if (inputs.empty()) break;
    chain.source = inputs.front();
  }
  return chain;
}

bool fill_is_minus_infinity(const Graph& g, const Node& mask_op) {
  auto very_negative = [](std::optional<double> v) { return v && *v <= -1e4; };
  if (target_is(mask_op, "aten.masked_fill")) {
    const Arg* value = detail::argument(mask_op, 2, "value");
    return value && very_negative(detail::scalar_operand(g, *value));
  }
  // where(mask, fill, scores): the fill is a number or a 0-d tensor made by scalar_tensor/full.
  const Arg* fill = detail::argument(mask_op, 1, "self");
  if (fill == nullptr) return false;
  if (very_negative(detail::scalar_operand(g, *fill))) return true;
  if (!fill->is_tensor()) return false;
  const Node* maker = g.producer(fill->tensor);
  if (maker == nullptr || !target_in(*maker, {"aten.scalar_tensor", "aten.full"})) return false;
  const Arg* v = detail::argument(*maker, target_is(*maker, "aten.full") ? 1 : 0, "s");
  return v && very_negative(detail::number_constant(*v));
}

json view_json(const ViewedTensor& t) {
  return {{"value", t.source}, {"shape", t.view.shape}, {"stride", t.view.stride}};
}

// Attention dims from [batch, heads, seq, dim] (or [batch, seq, dim]) views.
void fill_dims(json& attrs, const ViewedTensor& q, const ViewedTensor& k, const ViewedTensor& v) {
  const auto& qs = q.view.shape;
  const auto& ks = k.view.shape;
  const size_t r = qs.size();
  attrs["batch"] = r >= 3 ? qs[0] : 1;
  attrs["heads"] = r >= 4 ? qs[1] : 1;
  attrs["kv_heads"] = ks.size() >= 4 ? ks[1] : 1;
  attrs["seq"] = qs[r - 2];
  attrs["kv_seq"] = ks[ks.size() - 2];
  attrs["head_dim"] = qs[r - 1];
  attrs["v_head_dim"] = v.view.shape.back();
  attrs["q"] = view_json(q);
  attrs["k"] = view_json(k);
  attrs["v"] = view_json(v);
}

// k / v behind repeat_interleave(x, group, dim=1) (grouped-query attention): read x instead.
ViewedTensor undo_head_repeat(const Graph& g, ViewedTensor t, std::vector<graph::NodeId>& region) {
  if (!single_use(g, t.source)) return t;
  const Node* producer = g.producer(t.source);
  if (producer == nullptr || !target_is(*producer, "aten.repeat_interleave")) return t;
  const auto inputs = tensor_args(*producer);
  const Arg* dim = detail::argument(*producer, 2, "dim");
  if (inputs.size() != 1 || dim == nullptr || !detail::number_constant(*dim)) return t;
  const auto& in_desc = g.value(inputs.front()).desc;
  if (in_desc.rank() != 4 || (*detail::number_constant(*dim) != 1 && *detail::number_constant(*dim) != -3))
    return t;
  region.push_back(producer->id);
  return {inputs.front(), view_of(in_desc)};
}

const Pattern& attention_pattern() {
  static const Pattern pattern = [] {
    const Pattern scores = Pattern::op({"fact.gemm"}).as("qk");
    const Pattern scaled = Pattern::op({"fact.scale"}, {scores}).as("scale").optional();
    const Pattern mask = Pattern::any().as("mask");
    const Pattern masked = Pattern::one_of({
        Pattern::op({"aten.masked_fill"}, {scaled, mask}).as("mask_op"),
        Pattern::op({"aten.where"}, {mask, Pattern::any().as("fill"), scaled}).as("mask_op"),
        Pattern::op({"aten.where"}, {mask, scaled}).as("mask_op"),
        Pattern::op({"aten.add"}, {scaled, Pattern::cast(mask)}).commutative().as("additive_mask"),
        scaled,
    });
    const Pattern post_scaled = Pattern::op({"fact.scale"}, {masked}).as("post_scale").optional();
    const Pattern softmax =
        Pattern::op({"aten.softmax", "aten._softmax", "aten._safe_softmax"},
                    {Pattern::cast(post_scaled)})
            .as("softmax");
    return Pattern::op({"fact.gemm"}, {Pattern::cast(softmax), Pattern::any().as("v")}).as("pv");
  }();
  return pattern;
}

bool softmax_over_last_dim(const Graph& g, const Node& softmax) {
  const Arg* dim = detail::argument(softmax, 1, "dim");
  auto d = dim ? detail::number_constant(*dim) : std::nullopt;
  if (!d) return false;
  const int64_t rank = g.value(softmax.outputs.front()).desc.rank();
  return *d == -1 || *d == rank - 1;
}

bool rewrite_decomposed(Graph& g, const Node& pv) {
  auto binding = attention_pattern().match_node(pv, g);
  if (!binding) return false;
  const Node& qk = *g.node(binding->nodes.at("qk"));
  const Node& softmax = *g.node(binding->nodes.at("softmax"));
  if (!qk.attrs.at("bias").is_null() || !pv.attrs.at("bias").is_null()) return false;
  if (pv.attrs.value("alpha", 1.0) != 1.0) return false;
  if (qk.attrs.at("batch_shape") != pv.attrs.at("batch_shape")) return false;
  if (qk.attrs.at("m") != pv.attrs.at("m") || qk.attrs.at("n") != pv.attrs.at("k")) return false;
  if (qk.attrs.at("folded_m").get<bool>() || pv.attrs.at("folded_m").get<bool>()) return false;
  if (!softmax_over_last_dim(g, softmax)) return false;

  std::vector<graph::NodeId> region = binding->matched;
  double scale = qk.attrs.value("alpha", 1.0);
  for (const char* role : {"scale", "post_scale"}) {
    if (binding->nodes.count(role)) scale *= g.node(binding->nodes.at(role))->attrs.at("value").get<double>();
  }

  json attrs;
  json mask_json = nullptr;
  bool causal = false;
  std::string evidence = "no mask";
  std::optional<ValueId> mask_value;
  if (binding->has("mask")) {
    const bool additive = binding->nodes.count("additive_mask") != 0;
    if (!additive && !fill_is_minus_infinity(g, *g.node(binding->nodes.at("mask_op")))) return false;
    if (binding->has("fill") && single_use(g, binding->values.at("fill")) &&
        g.producer(binding->values.at("fill")) != nullptr) {
      region.push_back(g.producer(binding->values.at("fill"))->id);
    }
    const MaskChain chain = trace_mask(g, binding->values.at("mask"));
    region.insert(region.end(), chain.nodes.begin(), chain.nodes.end());
    mask_value = chain.source;
    const graph::Value& source = g.value(chain.source);
    const auto& shape = source.desc.shape;
    const bool square = shape.size() >= 2 && shape[shape.size() - 1] == shape[shape.size() - 2];
    if (chain.computes_triangle) {
      causal = true;
      evidence = "mask built by tril/triu in the graph";
    } else if (square && (source.kind == graph::ValueKind::Buffer ||
                          source.kind == graph::ValueKind::Constant)) {
      causal = true;
      evidence = "square mask buffer '" + (source.target.empty() ? source.id : source.target) +
                 "' (assumed triangular: its contents are not captured)";
    } else {
      evidence = "mask from '" + source.id + "' (not known to be causal)";
    }
    mask_json = {{"kind", additive ? "additive" : "fill"},
                 {"value", chain.source},
                 {"source", source.target.empty() ? source.id : source.target}};
  }

  const auto batch_shape = pv.attrs.at("batch_shape").get<std::vector<int64_t>>();
  ViewedTensor q = gemm_operand(qk, "a");
  ViewedTensor kt = gemm_operand(qk, "b");
  ViewedTensor v = gemm_operand(pv, "b");
  reshape_batch(q, batch_shape);
  reshape_batch(kt, batch_shape);
  reshape_batch(v, batch_shape);
  ViewedTensor k{kt.source, kt.view};
  const size_t kr = k.view.rank();
  std::swap(k.view.shape[kr - 2], k.view.shape[kr - 1]);
  std::swap(k.view.stride[kr - 2], k.view.stride[kr - 1]);
  q = peel_aliases(g, q, region);
  k = peel_aliases(g, undo_head_repeat(g, peel_aliases(g, k, region), region), region);
  v = peel_aliases(g, undo_head_repeat(g, peel_aliases(g, v, region), region), region);

  fill_dims(attrs, q, k, v);
  attrs["causal"] = causal;
  attrs["causal_evidence"] = evidence;
  attrs["scale"] = scale;
  attrs["mask"] = mask_json;
  attrs["softmax_dtype"] = graph::dtype_name(g.value(softmax.outputs.front()).desc.dtype);
  attrs["dtype"] = graph::dtype_name(g.value(pv.outputs.front()).desc.dtype);

  Node attention;
  attention.id = detail::fresh_node_id(g, "attention");
  attention.target = "fact.attention";
  attention.args = {Arg::of_tensor(q.source), Arg::of_tensor(k.source), Arg::of_tensor(v.source)};
  if (mask_value) attention.args.push_back(Arg::of_tensor(*mask_value));
  attention.outputs = {pv.outputs.front()};
  attention.attrs = std::move(attrs);
  detail::replace_region(g, region, std::move(attention));
  return true;
}

bool rewrite_sdpa(Graph& g, const Node& sdpa) {
  if (sdpa.outputs.empty()) return false;
  const auto inputs = tensor_args(sdpa);
  if (inputs.size() < 3) return false;
  std::vector<graph::NodeId> region{sdpa.id};
  ViewedTensor q{inputs[0], view_of(g.value(inputs[0]).desc)};
  ViewedTensor k{inputs[1], view_of(g.value(inputs[1]).desc)};
  ViewedTensor v{inputs[2], view_of(g.value(inputs[2]).desc)};
  if (q.view.rank() < 3 || k.view.rank() != q.view.rank() || v.view.rank() != q.view.rank())
    return false;
  const Arg* mask_arg = detail::argument(sdpa, 3, "attn_mask");
  const Arg* dropout_arg = detail::argument(sdpa, 4, "dropout_p");
  const Arg* causal_arg = detail::argument(sdpa, 5, "is_causal");
  auto scale_arg = sdpa.kwargs.find("scale");
  if (dropout_arg && detail::number_constant(*dropout_arg).value_or(0.0) != 0.0) return false;
  const bool causal = causal_arg && causal_arg->constant.is_boolean() && causal_arg->constant.get<bool>();
  double scale = 1.0 / std::sqrt(double(q.view.shape.back()));
  if (scale_arg != sdpa.kwargs.end()) {
    if (auto s = detail::number_constant(scale_arg->second)) scale = *s;
  }
  json attrs;
  fill_dims(attrs, q, k, v);
  attrs["causal"] = causal;
  attrs["causal_evidence"] = causal ? "is_causal=True" : "is_causal=False";
  attrs["scale"] = scale;
  attrs["mask"] = nullptr;
  Node attention;
  attention.id = detail::fresh_node_id(g, "attention");
  attention.target = "fact.attention";
  attention.args = {Arg::of_tensor(q.source), Arg::of_tensor(k.source), Arg::of_tensor(v.source)};
  if (mask_arg && mask_arg->is_tensor()) {
    attrs["mask"] = {{"kind", "additive"}, {"value", mask_arg->tensor}, {"source", mask_arg->tensor}};
    attention.args.push_back(*mask_arg);
  }
  attrs["softmax_dtype"] = graph::dtype_name(g.value(sdpa.outputs.front()).desc.dtype);
  attrs["dtype"] = attrs["softmax_dtype"];
  attention.outputs = {sdpa.outputs.front()};
  attention.attrs = std::move(attrs);
  detail::replace_region(g, region, std::move(attention));
  return true;
}

}  // namespace

void canonicalize_attention(Graph& g) {
  std::vector<graph::NodeId> candidates;
  for (const auto& node : g.nodes()) {
    if (node.target == "fact.gemm" || target_is(node, "aten.scaled_dot_product_attention"))
      candidates.push_back(node.id);
  }
  for (const auto& id : candidates) {
    const Node* node = g.node(id);
    if (node == nullptr) continue;
    const Node copy = *node;
    if (copy.target == "fact.gemm") {
      rewrite_decomposed(g, copy);
    } else {
      rewrite_sdpa(g, copy);
    }
  }
}

const discover::CanonicalPassRegistrar kPass{{"attention", 500, &canonicalize_attention}};

}  // namespace fact::attention
