// fact.attention (see canonicalize.hpp).
#include "patterns/attention/discover/canonicalize.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "fact/discover/canonicalize.hpp"
#include "fact/discover/graph_rewrite.hpp"
#include "fact/discover/rule.hpp"
#include "fact/discover/strided_view.hpp"
#include "patterns/attention/discover/mask.hpp"
#include "patterns/attention/kind/problem.hpp"

namespace fact::attention {

namespace {

using namespace fact::discover;  // NOLINT: the rule DSL and view helpers

using graph::Arg;
using graph::Graph;
using graph::Node;
using graph::NodeId;
using graph::ValueId;
using nlohmann::json;

// The nodes a rewrite replaces, in the order they were taken.
struct Region {
  std::vector<NodeId> order;
  std::set<NodeId> members;
  void add(const NodeId& id) {
    if (members.insert(id).second) order.push_back(id);
  }
  bool has(const NodeId& id) const { return members.count(id) != 0; }
};

// True when `value` is not a graph output and every node reading it is in `region` (or is
// `also`, a node about to be taken).
bool readers_inside(const Graph& g, const ValueId& value, const Region& region, const Node* also = nullptr) {
  if (g.is_graph_output(value)) return false;
  for (const Node* reader : g.consumers(value)) {
    if (!region.has(reader->id) && reader != also) return false;
  }
  return true;
}

// A tensor read in place: `view` over the memory of `source`, starting `offset` elements in.
struct ViewedTensor {
  ValueId source;
  StridedView view;
  int64_t offset = 0;
};

ViewedTensor gemm_operand(const Node& gemm, const char* which) {
  const json& o = gemm.attrs.at(which);
  return {o.at("value").get<ValueId>(),
          {o.at("shape").get<std::vector<int64_t>>(), o.at("stride").get<std::vector<int64_t>>()},
          o.value("offset", int64_t{0})};
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

// A batched product A·B the attention is made of: fact.gemm, or aten.einsum with one of the
// equations "P a c, P b c -> P a b" (the scores q·kᵀ) and "P a b, P b e -> P a e" (the
// probabilities · v), P the batch letters.
struct Product {
  const Node* node = nullptr;
  ValueId a_input;           // the value the product reads as A
  ViewedTensor a, b;         // [batch..., M, K] and [batch..., K, N]
  std::vector<int64_t> batch_shape;
  double alpha = 1.0;
};

std::optional<std::array<std::string, 3>> einsum_terms(const Node& node) {
  const Arg* eq = detail::argument(node, 0, "equation");
  if (eq == nullptr || !eq->constant.is_string()) return std::nullopt;
  std::string text;
  for (char c : eq->constant.get<std::string>()) {
    if (c != ' ') text += c;
  }
  const size_t arrow = text.find("->"), comma = text.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow) return std::nullopt;
  if (text.find("...") != std::string::npos || text.find(',', comma + 1) < arrow) return std::nullopt;
  return std::array<std::string, 3>{text.substr(0, comma), text.substr(comma + 1, arrow - comma - 1),
                                    text.substr(arrow + 2)};
}

std::optional<Product> as_product(const Graph& g, const Node& node, bool scores) {
  Product p;
  p.node = &node;
  if (node.target == "fact.gemm") {
    if (!node.attrs.at("bias").is_null() || node.attrs.value("folded_m", false)) return std::nullopt;
    const auto inputs = tensor_args(node);
    if (inputs.empty()) return std::nullopt;
    p.a_input = inputs.front();
    p.batch_shape = node.attrs.at("batch_shape").get<std::vector<int64_t>>();
    p.a = gemm_operand(node, "a");
    p.b = gemm_operand(node, "b");
    reshape_batch(p.a, p.batch_shape);
    reshape_batch(p.b, p.batch_shape);
    p.alpha = node.attrs.value("alpha", 1.0);
    return p;
  }
  if (!target_is(node, "aten.einsum")) return std::nullopt;
  auto terms = einsum_terms(node);
  const Arg* list = detail::argument(node, 1, "tensors");
  if (!terms || list == nullptr || list->kind != Arg::Kind::TensorList || list->tensors.size() != 2 ||
      !list->tensors[0] || !list->tensors[1]) {
    return std::nullopt;
  }
  const auto& [t0, t1, out] = *terms;
  const size_t r = out.size();
  if (r < 3 || t0.size() != r || t1.size() != r) return std::nullopt;
  const std::string batch = out.substr(0, r - 2);
  if (t0.substr(0, r - 2) != batch || t1.substr(0, r - 2) != batch) return std::nullopt;
  const char a = t0[r - 2], x = t0[r - 1], y = t1[r - 2], z = t1[r - 1];
  // scores: t0 = a c, t1 = b c, out = a b; probabilities · v: t0 = a b, t1 = b e, out = a e.
  const bool ok = scores ? (x == z && out[r - 2] == a && out[r - 1] == y && a != y && a != x && y != x)
                         : (x == y && out[r - 2] == a && out[r - 1] == z && a != x && a != z && x != z);
  if (!ok) return std::nullopt;
  p.a_input = *list->tensors[0];
  p.a = {*list->tensors[0], view_of(g.value(*list->tensors[0]).desc)};
  p.b = {*list->tensors[1], view_of(g.value(*list->tensors[1]).desc)};
  if (scores) {  // B = t1ᵀ: [batch, c, b]
    std::swap(p.b.view.shape[r - 2], p.b.view.shape[r - 1]);
    std::swap(p.b.view.stride[r - 2], p.b.view.stride[r - 1]);
  }
  p.batch_shape.assign(p.a.view.shape.begin(), p.a.view.shape.end() - 2);
  return p;
}

bool is_product(const Node& node) { return node.target == "fact.gemm" || target_is(node, "aten.einsum"); }

bool is_cast(const Node& node) { return target_in(node, {"aten.to", "aten._to_copy", "aten.type_as"}); }

// The first tensor argument of `node` (its input for unary ops).
std::optional<ValueId> first_tensor(const Node& node) {
  const auto inputs = tensor_args(node);
  if (inputs.empty()) return std::nullopt;
  return inputs.front();
}

// Equal shapes and equal strides wherever the extent is not 1 (a stride of a dim of extent 1 is
// never stepped; torch records any value there).
bool same_layout(const StridedView& a, const StridedView& b) {
  if (a.shape != b.shape) return false;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] != 1 && a.stride[d] != b.stride[d]) return false;
  }
  return true;
}

// Walks back through view-like nodes that alias their input exactly (applying the node to the
// input's recorded layout reproduces the output's recorded layout, so no copy happened and the
// data pointer is the same) and whose output is read only inside `region`.
bool peel_aliases(const Graph& g, ViewedTensor& t, Region& region) {
  bool moved = false;
  while (readers_inside(g, t.source, region)) {
    const Node* producer = g.producer(t.source);
    if (producer == nullptr || !is_view_like(*producer) || producer->outputs.size() != 1) break;
    auto input = first_tensor(*producer);
    if (!input) break;
    auto simulated = apply_view_like(*producer, view_of(g.value(*input).desc));
    if (!simulated || !same_layout(*simulated, view_of(g.value(t.source).desc))) break;
    region.add(producer->id);
    t.source = *input;
    moved = true;
  }
  return moved;
}

// slice / select of a larger tensor: the same memory, `offset` further in.
bool absorb_slice(const Graph& g, ViewedTensor& t, Region& region) {
  if (!readers_inside(g, t.source, region)) return false;
  const Node* producer = g.producer(t.source);
  if (producer == nullptr || producer->outputs.size() != 1 || !target_in(*producer, {"aten.slice", "aten.select"})) {
    return false;
  }
  auto input = first_tensor(*producer);
  if (!input) return false;
  const auto& in = g.value(*input).desc;
  const Arg* dim_arg = detail::argument(*producer, 1, "dim");
  auto dim = dim_arg ? detail::number_constant(*dim_arg) : std::optional<double>(0.0);
  if (!dim) return false;
  int64_t d = static_cast<int64_t>(*dim);
  if (d < 0) d += in.rank();
  if (d < 0 || d >= in.rank()) return false;
  const int64_t extent = in.shape[d];
  int64_t start = 0;
  if (target_is(*producer, "aten.select")) {
    const Arg* index = detail::argument(*producer, 2, "index");
    auto i = index ? detail::number_constant(*index) : std::nullopt;
    if (!i) return false;
    start = static_cast<int64_t>(*i);
  } else {
    const Arg* s = detail::argument(*producer, 2, "start");
    auto v = s ? detail::number_constant(*s) : std::optional<double>(0.0);
    if (!v) return false;
    start = *v >= 9e18 ? extent : static_cast<int64_t>(*v);
  }
  if (start < 0) start += extent;
  if (start < 0 || start > extent) return false;
  region.add(producer->id);
  t.offset += start * in.stride[d];
  t.source = *input;
  return true;
}

// A copy in another memory order (clone / contiguous, as nn.MultiheadAttention's packed
// projection goes through before it is split into q, k and v) read only inside the region: its
// values are its input's, so read the input's memory and leave the copy out. Each dim of `t`
// steps over the copy's memory by k times the stride of one of the copy's dims; it takes the
// same step over the input's stride of that dim, provided its reach, with the offset's index
// and the reach of t's other dims on that dim, stays inside the dim (no carry into the next).
// The copy's recorded layout must be dense (every element once).
bool absorb_copy(const Graph& g, ViewedTensor& t, Region& region) {
  if (!readers_inside(g, t.source, region)) return false;
  const Node* producer = g.producer(t.source);
  if (producer == nullptr || producer->outputs.size() != 1 || !target_in(*producer, {"aten.clone", "aten.contiguous"})) {
    return false;
  }
  auto input = first_tensor(*producer);
  if (!input) return false;
  const StridedView copy = view_of(g.value(t.source).desc);
  const StridedView original = view_of(g.value(*input).desc);
  const size_t r = copy.rank();
  if (original.shape != copy.shape) return false;
  // The copy's dims from the outermost stride in; dense: each stride is the product of the
  // extents inside it.
  std::vector<size_t> order(r);
  for (size_t d = 0; d < r; ++d) order[d] = d;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return copy.stride[a] > copy.stride[b]; });
  int64_t dense = 1;
  for (size_t i = r; i-- > 0;) {
    const size_t d = order[i];
    if (copy.shape[d] == 1) continue;
    if (copy.stride[d] != dense) return false;
    dense *= copy.shape[d];
  }
  // The offset's index along each of the copy's dims.
  std::vector<int64_t> reach(r, 0);
  int64_t rest = t.offset;
  for (size_t d : order) {
    if (copy.shape[d] == 1) continue;
    reach[d] = rest / copy.stride[d];
    rest %= copy.stride[d];
  }
  if (rest != 0 || t.offset < 0) return false;
  int64_t offset = 0;
  for (size_t d = 0; d < r; ++d) offset += reach[d] * original.stride[d];
  // A dim of extent 1 is never stepped, but its stride is mapped too (onto a copy dim of extent
  // 1 where one has the same stride), so that a problem planned over a range of sizes sees the
  // stride it sees at the other sizes.
  StridedView view = t.view;
  for (size_t j = 0; j < view.rank(); ++j) {
    const int64_t s = view.stride[j];
    const int64_t step = view.shape[j] - 1;
    // The copy's dims with the largest stride that divides s; of those, the narrowest one the
    // dim's reach fits in.
    std::optional<size_t> dim;
    int64_t outer = 0;
    for (size_t d = 0; d < r; ++d) {
      if (copy.stride[d] > 0 && copy.stride[d] <= s && s % copy.stride[d] == 0) outer = std::max(outer, copy.stride[d]);
    }
    for (size_t d = 0; d < r && outer > 0; ++d) {
      if (copy.stride[d] != outer || reach[d] + s / outer * step >= copy.shape[d]) continue;
      if (!dim || copy.shape[d] < copy.shape[*dim]) dim = d;
    }
    if (!dim) {
      if (step == 0) continue;  // never stepped: any stride reads the same elements
      return false;             // it would carry into the next dim
    }
    const int64_t k = s / copy.stride[*dim];
    reach[*dim] += k * step;
    view.stride[j] = k * original.stride[*dim];
  }
  region.add(producer->id);
  t = {*input, view, offset};
  return true;
}

// The element where output `index` of a split / split_with_sizes / chunk / unbind node starts
// in its input, along `dim`; nullopt for another node.
std::optional<std::pair<int64_t, int64_t>> piece_start(const Graph& g, const Node& node, size_t index) {
  auto input = first_tensor(node);
  if (!input) return std::nullopt;
  const auto& in = g.value(*input).desc;
  const bool unbind = target_is(node, "aten.unbind");
  const Arg* dim_arg = detail::argument(node, unbind ? 1 : 2, "dim");
  int64_t d = unbind ? 0 : 0;
  if (dim_arg) {
    auto v = detail::number_constant(*dim_arg);
    if (!v) return std::nullopt;
    d = static_cast<int64_t>(*v);
  }
  if (d < 0) d += in.rank();
  if (d < 0 || d >= in.rank()) return std::nullopt;
  int64_t start = 0;
  if (unbind) {
    start = static_cast<int64_t>(index);
  } else if (target_in(node, {"aten.split", "aten.chunk"})) {
    const Arg* size_arg = detail::argument(node, 1, target_is(node, "aten.chunk") ? "chunks" : "split_size");
    auto v = size_arg ? detail::number_constant(*size_arg) : std::nullopt;
    if (!v || *v <= 0) return std::nullopt;
    int64_t size = static_cast<int64_t>(*v);
    if (target_is(node, "aten.chunk")) size = (in.shape[d] + size - 1) / size;
    start = static_cast<int64_t>(index) * size;
  } else if (target_is(node, "aten.split_with_sizes")) {
    const Arg* sizes = detail::argument(node, 1, "split_sizes");
    if (sizes == nullptr || !sizes->constant.is_array()) return std::nullopt;
    for (size_t i = 0; i < index && i < sizes->constant.size(); ++i) start += sizes->constant[i].get<int64_t>();
  } else {
    return std::nullopt;
  }
  return std::make_pair(start * in.stride[d], d);
}

// Q, K and V that are pieces of one tensor (split / chunk / unbind of a fused QKV projection):
// read the tensor itself, each piece at its offset. Only when every piece of the node is read
// inside the region.
bool absorb_pieces(const Graph& g, std::vector<ViewedTensor*> tensors, Region& region) {
  bool moved = false;
  for (ViewedTensor* t : tensors) {
    const Node* producer = g.producer(t->source);
    if (producer == nullptr || producer->outputs.size() < 2 ||
        !target_in(*producer, {"aten.split", "aten.split_with_sizes", "aten.chunk", "aten.unbind"})) {
      continue;
    }
    bool inside = true;
    for (const auto& out : producer->outputs) inside = inside && readers_inside(g, out, region);
    if (!inside) continue;
    auto input = first_tensor(*producer);
    if (!input) continue;
    std::vector<std::pair<ViewedTensor*, int64_t>> moves;
    for (ViewedTensor* u : tensors) {
      auto it = std::find(producer->outputs.begin(), producer->outputs.end(), u->source);
      if (it == producer->outputs.end()) continue;
      auto start = piece_start(g, *producer, static_cast<size_t>(it - producer->outputs.begin()));
      if (!start) {
        moves.clear();
        break;
      }
      moves.emplace_back(u, start->first);
    }
    if (moves.empty()) continue;
    region.add(producer->id);
    for (auto& [u, offset] : moves) {
      u->offset += offset;
      u->source = *input;
    }
    moved = true;
  }
  return moved;
}

// k / v behind repeat_interleave(x, group, dim=1) or transformers' repeat_kv
// (x[:, :, None, :, :].expand(b, kvh, group, t, d).reshape(b, kvh * group, t, d)): read x.
bool undo_head_repeat(const Graph& g, ViewedTensor& t, Region& region) {
  if (!readers_inside(g, t.source, region)) return false;
  const Node* producer = g.producer(t.source);
  if (producer == nullptr) return false;
  const auto& out = g.value(t.source).desc;
  if (t.view.shape != out.shape || t.view.stride != out.stride || out.rank() != 4) return false;
  if (target_is(*producer, "aten.repeat_interleave")) {
    auto input = first_tensor(*producer);
    const Arg* dim = detail::argument(*producer, 2, "dim");
    auto d = dim ? detail::number_constant(*dim) : std::nullopt;
    if (!input || !d || (*d != 1 && *d != -3)) return false;
    const auto& in = g.value(*input).desc;
    if (in.rank() != 4) return false;
    region.add(producer->id);
    t = {*input, view_of(in), 0};
    return true;
  }
  if (!is_reshape(*producer)) return false;
  auto input = first_tensor(*producer);
  if (!input) return false;
  // The reshape's input: an expanded [B, KVH, G, T, D] with stride 0 along G (a clone of it
  // first, when the reshape was recorded as clone + view).
  const Node* before = g.producer(*input);
  ValueId expanded = *input;
  std::vector<NodeId> taken{producer->id};
  if (before != nullptr && target_in(*before, {"aten.clone", "aten.contiguous"}) && readers_inside(g, *input, region, producer)) {
    auto inner = first_tensor(*before);
    if (!inner) return false;
    taken.push_back(before->id);
    expanded = *inner;
  }
  const auto& e = g.value(expanded).desc;
  if (e.rank() != 5 || e.stride[2] != 0 || e.shape[0] != out.shape[0] || e.shape[1] * e.shape[2] != out.shape[1] ||
      e.shape[3] != out.shape[2] || e.shape[4] != out.shape[3]) {
    return false;
  }
  for (const auto& id : taken) region.add(id);
  t = {expanded, {{e.shape[0], e.shape[1], e.shape[3], e.shape[4]}, {e.stride[0], e.stride[1], e.stride[3], e.stride[4]}}, 0};
  return true;
}

// A scale applied to the operand itself before the product (q * d**-0.5): fold it into the
// softmax scale and read the scale's input.
bool absorb_scale(const Graph& g, ViewedTensor& t, Region& region, double& scale) {
  if (!readers_inside(g, t.source, region)) return false;
  const Node* producer = g.producer(t.source);
  if (producer == nullptr || producer->target != "fact.scale") return false;
  const auto& out = g.value(t.source).desc;
  if (t.view.shape != out.shape || t.view.stride != out.stride || t.offset != 0) return false;
  auto input = first_tensor(*producer);
  if (!input || g.value(*input).desc.shape != out.shape) return false;
  region.add(producer->id);
  scale *= producer->attrs.at("value").get<double>();
  t = {*input, view_of(g.value(*input).desc), 0};
  return true;
}

// Everything that leads Q, K and V back to the memory they read.
void trace_inputs(const Graph& g, ViewedTensor& q, ViewedTensor& k, ViewedTensor& v, Region& region, double* scale) {
  for (int round = 0; round < 32; ++round) {
    bool moved = false;
    for (ViewedTensor* t : {&q, &k, &v}) {
      moved |= peel_aliases(g, *t, region);
      // A scale on q or k scales the scores; one on v would scale the output (not folded).
      if (scale && t != &v) moved |= absorb_scale(g, *t, region, *scale);
      moved |= absorb_slice(g, *t, region);
      moved |= absorb_copy(g, *t, region);
    }
    for (ViewedTensor* t : {&k, &v}) moved |= undo_head_repeat(g, *t, region);
    moved |= absorb_pieces(g, {&q, &k, &v}, region);
    if (!moved) break;
  }
}

// The inverse of a value-preserving view-like node: the view of its input, given the view of
// its output (both over the same memory); nullopt when it is not a bijection.
std::optional<StridedView> invert_view(const Graph& g, const Node& node, const StridedView& out) {
  auto input = first_tensor(node);
  if (!input) return std::nullopt;
  const auto& in = g.value(*input).desc;
  if (target_in(node, {"aten.alias", "aten.detach", "aten.clone", "aten.contiguous"})) return out;
  if (is_reshape(node)) {
    auto strides = restride(out, in.shape);
    if (!strides) return std::nullopt;
    return StridedView{in.shape, *strides};
  }
  // Permutations: the output's dim i is the input's dim p[i].
  std::vector<int64_t> p;
  const size_t r = out.rank();
  if (target_is(node, "aten.transpose") || target_is(node, "aten.t")) {
    int64_t d0 = 0, d1 = 1;
    if (target_is(node, "aten.transpose")) {
      const Arg* a0 = detail::argument(node, 1, "dim0");
      const Arg* a1 = detail::argument(node, 2, "dim1");
      auto x0 = a0 ? detail::number_constant(*a0) : std::nullopt;
      auto x1 = a1 ? detail::number_constant(*a1) : std::nullopt;
      if (!x0 || !x1) return std::nullopt;
      d0 = static_cast<int64_t>(*x0);
      d1 = static_cast<int64_t>(*x1);
    }
    if (d0 < 0) d0 += static_cast<int64_t>(r);
    if (d1 < 0) d1 += static_cast<int64_t>(r);
    if (d0 < 0 || d1 < 0 || d0 >= static_cast<int64_t>(r) || d1 >= static_cast<int64_t>(r)) return std::nullopt;
    for (size_t i = 0; i < r; ++i) p.push_back(static_cast<int64_t>(i));
    std::swap(p[d0], p[d1]);
  } else if (target_is(node, "aten.permute")) {
    const Arg* dims = detail::argument(node, 1, "dims");
    if (dims == nullptr || !dims->constant.is_array() || dims->constant.size() != r) return std::nullopt;
    for (const auto& d : dims->constant) {
      int64_t x = d.get<int64_t>();
      if (x < 0) x += static_cast<int64_t>(r);
      p.push_back(x);
    }
  } else {
    return std::nullopt;
  }
  StridedView view{std::vector<int64_t>(r), std::vector<int64_t>(r)};
  for (size_t i = 0; i < r; ++i) {
    if (p[i] < 0 || p[i] >= static_cast<int64_t>(r)) return std::nullopt;
    view.shape[p[i]] = out.shape[i];
    view.stride[p[i]] = out.stride[i];
  }
  if (view.shape != in.shape) return std::nullopt;
  return view;
}

// The head merge after the attention: the longest chain of view-like nodes from `y` (each
// the only reader of the one before) that maps y's elements one to one onto the chain's last
// value. Returns that value and y's [B, H, T, D] view of its memory (y itself when there is
// no chain).
std::pair<ValueId, StridedView> merge_heads(const Graph& g, const ValueId& y, Region& region) {
  std::vector<const Node*> chain;
  ValueId current = y;
  while (!g.is_graph_output(current)) {
    const auto readers = g.consumers(current);
    if (readers.size() != 1) break;
    const Node* next = readers.front();
    if (next->outputs.size() != 1 || !is_view_like(*next) || target_is(*next, "aten.expand")) break;
    auto input = first_tensor(*next);
    if (!input || *input != current) break;
    chain.push_back(next);
    current = next->outputs.front();
  }
  for (size_t length = chain.size(); length > 0; --length) {
    const ValueId last = chain[length - 1]->outputs.front();
    std::optional<StridedView> view = view_of(g.value(last).desc);
    for (size_t i = length; i-- > 0 && view;) view = invert_view(g, *chain[i], *view);
    if (!view || view->shape != g.value(y).desc.shape) continue;
    for (size_t i = 0; i < length; ++i) region.add(chain[i]->id);
    return {last, *view};
  }
  return {y, view_of(g.value(y).desc)};
}

json view_json(const ViewedTensor& t) {
  return {{"value", t.source}, {"shape", t.view.shape}, {"stride", t.view.stride}, {"offset", t.offset}};
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

// The mask's part of the region: the single-reader chain of unary nodes computing it from its
// source (slice, eq, alias, to, tril, ...), when every value on it is read inside the region.
ValueId take_mask_chain(const Graph& g, const ValueId& mask, Region& region) {
  ValueId source = mask;
  while (readers_inside(g, source, region)) {
    const Node* producer = g.producer(source);
    if (producer == nullptr || producer->outputs.size() != 1) break;
    const auto inputs = tensor_args(*producer);
    if (inputs.size() > 1) break;
    region.add(producer->id);
    if (inputs.empty()) break;
    source = inputs.front();
  }
  return source;
}

struct MaskFacts {
  MaskKind kind = MaskKind::None;
  int64_t window = 0;  // a causal sliding window (0: none)
  std::string evidence = "no mask";
  std::string unsupported;
  json description = nullptr;
  json key_mask = nullptr;  // a boolean key mask read in place (kind/problem.hpp's KeyMask), or null
};

// Readings of the masks of one graph: a mask shared by every layer is evaluated once.
using MaskCache = std::map<std::tuple<ValueId, int, int64_t, int64_t>, MaskReading>;

// What the mask `value` used as `use` means for the kernel.
MaskFacts read_attention_mask(const Graph& g, const ValueId& value, MaskUse use, int64_t seq, int64_t kv_seq,
                              const ValueId& source, const char* how, MaskCache& cache) {
  MaskFacts facts;
  const graph::Value& src = g.value(source);
  facts.description = {{"kind", how}, {"value", source}, {"source", src.target.empty() ? src.id : src.target}};
  const auto key = std::make_tuple(value, static_cast<int>(use), seq, kv_seq);
  auto found = cache.find(key);
  if (found == cache.end()) found = cache.emplace(key, read_mask(g, value, use, seq, kv_seq)).first;
  const MaskReading& reading = found->second;
  facts.evidence = reading.detail;
  switch (reading.kind) {
    case MaskReading::Kind::AllVisible: facts.kind = MaskKind::None; break;
    case MaskReading::Kind::CausalTopLeft: facts.kind = MaskKind::CausalTopLeft; break;
    case MaskReading::Kind::CausalBottomRight: facts.kind = MaskKind::CausalBottomRight; break;
    case MaskReading::Kind::CausalWindow:
      facts.kind = MaskKind::CausalTopLeft;
      facts.window = reading.window;
      break;
    case MaskReading::Kind::Other:
      facts.unsupported = "mask: " + reading.detail + " (the kernel takes causal masks or none)";
      break;
    case MaskReading::Kind::Unknown:
      facts.unsupported = "mask not known to be causal: " + reading.detail;
      break;
  }
  return facts;
}

// The mask's operand and what it means. A mask the reading leaves unsupported (one that depends
// on a model input) is a key mask when mask.hpp's read_key_mask proves it the same for every
// query and head and it is boolean: the kernel then reads its row 0 per batch entry in place,
// through the views that alias it (no chain of its computation is taken into the region).
// Otherwise the mask's unary chain joins the region as before.
struct MaskOperand {
  MaskFacts facts;
  ValueId source;
};
MaskOperand take_mask(const Graph& g, const ValueId& mask_value, MaskUse use, int64_t batch, int64_t seq,
                      int64_t kv_seq, const char* how, Region& region, MaskCache& cache) {
  Region with_chain = region;
  const ValueId chain_source = take_mask_chain(g, mask_value, with_chain);
  MaskFacts facts = read_attention_mask(g, mask_value, use, seq, kv_seq, chain_source, how, cache);
  if (facts.unsupported.empty() || facts.kind != MaskKind::None) {
    region = with_chain;
    return {facts, chain_source};
  }
  const KeyMaskReading key = read_key_mask(g, mask_value);
  const graph::TensorDesc& desc = g.value(mask_value).desc;
  const size_t rank = desc.shape.size();
  std::string why_not;
  if (!key.key_mask) {
    why_not = key.detail;
  } else if (use == MaskUse::Additive || desc.dtype != graph::DType::Bool) {
    why_not = "an additive key mask (the kernel reads boolean key masks)";
  } else if (rank == 0 || rank > 4 || (desc.shape[rank - 1] != kv_seq && desc.shape[rank - 1] != 1)) {
    why_not = "a key mask of shape " + desc.to_string() + " against " + std::to_string(kv_seq) + " keys";
  }
  if (!why_not.empty()) {
    facts.unsupported += " (" + why_not + ")";
    region = with_chain;
    return {facts, chain_source};
  }
  ViewedTensor m{mask_value, view_of(desc)};
  peel_aliases(g, m, region);
  // A dim the mask broadcasts (extent 1 against more batch entries or keys) has stride 0; one
  // it holds keeps its stride, also at extent 1 (a batch of 1 where the batch is a symbol).
  const bool batch_broadcast = rank < 4 || (m.view.shape[rank - 4] == 1 && batch > 1);
  const bool key_broadcast = m.view.shape[rank - 1] == 1 && kv_seq > 1;
  facts.unsupported.clear();
  facts.evidence = key.detail;
  facts.key_mask = {{"value", m.source},
                    {"keep", use == MaskUse::KeepWhereTrue},
                    {"batch_stride", batch_broadcast ? 0 : m.view.stride[rank - 4]},
                    {"key_stride", key_broadcast ? 0 : m.view.stride[rank - 1]},
                    {"offset", m.offset}};
  facts.description["kind"] = std::string(how) + "_key_mask";
  facts.description["value"] = m.source;
  return {facts, m.source};
}

// A recognized attention: the region it replaces, the node's attrs and args, its output.
struct Analysis {
  Region region;
  json attrs;
  std::vector<Arg> args;
  ValueId output;
};

// Every value the region produces, but the output, is read only inside it.
bool self_contained(const Graph& g, const Analysis& a) {
  for (const auto& id : a.region.order) {
    const Node* node = g.node(id);
    if (node == nullptr) return false;
    for (const auto& out : node->outputs) {
      if (out == a.output) continue;
      if (!readers_inside(g, out, a.region)) return false;
    }
  }
  return true;
}

// Whether a kernel could compute it in some precision mode (bf16/fp16 kernels run native ones,
// the float32 kernels strict and tf32 ones; the rule says which mode the run has, and why not).
bool kernel_takes(const Analysis& a, const Graph& g) {
  json desc = a.attrs;
  desc["dtype"] = graph::dtype_name(g.value(a.output).desc.dtype);
  try {
    const AttentionProblem p = attention_problem_from_json(desc);
    for (core::PrecisionMode precision : {core::PrecisionMode::Native, core::PrecisionMode::Strict}) {
      if (!attention_decline_reason(p, precision).has_value()) return true;
    }
    return false;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

void replace(Graph& g, Analysis a) {
  Node attention;
  attention.id = detail::fresh_node_id(g, "attention");
  attention.target = "fact.attention";
  attention.args = std::move(a.args);
  attention.outputs = {a.output};
  attention.attrs = std::move(a.attrs);
  detail::replace_region(g, a.region.order, std::move(attention));
}

json finish_attrs(json attrs, const Graph& g, const ValueId& output, const StridedView& out_view,
                  const MaskFacts& mask, double scale, double dropout, std::string unsupported, graph::DType softmax_dtype) {
  attrs["out"] = {{"value", output}, {"shape", out_view.shape}, {"stride", out_view.stride}, {"offset", 0}};
  attrs["mask_kind"] = mask_kind_name(mask.kind);
  attrs["causal"] = mask.kind != MaskKind::None;
  attrs["causal_evidence"] = mask.evidence;
  attrs["window"] = mask.window;
  attrs["mask"] = mask.description;
  attrs["key_mask"] = mask.key_mask;
  attrs["scale"] = scale;
  attrs["dropout"] = dropout;
  if (unsupported.empty()) unsupported = mask.unsupported;
  attrs["unsupported"] = unsupported;
  attrs["softmax_dtype"] = graph::dtype_name(softmax_dtype);
  attrs["dtype"] = graph::dtype_name(g.value(output).desc.dtype);
  return attrs;
}

// How PyTorch trains a written-out attention with a fused backward (FACT's kernel has none):
// its scaled_dot_product_attention over the products' own operands, q and kᵀ of the scores
// product (kᵀ transposed back) and v of the output product, with the scale applied after the
// scores product and the causal flag; fact.compose.training_forms traces it in place of the
// output product's call (docs/plan.md, "training_form"). {"declined": why} where that would not
// compute the same function or the products are not calls it can take (einsum).
// `unsupported`: the attention's own reason (finish_attrs's, the mask's included).
json training_form(const Node& scores, const Node& output, const MaskFacts& mask, double scale, int64_t seq,
                   int64_t kv_seq, double dropout, const std::string& unsupported) {
  std::string why;
  if (!unsupported.empty()) {
    why = unsupported;
  } else if (target_is(scores, "aten.einsum") || target_is(output, "aten.einsum")) {
    why = "its products are einsums";
  } else if (dropout > 0) {
    why = "dropout in training mode (a random mask between the softmax and the product)";
  } else if (!mask.key_mask.is_null()) {
    why = "a key mask (the fused form takes a causal flag only)";
  } else if (mask.window > 0) {
    why = "a sliding window (the fused form takes a causal flag only)";
  } else if (mask.kind == MaskKind::CausalBottomRight && seq != kv_seq) {
    why = "bottom-right causal alignment over unequal lengths (the fused form's is_causal is top-left)";
  }
  if (!why.empty()) return {{"declined", why}};
  return {{"op", "aten.scaled_dot_product_attention.default"},
          {"replaces", output.id},
          {"args", json::array({{{"node", scores.id}, {"arg", 0}},
                                {{"node", scores.id}, {"arg", 1}, {"transpose", json::array({-2, -1})}},
                                {{"node", output.id}, {"arg", 1}}})},
          {"kwargs", {{"is_causal", mask.kind != MaskKind::None}, {"scale", scale}}},
          {"what", "PyTorch's fused attention (forward and backward) instead of the written-out products and "
                   "softmax: FACT's attention kernel has no backward"}};
}

bool softmax_over_last_dim(const Graph& g, const Node& softmax) {
  const Arg* dim = detail::argument(softmax, 1, "dim");
  auto d = dim ? detail::number_constant(*dim) : std::nullopt;
  if (!d) return false;
  const int64_t rank = g.value(softmax.outputs.front()).desc.rank();
  return *d == -1 || *d == rank - 1;
}

// Walks from `x` back through casts; returns the value before them.
ValueId skip_casts(const Graph& g, ValueId x, Region& region) {
  while (true) {
    const Node* n = g.producer(x);
    if (n == nullptr || !is_cast(*n) || n->outputs.size() != 1) return x;
    auto input = first_tensor(*n);
    if (!input) return x;
    region.add(n->id);
    x = *input;
  }
}

// The scores' producer chain below `x`: casts and one fact.scale, then fact.gemm (q·kᵀ)?
const Node* scores_gemm(const Graph& g, ValueId x) {
  for (int steps = 0; steps < 8; ++steps) {
    const Node* n = g.producer(x);
    if (n == nullptr) return nullptr;
    if (is_product(*n)) return n;
    if (!is_cast(*n) && n->target != "fact.scale") return nullptr;
    auto input = first_tensor(*n);
    if (!input) return nullptr;
    x = *input;
  }
  return nullptr;
}

bool very_negative(std::optional<double> v) { return v && *v <= -1e4; }

std::optional<Analysis> analyze_decomposed(const Graph& g, const Node& pv_node, MaskCache& cache) {
  const std::optional<Product> pv = as_product(g, pv_node, /*scores=*/false);
  if (!pv || pv->alpha != 1.0) return std::nullopt;
  const std::optional<ValueId> probs = pv->a_input;
  const Node& pv_ref = pv_node;
  Region region;
  region.add(pv_ref.id);
  double scale = 1.0, dropout = 0.0;
  std::string unsupported;

  // probs ← [dropout] ← [casts] ← softmax
  ValueId x = *probs;
  while (true) {
    const Node* n = g.producer(x);
    if (n == nullptr) return std::nullopt;
    if (target_is(*n, "aten.dropout") || target_is(*n, "aten.native_dropout")) {
      const Arg* p = detail::argument(*n, 1, "p");
      const Arg* train = detail::argument(*n, 2, "train");
      const double prob = p ? detail::number_constant(*p).value_or(1.0) : 0.0;
      const bool training = train == nullptr || !train->constant.is_boolean() || train->constant.get<bool>();
      if (training && prob > 0) {
        dropout = prob;
        unsupported = "dropout p=" + std::to_string(prob).substr(0, 6) + " in training mode (the kernel has no dropout)";
      }
    } else if (!is_cast(*n)) {
      break;
    }
    auto input = first_tensor(*n);
    if (!input || n->outputs.size() != 1) return std::nullopt;
    region.add(n->id);
    x = *input;
  }
  const Node* softmax = g.producer(x);
  if (softmax == nullptr || !target_in(*softmax, {"aten.softmax", "aten._softmax", "aten._safe_softmax"}) ||
      !softmax_over_last_dim(g, *softmax)) {
    return std::nullopt;
  }
  region.add(softmax->id);
  const graph::DType softmax_dtype = g.value(softmax->outputs.front()).desc.dtype;
  x = skip_casts(g, *first_tensor(*softmax), region);
  if (const Node* n = g.producer(x); n != nullptr && n->target == "fact.scale") {
    scale *= n->attrs.at("value").get<double>();
    region.add(n->id);
    x = skip_casts(g, *first_tensor(*n), region);
  }

  // [mask]
  std::optional<ValueId> mask_value;
  std::optional<MaskUse> mask_use;
  const char* mask_how = "";
  if (const Node* n = g.producer(x); n != nullptr && scores_gemm(g, x) == nullptr) {
    if (target_in(*n, {"aten.masked_fill", "aten.masked_fill_"})) {
      const Arg* scores = detail::argument(*n, 0, "self");
      const Arg* mask = detail::argument(*n, 1, "mask");
      const Arg* fill = detail::argument(*n, 2, "value");
      if (!scores || !scores->is_tensor() || !mask || !mask->is_tensor() || !fill) return std::nullopt;
      if (!very_negative(scalar_value(g, *fill))) return std::nullopt;
      mask_value = mask->tensor;
      mask_use = MaskUse::FillWhereTrue;
      mask_how = "fill";
      region.add(n->id);
      x = scores->tensor;
    } else if (target_is(*n, "aten.where")) {
      const Arg* cond = detail::argument(*n, 0, "condition");
      const Arg* a = detail::argument(*n, 1, "self");
      const Arg* b = detail::argument(*n, 2, "other");
      if (!cond || !cond->is_tensor() || !a || !b) return std::nullopt;
      const bool a_scores = a->is_tensor() && scores_gemm(g, a->tensor) != nullptr;
      const bool b_scores = b->is_tensor() && scores_gemm(g, b->tensor) != nullptr;
      if (a_scores == b_scores) return std::nullopt;
      const Arg* fill = a_scores ? b : a;
      if (!very_negative(scalar_value(g, *fill))) return std::nullopt;
      if (fill->is_tensor() && g.producer(fill->tensor) != nullptr) take_mask_chain(g, fill->tensor, region);
      mask_value = cond->tensor;
      mask_use = a_scores ? MaskUse::KeepWhereTrue : MaskUse::FillWhereTrue;
      mask_how = a_scores ? "where_keep" : "where_fill";
      region.add(n->id);
      x = a_scores ? a->tensor : b->tensor;
    } else if (target_is(*n, "aten.add")) {
      const Arg* a = detail::argument(*n, 0, "self");
      const Arg* b = detail::argument(*n, 1, "other");
      if (!a || !b || !a->is_tensor() || !b->is_tensor()) return std::nullopt;
      const Arg* alpha = detail::argument(*n, 2, "alpha");
      if (alpha && detail::number_constant(*alpha).value_or(1.0) != 1.0) return std::nullopt;
      const bool a_scores = scores_gemm(g, a->tensor) != nullptr;
      const bool b_scores = scores_gemm(g, b->tensor) != nullptr;
      if (a_scores == b_scores) return std::nullopt;
      mask_value = skip_casts(g, a_scores ? b->tensor : a->tensor, region);
      mask_use = MaskUse::Additive;
      mask_how = "additive";
      region.add(n->id);
      x = a_scores ? a->tensor : b->tensor;
    } else {
      return std::nullopt;
    }
    x = skip_casts(g, x, region);
    if (const Node* s = g.producer(x); s != nullptr && s->target == "fact.scale") {
      scale *= s->attrs.at("value").get<double>();
      region.add(s->id);
      x = skip_casts(g, *first_tensor(*s), region);
    }
  }
  const Node* qk_node = g.producer(x);
  if (qk_node == nullptr) return std::nullopt;
  const std::optional<Product> qk = as_product(g, *qk_node, /*scores=*/true);
  if (!qk || qk->batch_shape != pv->batch_shape) return std::nullopt;
  // scores [M, N] = q [M, K] · kᵀ [K, N]; out [M, E] = p [M, N] · v [N, E].
  const size_t qr = qk->a.view.rank(), pr = pv->a.view.rank();
  if (qr < 2 || pr < 2 || qk->a.view.shape[qr - 2] != pv->a.view.shape[pr - 2] ||
      qk->b.view.shape.back() != pv->b.view.shape[pv->b.view.rank() - 2]) {
    return std::nullopt;
  }
  region.add(qk_node->id);
  scale *= qk->alpha;

  ViewedTensor q = qk->a;
  ViewedTensor kt = qk->b;
  ViewedTensor v = pv->b;
  ViewedTensor k = kt;
  const size_t kr = k.view.rank();
  if (kr < 2) return std::nullopt;
  std::swap(k.view.shape[kr - 2], k.view.shape[kr - 1]);
  std::swap(k.view.stride[kr - 2], k.view.stride[kr - 1]);

  const int64_t seq = q.view.shape[q.view.rank() - 2];
  const int64_t kv_seq = k.view.shape[kr - 2];
  MaskFacts mask;
  std::optional<ValueId> mask_source;
  if (mask_value) {
    const int64_t batch = q.view.rank() >= 3 ? q.view.shape[0] : 1;
    MaskOperand taken = take_mask(g, *mask_value, *mask_use, batch, seq, kv_seq, mask_how, region, cache);
    mask = std::move(taken.facts);
    mask_source = taken.source;
  }
  const double product_scale = scale;  // what applies after the scores product (not q's own)
  trace_inputs(g, q, k, v, region, &scale);
  auto [output, out_view] = merge_heads(g, pv_ref.outputs.front(), region);

  json attrs;
  fill_dims(attrs, q, k, v);
  attrs = finish_attrs(std::move(attrs), g, output, out_view, mask, scale, dropout, unsupported, softmax_dtype);
  attrs["training_form"] = training_form(*qk_node, pv_ref, mask, product_scale, seq, kv_seq, dropout,
                                         attrs["unsupported"].get<std::string>());
  std::vector<Arg> args = {Arg::of_tensor(q.source), Arg::of_tensor(k.source), Arg::of_tensor(v.source)};
  if (mask_source) args.push_back(Arg::of_tensor(*mask_source));
  return Analysis{std::move(region), std::move(attrs), std::move(args), output};
}

std::optional<Analysis> analyze_sdpa(const Graph& g, const Node& sdpa, MaskCache& cache) {
  if (sdpa.outputs.empty()) return std::nullopt;
  const Arg* qa = detail::argument(sdpa, 0, "query");
  const Arg* ka = detail::argument(sdpa, 1, "key");
  const Arg* va = detail::argument(sdpa, 2, "value");
  if (!qa || !ka || !va || !qa->is_tensor() || !ka->is_tensor() || !va->is_tensor()) return std::nullopt;
  ViewedTensor q{qa->tensor, view_of(g.value(qa->tensor).desc)};
  ViewedTensor k{ka->tensor, view_of(g.value(ka->tensor).desc)};
  ViewedTensor v{va->tensor, view_of(g.value(va->tensor).desc)};
  if (q.view.rank() < 3 || k.view.rank() != q.view.rank() || v.view.rank() != q.view.rank()) return std::nullopt;
  Region region;
  region.add(sdpa.id);
  const Arg* mask_arg = detail::argument(sdpa, 3, "attn_mask");
  const Arg* dropout_arg = detail::argument(sdpa, 4, "dropout_p");
  const Arg* causal_arg = detail::argument(sdpa, 5, "is_causal");
  const Arg* scale_arg = detail::argument(sdpa, 6, "scale");
  const double dropout = dropout_arg ? detail::number_constant(*dropout_arg).value_or(0.0) : 0.0;
  std::string unsupported;
  if (dropout > 0) unsupported = "dropout_p=" + std::to_string(dropout).substr(0, 6) + " (the kernel has no dropout)";
  const bool is_causal = causal_arg && causal_arg->constant.is_boolean() && causal_arg->constant.get<bool>();
  double scale = 1.0 / std::sqrt(double(q.view.shape.back()));
  if (scale_arg) {
    if (auto s = detail::number_constant(*scale_arg)) scale = *s;
  }
  const int64_t seq = q.view.shape[q.view.rank() - 2];
  const int64_t kv_seq = k.view.shape[k.view.rank() - 2];
  MaskFacts mask;
  if (is_causal) {
    mask.kind = MaskKind::CausalTopLeft;
    mask.evidence = "is_causal=True (top-left aligned)";
  }
  std::optional<ValueId> mask_source;
  if (mask_arg && mask_arg->is_tensor()) {
    const ValueId mask_value = mask_arg->tensor;
    const bool boolean = g.value(mask_value).desc.dtype == graph::DType::Bool;
    const int64_t batch = q.view.rank() >= 3 ? q.view.shape[0] : 1;
    MaskOperand taken = take_mask(g, mask_value, boolean ? MaskUse::KeepWhereTrue : MaskUse::Additive, batch, seq,
                                  kv_seq, boolean ? "sdpa_bool" : "sdpa_additive", region, cache);
    mask = std::move(taken.facts);
    mask_source = taken.source;
  }
  trace_inputs(g, q, k, v, region, nullptr);
  auto [output, out_view] = merge_heads(g, sdpa.outputs.front(), region);
  json attrs;
  fill_dims(attrs, q, k, v);
  attrs = finish_attrs(std::move(attrs), g, output, out_view, mask, scale, dropout, unsupported,
                       g.value(sdpa.outputs.front()).desc.dtype);
  std::vector<Arg> args = {Arg::of_tensor(q.source), Arg::of_tensor(k.source), Arg::of_tensor(v.source)};
  if (mask_source) args.push_back(Arg::of_tensor(*mask_source));
  return Analysis{std::move(region), std::move(attrs), std::move(args), output};
}

}  // namespace

std::optional<LeftAttention> left_attention(const Graph& g, const Node& node) {
  if (!is_product(node)) return std::nullopt;
  MaskCache cache;
  try {
    std::optional<Analysis> a = analyze_decomposed(g, node, cache);
    if (!a || !self_contained(g, *a) || kernel_takes(*a, g)) return std::nullopt;
    LeftAttention left;
    left.problem = a->attrs;
    left.problem["dtype"] = graph::dtype_name(g.value(a->output).desc.dtype);
    left.nodes = detail::origin_of(g, a->region.order);
    left.args = a->args;
    left.output = a->output;
    return left;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void canonicalize_attention(Graph& g) {
  MaskCache cache;
  std::vector<NodeId> candidates;
  for (const auto& node : g.nodes()) {
    if (is_product(node) || target_is(node, "aten.scaled_dot_product_attention")) candidates.push_back(node.id);
  }
  for (const auto& id : candidates) {
    const Node* node = g.node(id);
    if (node == nullptr) continue;
    const Node copy = *node;
    // A form this pass cannot read stays as it is: canonicalization never fails discovery.
    // (Each rewrite changes the graph only in its last step.)
    try {
      // A decomposed attention no kernel takes stays as it is: its products remain GEMMs the
      // GEMM pattern composes, and the rule reports the attention's decline (left_attention).
      // An SDPA call has no such fallback: it becomes fact.attention, accepted or declined.
      const bool decomposed = is_product(copy);
      std::optional<Analysis> a = decomposed ? analyze_decomposed(g, copy, cache) : analyze_sdpa(g, copy, cache);
      if (!a || !self_contained(g, *a)) continue;
      if (decomposed && !kernel_takes(*a, g)) continue;
      replace(g, std::move(*a));
    } catch (const std::exception&) {
    }
  }
}

const discover::CanonicalPassRegistrar kPass{{"attention", 500, &canonicalize_attention}};

}  // namespace fact::attention
