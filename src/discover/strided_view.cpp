#include "fact/discover/strided_view.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "fact/discover/rule.hpp"

namespace fact::discover {

namespace {

using nlohmann::json;

std::optional<int64_t> int_constant(const graph::Arg& arg) {
  if (arg.kind != graph::Arg::Kind::Constant || !arg.constant.is_number_integer()) return std::nullopt;
  return arg.constant.get<int64_t>();
}

std::optional<std::vector<int64_t>> int_list_constant(const graph::Arg& arg) {
  if (arg.kind != graph::Arg::Kind::Constant) return std::nullopt;
  if (arg.constant.is_number_integer()) return std::vector<int64_t>{arg.constant.get<int64_t>()};
  if (!arg.constant.is_array()) return std::nullopt;
  std::vector<int64_t> values;
  for (const auto& entry : arg.constant) {
    if (!entry.is_number_integer()) return std::nullopt;
    values.push_back(entry.get<int64_t>());
  }
  return values;
}

std::optional<size_t> wrap_dim(int64_t dim, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (dim < 0) dim += r;
  if (dim < 0 || dim >= std::max<int64_t>(r, 1)) return std::nullopt;
  return static_cast<size_t>(dim);
}

// Positional argument `index`, or keyword `name`.
const graph::Arg* argument(const graph::Node& node, size_t index, const char* name) {
  if (index < node.args.size()) return &node.args[index];
  auto it = node.kwargs.find(name);
  return it == node.kwargs.end() ? nullptr : &it->second;
}

std::optional<StridedView> apply_permute(const StridedView& in, const std::vector<int64_t>& dims) {
  if (dims.size() != in.rank()) return std::nullopt;
  StridedView out;
  std::vector<bool> seen(in.rank(), false);
  for (int64_t d : dims) {
    auto axis = wrap_dim(d, in.rank());
    if (!axis || seen[*axis]) return std::nullopt;
    seen[*axis] = true;
    out.shape.push_back(in.shape[*axis]);
    out.stride.push_back(in.stride[*axis]);
  }
  return out;
}

std::optional<StridedView> apply_expand(const StridedView& in, const std::vector<int64_t>& sizes) {
  if (sizes.size() < in.rank()) return std::nullopt;
  const size_t added = sizes.size() - in.rank();
  StridedView out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < added) {
      if (sizes[i] < 0) return std::nullopt;
      out.shape.push_back(sizes[i]);
      out.stride.push_back(0);
      continue;
    }
    const int64_t size = in.shape[i - added];
    const int64_t stride = in.stride[i - added];
    if (sizes[i] == -1 || sizes[i] == size) {
      out.shape.push_back(size);
      out.stride.push_back(stride);
    } else if (size == 1) {
      out.shape.push_back(sizes[i]);
      out.stride.push_back(0);
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace

StridedView view_of(const graph::TensorDesc& desc) { return {desc.shape, desc.stride}; }

std::string shape_text(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  out << ']';
  return out.str();
}

std::optional<std::vector<int64_t>> restride(const StridedView& v, std::vector<int64_t> new_shape) {
  const int64_t numel = std::accumulate(v.shape.begin(), v.shape.end(), int64_t{1},
                                        std::multiplies<>());
  int64_t known = 1;
  std::optional<size_t> inferred;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      if (inferred) return std::nullopt;
      inferred = i;
    } else {
      known *= new_shape[i];
    }
  }
  if (inferred) {
    if (known == 0 || numel % known != 0) return std::nullopt;
    new_shape[*inferred] = numel / known;
  } else if (known != numel) {
    return std::nullopt;
  }
  std::vector<int64_t> strides(new_shape.size(), 1);
  if (numel == 0) return strides;
  // Walk the old dims from the innermost, grouping runs that are contiguous with each other;
  // each run must be covered exactly by a run of new dims.
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_stride = v.stride.empty() ? 1 : v.stride.back();
  int64_t old_run = 1;
  int64_t new_run = 1;
  for (int64_t d = static_cast<int64_t>(v.rank()) - 1; d >= 0; --d) {
    old_run *= v.shape[d];
    const bool run_ends =
        d == 0 || (v.shape[d - 1] != 1 && v.stride[d - 1] != old_run * chunk_stride);
    if (!run_ends) continue;
    while (view_d >= 0 && (new_run < old_run || new_shape[view_d] == 1)) {
      strides[view_d] = new_run * chunk_stride;
      new_run *= new_shape[view_d];
      --view_d;
    }
    if (new_run != old_run) return std::nullopt;
    if (d > 0) {
      chunk_stride = v.stride[d - 1];
      old_run = 1;
      new_run = 1;
    }
  }
  if (view_d != -1) {
    // Remaining new dims must all be 1 (a rank-0 source, or trailing unit dims).
    while (view_d >= 0) {
      if (new_shape[view_d] != 1) return std::nullopt;
      strides[view_d] = 1;
      --view_d;
    }
  }
  return strides;
}

std::optional<int64_t> collapse_dims(const StridedView& v, size_t first, size_t last) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), innermost first
  for (size_t i = last; i-- > first;) {
    if (v.shape[i] != 1) dims.emplace_back(v.shape[i], v.stride[i]);
  }
  if (dims.empty()) return 0;
  const bool all_broadcast = std::all_of(dims.begin(), dims.end(),
                                         [](const auto& d) { return d.second == 0; });
  if (all_broadcast) return 0;
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i].second != dims[i - 1].second * dims[i - 1].first || dims[i].second == 0)
      return std::nullopt;
  }
  return dims.front().second;
}

bool is_reshape(const graph::Node& node) {
  return target_in(node, {"aten.view", "aten.reshape", "aten._unsafe_view"});
}

bool is_view_like(const graph::Node& node) {
  return is_reshape(node) ||
         target_in(node, {"aten.expand", "aten.t", "aten.transpose", "aten.permute",
                          "aten.unsqueeze", "aten.squeeze", "aten.alias", "aten.detach",
                          "aten.clone", "aten.contiguous"});
}

std::optional<StridedView> apply_view_like(const graph::Node& node, const StridedView& in) {
  if (is_reshape(node)) {
    const graph::Arg* sizes_arg = argument(node, 1, "size");
    if (sizes_arg == nullptr) sizes_arg = argument(node, 1, "shape");
    auto sizes = sizes_arg ? int_list_constant(*sizes_arg) : std::nullopt;
    if (!sizes) return std::nullopt;
    auto strides = restride(in, *sizes);
    if (!strides) return std::nullopt;
    std::vector<int64_t> shape = *sizes;
    const int64_t numel = std::accumulate(in.shape.begin(), in.shape.end(), int64_t{1},
                                          std::multiplies<>());
    for (auto& s : shape) {
      if (s == -1) {
        int64_t others = 1;
        for (auto t : *sizes) others *= (t == -1 ? 1 : t);
        s = others == 0 ? 0 : numel / others;
      }
    }
    return StridedView{shape, *strides};
  }
  if (target_in(node, {"aten.alias", "aten.detach", "aten.clone", "aten.contiguous"})) return in;
  if (target_is(node, "aten.t")) {
    if (in.rank() < 2) return in;
    return apply_permute(in, {1, 0});
  }
  if (target_is(node, "aten.transpose")) {
    const graph::Arg* a0 = argument(node, 1, "dim0");
    const graph::Arg* a1 = argument(node, 2, "dim1");
    auto d0 = a0 ? int_constant(*a0) : std::nullopt;
    auto d1 = a1 ? int_constant(*a1) : std::nullopt;
    if (!d0 || !d1) return std::nullopt;
    auto x0 = wrap_dim(*d0, in.rank());
    auto x1 = wrap_dim(*d1, in.rank());
    if (!x0 || !x1) return std::nullopt;
    StridedView out = in;
    std::swap(out.shape[*x0], out.shape[*x1]);
    std::swap(out.stride[*x0], out.stride[*x1]);
    return out;
  }
  if (target_is(node, "aten.permute")) {
    const graph::Arg* dims_arg = argument(node, 1, "dims");
    auto dims = dims_arg ? int_list_constant(*dims_arg) : std::nullopt;
    if (!dims) return std::nullopt;
    return apply_permute(in, *dims);
  }
  if (target_is(node, "aten.expand")) {
    const graph::Arg* sizes_arg = argument(node, 1, "size");
    auto sizes = sizes_arg ? int_list_constant(*sizes_arg) : std::nullopt;
    if (!sizes) return std::nullopt;
    return apply_expand(in, *sizes);
  }
  if (target_is(node, "aten.unsqueeze")) {
    const graph::Arg* dim_arg = argument(node, 1, "dim");
    auto dim = dim_arg ? int_constant(*dim_arg) : std::nullopt;
    if (!dim) return std::nullopt;
    int64_t d = *dim < 0 ? *dim + static_cast<int64_t>(in.rank()) + 1 : *dim;
    if (d < 0 || d > static_cast<int64_t>(in.rank())) return std::nullopt;
    StridedView out = in;
    const int64_t stride = d < static_cast<int64_t>(in.rank()) ? in.stride[d] * in.shape[d] : 1;
    out.shape.insert(out.shape.begin() + d, 1);
    out.stride.insert(out.stride.begin() + d, stride);
    return out;
  }
  if (target_is(node, "aten.squeeze")) {
    std::vector<bool> drop(in.rank(), false);
    const graph::Arg* dims_arg = argument(node, 1, "dim");
    if (dims_arg == nullptr) {
      for (size_t i = 0; i < in.rank(); ++i) drop[i] = in.shape[i] == 1;
    } else {
      auto dims = int_list_constant(*dims_arg);
      if (!dims) return std::nullopt;
      for (int64_t d : *dims) {
        auto axis = wrap_dim(d, in.rank());
        if (!axis) return std::nullopt;
        drop[*axis] = in.shape[*axis] == 1;
      }
    }
    StridedView out;
    for (size_t i = 0; i < in.rank(); ++i) {
      if (drop[i]) continue;
      out.shape.push_back(in.shape[i]);
      out.stride.push_back(in.stride[i]);
    }
    return out;
  }
  return std::nullopt;
}

TracedOperand trace_operand(const graph::Graph& g, const graph::ValueId& operand,
                            const std::function<bool(const StridedView&)>& accept) {
  // chain[i] = (value, producer) from the operand backwards, while the producer is view-like
  // and its output is read only by the next step.
  std::vector<std::pair<graph::ValueId, const graph::Node*>> chain;
  graph::ValueId current = operand;
  while (true) {
    const graph::Node* producer = g.producer(current);
    if (producer == nullptr || !is_view_like(*producer) || !single_use(g, current)) break;
    const auto inputs = tensor_args(*producer);
    if (inputs.empty() || !g.has_value(inputs.front())) break;
    chain.emplace_back(current, producer);
    current = inputs.front();
  }
  // Try the furthest start first.
  for (size_t start = chain.size() + 1; start-- > 0;) {
    const graph::ValueId source = start == chain.size() ? current : chain[start].first;
    std::optional<StridedView> view = view_of(g.value(source).desc);
    for (size_t i = start; i-- > 0 && view;) view = apply_view_like(*chain[i].second, *view);
    if (!view || view->shape != g.value(operand).desc.shape || !accept(*view)) continue;
    TracedOperand traced{source, *view, {}, true};
    for (size_t i = start; i-- > 0;) traced.absorbed.push_back(chain[i].second->id);
    return traced;
  }
  return {operand, view_of(g.value(operand).desc), {}, false};
}

}  // namespace fact::discover
