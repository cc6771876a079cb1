#include "patterns/attention/discover/mask.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "fact/discover/graph_rewrite.hpp"
#include "fact/discover/rule.hpp"
#include "fact/discover/strided_view.hpp"

namespace fact::attention {

namespace {

using discover::target_in;
using discover::target_is;
using graph::Arg;
using graph::Graph;
using graph::Node;
using graph::ValueId;

// Elements a tensor the evaluator materializes may have (floats: 64 MiB).
constexpr int64_t kMaxElements = int64_t(1) << 24;
// A fill or additive value at or below this hides a score (softmax weight exp(-1e4) = 0).
constexpr double kMasked = -1e4;

// A strided tensor over shared float storage: views (expand, slice, permute, ...) share it.
struct Dense {
  std::shared_ptr<std::vector<float>> data;
  std::vector<int64_t> shape, stride;
  int64_t offset = 0;

  size_t rank() const { return shape.size(); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  float at(const std::vector<int64_t>& index) const {
    int64_t position = offset;
    for (size_t d = 0; d < index.size(); ++d) position += index[d] * stride[d];
    return (*data)[static_cast<size_t>(position)];
  }
};

Dense contiguous_of(std::vector<int64_t> shape) {
  Dense t;
  t.shape = std::move(shape);
  t.stride.assign(t.shape.size(), 0);
  int64_t step = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    t.stride[d] = step;
    step *= std::max<int64_t>(t.shape[d], 1);
  }
  t.data = std::make_shared<std::vector<float>>(static_cast<size_t>(std::max<int64_t>(t.numel(), 0)));
  return t;
}

Dense scalar_of(double v) {
  Dense t = contiguous_of({});
  (*t.data)[0] = static_cast<float>(v);
  return t;
}

// Calls f(index, linear position) for every index of `shape`, row-major.
void for_each_index(const std::vector<int64_t>& shape, const std::function<void(const std::vector<int64_t>&, int64_t)>& f) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  if (total == 0) return;
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    f(index, n);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

std::optional<std::vector<int64_t>> broadcast_shape(const std::vector<const Dense*>& ts) {
  size_t rank = 0;
  for (const Dense* t : ts) rank = std::max(rank, t->rank());
  std::vector<int64_t> shape(rank, 1);
  for (const Dense* t : ts) {
    for (size_t i = 0; i < t->rank(); ++i) {
      const size_t d = rank - t->rank() + i;
      const int64_t s = t->shape[i];
      if (s == shape[d] || s == 1) continue;
      if (shape[d] != 1) return std::nullopt;
      shape[d] = s;
    }
  }
  return shape;
}

// `t` seen with `shape` (right-aligned broadcast: stride 0 where t has extent 1 or no dim).
Dense broadcast_to(const Dense& t, const std::vector<int64_t>& shape) {
  Dense out = t;
  out.shape = shape;
  out.stride.assign(shape.size(), 0);
  for (size_t i = 0; i < t.rank(); ++i) {
    const size_t d = shape.size() - t.rank() + i;
    out.stride[d] = t.shape[i] == 1 ? 0 : t.stride[i];
  }
  return out;
}

// `f` applied element by element to `inputs` broadcast together. A dimension that every input
// broadcasts (stride 0: an expanded batch or head) is computed once and kept broadcast in the
// result, so an expanded [B, 1, S, S] mask costs S x S elements, not B x S x S; `dense` asks
// for a contiguous result instead (a copy a reshape or a triangle then indexes linearly).
std::optional<Dense> elementwise(const std::vector<const Dense*>& inputs,
                                 const std::function<float(const std::vector<float>&)>& f, std::string& why,
                                 bool dense = false) {
  auto shape = broadcast_shape(inputs);
  if (!shape) {
    why = "operands do not broadcast";
    return std::nullopt;
  }
  std::vector<Dense> seen;
  for (const Dense* t : inputs) seen.push_back(broadcast_to(*t, *shape));
  std::vector<int64_t> computed = *shape;
  for (size_t d = 0; d < computed.size(); ++d) {
    bool broadcast = true;
    for (const Dense& t : seen) broadcast = broadcast && t.stride[d] == 0;
    if (broadcast && !dense) computed[d] = std::min<int64_t>(computed[d], 1);
  }
  int64_t elements = 1;
  for (int64_t d : computed) elements *= d;
  if (elements > kMaxElements) {
    why = "a mask tensor of " + std::to_string(elements) + " elements (evaluated up to " +
          std::to_string(kMaxElements) + ")";
    return std::nullopt;
  }
  Dense out = contiguous_of(computed);
  std::vector<float> values(inputs.size());
  for_each_index(computed, [&](const std::vector<int64_t>& index, int64_t n) {
    for (size_t i = 0; i < seen.size(); ++i) values[i] = seen[i].at(index);
    (*out.data)[static_cast<size_t>(n)] = f(values);
  });
  return broadcast_to(out, *shape);
}

// `t` with every dimension along which its values do not change seen as broadcast (stride 0).
// A mask computed per batch entry from inputs every entry shares (transformers' packed-sequence
// ids: a cumsum over position ids expanded over the batch, then indexed by a batch arange)
// then broadcasts its batch again, and element-wise ops over it stay S x S (elementwise()).
Dense broadcast_uniform_dims(Dense t) {
  constexpr int64_t kMaxChecked = int64_t(1) << 22;
  if (t.numel() > kMaxChecked) return t;
  for (size_t d = 0; d < t.rank(); ++d) {
    if (t.shape[d] < 2 || t.stride[d] == 0) continue;
    bool uniform = true;
    std::vector<int64_t> first;
    for_each_index(t.shape, [&](const std::vector<int64_t>& index, int64_t) {
      if (!uniform || index[d] == 0) return;
      first = index;
      first[d] = 0;
      uniform = t.at(index) == t.at(first);
    });
    if (uniform) t.stride[d] = 0;
  }
  return t;
}

std::optional<int64_t> int_arg(const Node& node, size_t index, const char* name) {
  const Arg* arg = discover::detail::argument(node, index, name);
  if (arg == nullptr || arg->kind != Arg::Kind::Constant || !arg->constant.is_number_integer()) return std::nullopt;
  return arg->constant.get<int64_t>();
}

std::optional<size_t> wrap(int64_t dim, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (dim < 0) dim += r;
  if (dim < 0 || dim >= std::max<int64_t>(r, 1)) return std::nullopt;
  return static_cast<size_t>(dim);
}

class Evaluator {
 public:
  // `assumption`: what a buffer whose contents were not captured is taken to hold (see leaf()).
  Evaluator(const Graph& g, int assumption, MaskUse use) : g_(g), assumption_(assumption), use_(use) {}

  std::optional<Dense> eval(const ValueId& id) {
    if (auto it = memo_.find(id); it != memo_.end()) return it->second;
    if (++depth_ > 200) {
      why_ = "the mask is computed by a chain too long to evaluate";
      return std::nullopt;
    }
    std::optional<Dense> result = compute(id);
    --depth_;
    if (result) result = broadcast_uniform_dims(std::move(*result));
    if (result) memo_[id] = *result;
    return result;
  }

  const std::string& why() const { return why_; }
  const std::string& assumed() const { return assumed_; }

  // A scalar argument: a number, or a 0-d tensor the evaluator can compute.
  std::optional<double> scalar(const Arg* arg) {
    if (arg == nullptr) return std::nullopt;
    if (auto n = discover::detail::number_constant(*arg)) return n;
    if (arg->kind == Arg::Kind::Constant && arg->constant.is_boolean()) return arg->constant.get<bool>() ? 1.0 : 0.0;
    if (arg->is_tensor()) {
      auto t = eval(arg->tensor);
      if (t && t->numel() == 1) return (*t->data)[static_cast<size_t>(t->offset)];
    }
    return std::nullopt;
  }

 private:
  std::optional<Dense> fail(std::string why) {
    if (why_.empty()) why_ = std::move(why);
    return std::nullopt;
  }

  // A tensor or scalar operand as a tensor.
  std::optional<Dense> operand(const Arg* arg) {
    if (arg == nullptr) return fail("an argument is missing");
    if (arg->is_tensor()) return eval(arg->tensor);
    if (auto s = scalar(arg)) return scalar_of(*s);
    return fail("an argument is neither a tensor nor a number");
  }

  std::optional<Dense> leaf(const graph::Value& v) {
    if (v.desc.rank() == 0 && v.scalar) return scalar_of(*v.scalar);
    const bool storage = v.kind == graph::ValueKind::Buffer || v.kind == graph::ValueKind::Constant;
    const auto& s = v.desc.shape;
    const std::string name = v.target.empty() ? v.id : v.target;
    if (!storage) return fail("it depends on the model input '" + name + "' (a padding or data-dependent mask)");
    if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2]) {
      return fail("the mask reads '" + name + "', whose contents the capture does not hold");
    }
    const int64_t n = s.back();
    if (n * n > kMaxElements) return fail("the mask buffer '" + name + "' is too large to evaluate");
    // The usual causal buffers, broadcast over their leading dims. A buffer used as an additive
    // mask: 0 on and below the diagonal, -inf above (assumption 0), or tril(ones) that the graph
    // turns into one (assumption 1); otherwise tril(ones), 1 = visible (0), or its complement
    // triu(ones, 1), 1 = hidden (1).
    Dense square = contiguous_of({n, n});
    const bool additive = use_ == MaskUse::Additive && assumption_ == 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const bool lower = j <= i;
        float value = 0.f;
        if (additive) {
          value = lower ? 0.f : -std::numeric_limits<float>::infinity();
        } else if (use_ == MaskUse::Additive || assumption_ == 0) {
          value = lower ? 1.f : 0.f;
        } else {
          value = lower ? 0.f : 1.f;
        }
        (*square.data)[size_t(i * n + j)] = value;
      }
    }
    assumed_ = name;
    return broadcast_to(square, s);
  }

  std::optional<Dense> compute(const ValueId& id) {
    if (!g_.has_value(id)) return fail("unknown value '" + id + "'");
    const graph::Value& value = g_.value(id);
    const Node* node = g_.producer(id);
    if (node == nullptr) return leaf(value);
    const auto& out_shape = value.desc.shape;
    const graph::DType out_dtype = value.desc.dtype;
    auto tensor0 = [&]() -> std::optional<Dense> {
      const Arg* a = discover::detail::argument(*node, 0, "self");
      if (a == nullptr || !a->is_tensor()) return fail(node->target + " without a tensor input");
      return eval(a->tensor);
    };
    auto to_dtype = [&](Dense t) -> std::optional<Dense> {
      if (out_dtype == graph::DType::Bool) {
        auto r = elementwise({&t}, [](const std::vector<float>& x) { return x[0] != 0.f ? 1.f : 0.f; }, why_);
        return r;
      }
      if (!graph::is_floating(out_dtype) && out_dtype != graph::DType::Unknown) {
        return elementwise({&t}, [](const std::vector<float>& x) { return std::trunc(x[0]); }, why_);
      }
      return t;
    };

    // Creation.
    if (target_in(*node, {"aten.ones", "aten.zeros", "aten.full", "aten.new_ones", "aten.new_zeros",
                          "aten.new_full", "aten.scalar_tensor", "aten.ones_like", "aten.zeros_like",
                          "aten.full_like"})) {
      double fill = 0.0;
      if (target_in(*node, {"aten.ones", "aten.new_ones", "aten.ones_like"})) fill = 1.0;
      if (target_in(*node, {"aten.full", "aten.full_like"})) {
        auto v = scalar(discover::detail::argument(*node, 1, "fill_value"));
        if (!v) return fail(node->target + " with a fill value that is not a number");
        fill = *v;
      }
      if (target_is(*node, "aten.new_full")) {
        auto v = scalar(discover::detail::argument(*node, 2, "fill_value"));
        if (!v) return fail("new_full with a fill value that is not a number");
        fill = *v;
      }
      if (target_is(*node, "aten.scalar_tensor")) {
        auto v = scalar(discover::detail::argument(*node, 0, "s"));
        if (!v) return fail("scalar_tensor of something that is not a number");
        fill = *v;
      }
      int64_t n = 1;
      for (int64_t d : out_shape) n *= d;
      if (n > kMaxElements) return fail("a mask tensor of " + std::to_string(n) + " elements");
      Dense t = contiguous_of(out_shape);
      std::fill(t.data->begin(), t.data->end(), static_cast<float>(fill));
      return to_dtype(t);
    }
    if (target_is(*node, "aten.arange")) {
      std::vector<double> numbers;
      for (const auto& arg : node->args) {
        if (auto v = scalar(&arg)) numbers.push_back(*v);
      }
      for (const char* key : {"start", "end", "step"}) {
        if (auto it = node->kwargs.find(key); it != node->kwargs.end()) {
          if (auto v = scalar(&it->second)) numbers.push_back(*v);
        }
      }
      double start = 0, step = 1;
      if (numbers.size() >= 2) start = numbers[0];
      if (numbers.size() >= 3) step = numbers[2];
      if (numbers.empty() || out_shape.size() != 1) return fail("arange with arguments FACT does not read");
      Dense t = contiguous_of(out_shape);
      for (int64_t i = 0; i < out_shape[0]; ++i) (*t.data)[size_t(i)] = static_cast<float>(start + step * double(i));
      return t;
    }

    // Views and copies that keep values.
    if (target_in(*node, {"aten.alias", "aten.detach", "aten.detach_", "aten.clone", "aten.contiguous",
                          "aten.lift_fresh_copy", "aten.lift_fresh", "aten.to", "aten._to_copy",
                          "aten.type_as", "aten._assert_tensor_metadata"})) {
      auto t = tensor0();
      if (!t) return t;
      return to_dtype(*t);
    }
    if (target_in(*node, {"aten.view", "aten.reshape", "aten._unsafe_view", "aten.expand", "aten.t",
                          "aten.transpose", "aten.permute", "aten.unsqueeze", "aten.squeeze"})) {
      auto t = tensor0();
      if (!t) return t;
      discover::StridedView in{t->shape, t->stride};
      auto out = discover::apply_view_like(*node, in);
      if (!out && discover::is_reshape(*node)) {  // a reshape that copies: make it contiguous first
        std::vector<const Dense*> one{&*t};
        auto dense = elementwise(one, [](const std::vector<float>& x) { return x[0]; }, why_, /*dense=*/true);
        if (!dense) return dense;
        t = dense;
        out = discover::apply_view_like(*node, discover::StridedView{t->shape, t->stride});
      }
      if (!out || out->shape != out_shape) return fail(node->target + " the evaluator cannot follow");
      Dense r = *t;
      r.shape = out->shape;
      r.stride = out->stride;
      return r;
    }
    if (target_in(*node, {"aten.slice", "aten.select"})) {
      auto t = tensor0();
      if (!t) return t;
      auto dim = wrap(int_arg(*node, 1, "dim").value_or(0), t->rank());
      if (!dim) return fail(node->target + " with a dim FACT does not read");
      const int64_t extent = t->shape[*dim];
      Dense r = *t;
      if (target_is(*node, "aten.select")) {
        auto index = int_arg(*node, 2, "index");
        if (!index) return fail("select without an index");
        const int64_t i = *index < 0 ? *index + extent : *index;
        r.offset += i * t->stride[*dim];
        r.shape.erase(r.shape.begin() + static_cast<std::ptrdiff_t>(*dim));
        r.stride.erase(r.stride.begin() + static_cast<std::ptrdiff_t>(*dim));
      } else {
        int64_t start = int_arg(*node, 2, "start").value_or(0);
        int64_t end = int_arg(*node, 3, "end").value_or(extent);
        const int64_t step = int_arg(*node, 4, "step").value_or(1);
        if (start < 0) start += extent;
        if (end < 0) end += extent;
        start = std::clamp<int64_t>(start, 0, extent);
        end = std::clamp<int64_t>(end, start, extent);
        if (step <= 0) return fail("slice with a non-positive step");
        r.offset += start * t->stride[*dim];
        r.shape[*dim] = (end - start + step - 1) / step;
        r.stride[*dim] *= step;
      }
      if (r.shape != out_shape) return fail(node->target + " whose result FACT cannot reproduce");
      return r;
    }

    // Triangles.
    if (target_in(*node, {"aten.tril", "aten.triu", "aten.tril_", "aten.triu_"})) {
      auto t = tensor0();
      if (!t) return t;
      if (t->rank() < 2) return fail(node->target + " of a tensor of rank < 2");
      const int64_t diagonal = int_arg(*node, 1, "diagonal").value_or(0);
      const bool lower = target_in(*node, {"aten.tril", "aten.tril_"});
      Dense src = *t;
      auto r = elementwise({&src}, [](const std::vector<float>& x) { return x[0]; }, why_, /*dense=*/true);
      if (!r) return r;
      const size_t rank = r->rank();
      for_each_index(r->shape, [&](const std::vector<int64_t>& index, int64_t n) {
        const int64_t i = index[rank - 2], j = index[rank - 1];
        const bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
        if (!keep) (*r->data)[size_t(n)] = 0.f;
      });
      return r;
    }

    // Elementwise.
    using F = std::function<float(const std::vector<float>&)>;
    const std::map<std::string, F> binary = {
        {"aten.eq", [](const std::vector<float>& x) { return x[0] == x[1] ? 1.f : 0.f; }},
        {"aten.ne", [](const std::vector<float>& x) { return x[0] != x[1] ? 1.f : 0.f; }},
        {"aten.lt", [](const std::vector<float>& x) { return x[0] < x[1] ? 1.f : 0.f; }},
        {"aten.le", [](const std::vector<float>& x) { return x[0] <= x[1] ? 1.f : 0.f; }},
        {"aten.gt", [](const std::vector<float>& x) { return x[0] > x[1] ? 1.f : 0.f; }},
        {"aten.ge", [](const std::vector<float>& x) { return x[0] >= x[1] ? 1.f : 0.f; }},
        {"aten.__and__", [](const std::vector<float>& x) { return (x[0] != 0.f && x[1] != 0.f) ? 1.f : 0.f; }},
        {"aten.bitwise_and", [](const std::vector<float>& x) { return (x[0] != 0.f && x[1] != 0.f) ? 1.f : 0.f; }},
        {"aten.logical_and", [](const std::vector<float>& x) { return (x[0] != 0.f && x[1] != 0.f) ? 1.f : 0.f; }},
        {"aten.__or__", [](const std::vector<float>& x) { return (x[0] != 0.f || x[1] != 0.f) ? 1.f : 0.f; }},
        {"aten.bitwise_or", [](const std::vector<float>& x) { return (x[0] != 0.f || x[1] != 0.f) ? 1.f : 0.f; }},
        {"aten.logical_or", [](const std::vector<float>& x) { return (x[0] != 0.f || x[1] != 0.f) ? 1.f : 0.f; }},
        {"aten.mul", [](const std::vector<float>& x) { return x[0] * x[1]; }},
    };
    for (const auto& [name, f] : binary) {
      if (!target_is(*node, name)) continue;
      auto a = operand(discover::detail::argument(*node, 0, "self"));
      auto b = operand(discover::detail::argument(*node, 1, "other"));
      if (!a || !b) return std::nullopt;
      auto r = elementwise({&*a, &*b}, f, why_);
      if (!r) return r;
      return to_dtype(*r);
    }
    if (target_in(*node, {"aten.add", "aten.sub", "aten.rsub"})) {
      auto a = operand(discover::detail::argument(*node, 0, "self"));
      auto b = operand(discover::detail::argument(*node, 1, "other"));
      if (!a || !b) return std::nullopt;
      const double alpha = scalar(discover::detail::argument(*node, 2, "alpha")).value_or(1.0);
      const float sign = target_is(*node, "aten.add") ? 1.f : -1.f;
      const bool reversed = target_is(*node, "aten.rsub");
      auto r = elementwise({&*a, &*b}, [&](const std::vector<float>& x) {
        return reversed ? x[1] - float(alpha) * x[0] : x[0] + sign * float(alpha) * x[1];
      }, why_);
      if (!r) return r;
      return to_dtype(*r);
    }
    if (target_in(*node, {"aten.logical_not", "aten.bitwise_not", "aten.__invert__", "aten.neg"})) {
      auto t = tensor0();
      if (!t) return t;
      if (target_is(*node, "aten.neg")) return elementwise({&*t}, [](const std::vector<float>& x) { return -x[0]; }, why_);
      return elementwise({&*t}, [](const std::vector<float>& x) { return x[0] == 0.f ? 1.f : 0.f; }, why_);
    }
    if (target_in(*node, {"aten.masked_fill", "aten.masked_fill_"})) {
      auto t = tensor0();
      auto m = operand(discover::detail::argument(*node, 1, "mask"));
      auto v = operand(discover::detail::argument(*node, 2, "value"));
      if (!t || !m || !v) return std::nullopt;
      return elementwise({&*t, &*m, &*v}, [](const std::vector<float>& x) { return x[1] != 0.f ? x[2] : x[0]; }, why_);
    }
    if (target_is(*node, "aten.where")) {
      auto c = operand(discover::detail::argument(*node, 0, "condition"));
      auto a = operand(discover::detail::argument(*node, 1, "self"));
      auto b = operand(discover::detail::argument(*node, 2, "other"));
      if (!c || !a || !b) return std::nullopt;
      auto r = elementwise({&*c, &*a, &*b}, [](const std::vector<float>& x) { return x[0] != 0.f ? x[1] : x[2]; }, why_);
      if (!r) return r;
      return to_dtype(*r);
    }
    if (target_is(*node, "aten.cumsum")) {
      auto t = tensor0();
      if (!t) return t;
      auto dim = wrap(int_arg(*node, 1, "dim").value_or(-1), t->rank());
      if (!dim) return fail("cumsum with a dim FACT does not read");
      auto r = elementwise({&*t}, [](const std::vector<float>& x) { return x[0]; }, why_, /*dense=*/true);
      if (!r) return r;
      for_each_index(r->shape, [&](const std::vector<int64_t>& index, int64_t n) {
        if (index[*dim] > 0) (*r->data)[size_t(n)] += (*r->data)[size_t(n - r->stride[*dim])];
      });
      return to_dtype(*r);
    }
    if (target_is(*node, "aten.diff")) {
      auto t = tensor0();
      if (!t) return t;
      if (int_arg(*node, 1, "n").value_or(1) != 1) return fail("diff with n != 1");
      auto dim = wrap(int_arg(*node, 2, "dim").value_or(-1), t->rank());
      if (!dim) return fail("diff with a dim FACT does not read");
      std::optional<Dense> prepend;
      if (const Arg* p = discover::detail::argument(*node, 3, "prepend"); p != nullptr && p->is_tensor()) {
        prepend = eval(p->tensor);
        if (!prepend) return prepend;
      }
      if (const Arg* a = discover::detail::argument(*node, 4, "append"); a != nullptr && a->is_tensor()) {
        return fail("diff with append");
      }
      Dense r = contiguous_of(out_shape);
      const int64_t lead = prepend ? prepend->shape[*dim] : 0;
      auto element = [&](std::vector<int64_t> index, int64_t k) -> float {  // k along dim of cat(prepend, t)
        if (k < lead) {
          index[*dim] = k;
          return prepend->at(index);
        }
        index[*dim] = k - lead;
        return t->at(index);
      };
      for_each_index(out_shape, [&](const std::vector<int64_t>& index, int64_t n) {
        const int64_t k = index[*dim];
        (*r.data)[size_t(n)] = element(index, k + 1) - element(index, k);
      });
      return r;
    }
    if (target_is(*node, "aten.index")) {
      auto t = tensor0();
      if (!t) return t;
      const Arg* list = discover::detail::argument(*node, 1, "indices");
      if (list == nullptr || list->kind != Arg::Kind::TensorList) return fail("index without an index list");
      std::vector<std::optional<Dense>> indices;
      std::vector<const Dense*> present;
      for (const auto& entry : list->tensors) {
        if (!entry) {
          indices.emplace_back();
          continue;
        }
        auto idx = eval(*entry);
        if (!idx) return idx;
        indices.push_back(idx);
      }
      size_t first = indices.size(), last = 0;
      for (size_t i = 0; i < indices.size(); ++i) {
        if (indices[i]) {
          present.push_back(&*indices[i]);
          first = std::min(first, i);
          last = i;
        }
      }
      for (size_t i = first; i <= last && i < indices.size(); ++i) {
        if (!indices[i]) return fail("index with separated index tensors");
      }
      auto idx_shape = broadcast_shape(present);
      if (!idx_shape || present.empty()) return fail("index tensors that do not broadcast");
      std::vector<int64_t> shape(t->shape.begin(), t->shape.begin() + static_cast<std::ptrdiff_t>(first));
      shape.insert(shape.end(), idx_shape->begin(), idx_shape->end());
      shape.insert(shape.end(), t->shape.begin() + static_cast<std::ptrdiff_t>(last + 1), t->shape.end());
      if (shape != out_shape) return fail("index whose result FACT cannot reproduce");
      std::vector<Dense> seen;
      for (const Dense* p : present) seen.push_back(broadcast_to(*p, *idx_shape));
      Dense r = contiguous_of(shape);
      if (r.numel() > kMaxElements) return fail("a mask tensor too large to evaluate");
      const size_t k = idx_shape->size();
      bool in_range = true;
      for_each_index(shape, [&](const std::vector<int64_t>& index, int64_t n) {
        std::vector<int64_t> idx_index(index.begin() + static_cast<std::ptrdiff_t>(first),
                                       index.begin() + static_cast<std::ptrdiff_t>(first + k));
        std::vector<int64_t> source(index.begin(), index.begin() + static_cast<std::ptrdiff_t>(first));
        for (const Dense& s : seen) {
          int64_t i = static_cast<int64_t>(s.at(idx_index));
          const int64_t extent = t->shape[source.size()];
          if (i < 0) i += extent;
          if (i < 0 || i >= extent) in_range = false;
          source.push_back(std::clamp<int64_t>(i, 0, extent - 1));
        }
        source.insert(source.end(), index.begin() + static_cast<std::ptrdiff_t>(first + k), index.end());
        (*r.data)[size_t(n)] = t->at(source);
      });
      if (!in_range) return fail("index out of range");
      return r;
    }
    return fail("the mask is computed by " + std::string(discover::op_base(node->target)) +
                ", which FACT does not evaluate");
  }

  const Graph& g_;
  int assumption_;
  MaskUse use_;
  std::map<ValueId, Dense> memo_;
  std::string why_, assumed_;
  int depth_ = 0;
};

// The visible pattern of mask `m` used as `use` against [.., seq, kv_seq] scores.
MaskReading classify(const Dense& m, MaskUse use, int64_t seq, int64_t kv_seq) {
  MaskReading reading;
  std::vector<int64_t> shape = m.shape;
  while (shape.size() < 2) shape.insert(shape.begin(), 1);
  const size_t r = shape.size();
  if ((shape[r - 2] != seq && shape[r - 2] != 1) || (shape[r - 1] != kv_seq && shape[r - 1] != 1)) {
    reading.kind = MaskReading::Kind::Other;
    reading.detail = "a mask of shape " + discover::shape_text(m.shape) + " for " + std::to_string(seq) + "x" +
                     std::to_string(kv_seq) + " scores";
    return reading;
  }
  std::vector<int64_t> lead(shape.begin(), shape.end() - 2);
  shape[r - 2] = seq;
  shape[r - 1] = kv_seq;
  const Dense t = broadcast_to(m, shape);
  bool all = true, top_left = true, bottom_right = true, other_values = false;
  const int64_t diag = kv_seq - seq;
  std::vector<int64_t> outer(lead.size());
  for (size_t d = 0; d < lead.size(); ++d) outer[d] = t.stride[d] == 0 ? 1 : lead[d];  // broadcast: once
  for_each_index(outer, [&](const std::vector<int64_t>& prefix, int64_t) {
    std::vector<int64_t> index = prefix;
    index.push_back(0);
    index.push_back(0);
    for (int64_t i = 0; i < seq; ++i) {
      index[r - 2] = i;
      for (int64_t j = 0; j < kv_seq; ++j) {
        index[r - 1] = j;
        const float x = t.at(index);
        bool visible = true;
        switch (use) {
          case MaskUse::FillWhereTrue: visible = x == 0.f; break;
          case MaskUse::KeepWhereTrue: visible = x != 0.f; break;
          case MaskUse::Additive:
            if (x == 0.f) {
              visible = true;
            } else if (x <= kMasked) {
              visible = false;
            } else {
              other_values = true;
            }
            break;
        }
        all = all && visible;
        top_left = top_left && visible == (j <= i);
        bottom_right = bottom_right && visible == (j <= i + diag);
      }
    }
  });
  if (other_values) {
    reading.kind = MaskReading::Kind::Other;
    reading.detail = "an additive mask with values other than 0 and -inf (a bias)";
  } else if (all) {
    reading.kind = MaskReading::Kind::AllVisible;
    reading.detail = "a mask that hides nothing";
  } else if (top_left) {
    reading.kind = MaskReading::Kind::CausalTopLeft;
    reading.detail = "causal (query i sees keys j <= i)";
  } else if (bottom_right) {
    reading.kind = MaskReading::Kind::CausalBottomRight;
    reading.detail = "causal, aligned bottom-right (query i sees keys j <= i + " + std::to_string(diag) + ")";
  } else {
    reading.kind = MaskReading::Kind::Other;
    reading.detail = "a mask that is neither causal nor empty (a padding or block pattern)";
    // A causal sliding window: query i sees keys i - window < j <= i.
    int64_t window = 0;
    std::vector<int64_t> index(r, 0);
    index[r - 2] = seq - 1;
    for (int64_t j = 0; j < kv_seq; ++j) {
      index[r - 1] = j;
      const float x = t.at(index);
      const bool visible = use == MaskUse::FillWhereTrue ? x == 0.f : use == MaskUse::KeepWhereTrue ? x != 0.f : x == 0.f;
      window += visible ? 1 : 0;
    }
    bool sliding = window > 0;
    for_each_index(outer, [&](const std::vector<int64_t>& prefix, int64_t) {
      std::vector<int64_t> at = prefix;
      at.push_back(0);
      at.push_back(0);
      for (int64_t i = 0; i < seq && sliding; ++i) {
        at[r - 2] = i;
        for (int64_t j = 0; j < kv_seq; ++j) {
          at[r - 1] = j;
          const float x = t.at(at);
          const bool visible = use == MaskUse::FillWhereTrue ? x == 0.f : use == MaskUse::KeepWhereTrue ? x != 0.f : x == 0.f;
          if (visible != (j <= i && i - j < window)) sliding = false;
        }
      }
    });
    if (sliding) {
      reading.kind = MaskReading::Kind::CausalWindow;
      reading.window = window;
      reading.detail = "a causal sliding-window mask (query i sees keys i - " + std::to_string(window) +
                       " < j <= i)";
    }
  }
  return reading;
}

}  // namespace

std::optional<double> scalar_value(const Graph& g, const Arg& arg) {
  Evaluator evaluator(g, 0, MaskUse::KeepWhereTrue);
  if (arg.is_tensor() && g.has_value(arg.tensor) && g.value(arg.tensor).desc.rank() > 0) {
    int64_t n = 1;
    for (int64_t d : g.value(arg.tensor).desc.shape) n *= d;
    if (n != 1) return std::nullopt;
  }
  auto v = evaluator.scalar(&arg);
  if (!evaluator.assumed().empty()) return std::nullopt;
  return v;
}

MaskReading read_mask(const Graph& g, const ValueId& mask, MaskUse use, int64_t seq, int64_t kv_seq) {
  MaskReading last;
  for (int assumption = 0; assumption < 2; ++assumption) {
    Evaluator evaluator(g, assumption, use);
    std::optional<Dense> m = evaluator.eval(mask);
    if (!m) {
      MaskReading unknown;
      unknown.kind = MaskReading::Kind::Unknown;
      unknown.detail = evaluator.why();
      return unknown;
    }
    MaskReading reading = classify(*m, use, seq, kv_seq);
    if (evaluator.assumed().empty()) return reading;
    reading.assumed = true;
    const bool causal = reading.kind == MaskReading::Kind::CausalTopLeft ||
                        reading.kind == MaskReading::Kind::CausalBottomRight ||
                        reading.kind == MaskReading::Kind::CausalWindow;
    if (causal) {
      const char* assumed = use == MaskUse::Additive
                                ? (assumption == 0 ? "0 on and below the diagonal, -inf above" : "tril(ones)")
                                : (assumption == 0 ? "tril(ones) (1 = visible)" : "triu(ones, 1) (1 = hidden)");
      reading.detail = "buffer '" + evaluator.assumed() + "' assumed to be " + assumed +
                       ", its contents not captured: " + reading.detail +
                       "; verified against the real buffer before use";
      return reading;
    }
    last = reading;
    last.detail = "buffer '" + evaluator.assumed() + "' read in a way no causal buffer explains: " + reading.detail;
  }
  return last;
}

namespace {

// Extent of the `dims_from_end`-th dim from the end of a (right-aligned) shape; 1 where the
// shape has no such dim.
int64_t extent_from_end(const std::vector<int64_t>& shape, size_t dims_from_end) {
  return shape.size() >= dims_from_end ? shape[shape.size() - dims_from_end] : 1;
}

// Whether `id` is the same along its query (second from the end) and head (third from the
// end) dims: read_key_mask's proof, memoized in `known`.
class KeyMaskProof {
 public:
  explicit KeyMaskProof(const Graph& g) : g_(g) {}

  bool invariant(const ValueId& id, int depth = 0) {
    if (auto it = known_.find(id); it != known_.end()) return it->second;
    const bool result = prove(id, depth);
    known_[id] = result;
    return result;
  }

  const std::string& why_not() const { return why_not_; }

 private:
  bool fail(std::string why) {
    if (why_not_.empty()) why_not_ = std::move(why);
    return false;
  }

  bool prove(const ValueId& id, int depth) {
    if (!g_.has_value(id)) return fail("unknown value '" + id + "'");
    const graph::Value& value = g_.value(id);
    const auto& shape = value.desc.shape;
    if (extent_from_end(shape, 2) == 1 && extent_from_end(shape, 3) == 1) return true;
    if (depth > 64) return fail("the mask is computed by a chain too long to follow");
    // Computed from constants alone: its values say.
    {
      Evaluator evaluator(g_, 0, MaskUse::KeepWhereTrue);
      if (std::optional<Dense> d = evaluator.eval(id); d && evaluator.assumed().empty()) {
        for (size_t from_end : {size_t(2), size_t(3)}) {
          if (d->rank() < from_end) continue;
          const size_t dim = d->rank() - from_end;
          if (d->shape[dim] != 1 && d->stride[dim] != 0) {
            return fail("'" + id + "' is computed from constants and differs between queries or heads");
          }
        }
        return true;
      }
    }
    const Node* node = g_.producer(id);
    const std::string name = value.target.empty() ? value.id : value.target;
    if (node == nullptr) return fail("'" + name + "' varies along queries or heads");
    // Ops that keep the right-aligned dims of their inputs (broadcasting element-wise ops,
    // expand, a slice, casts and copies): invariant when every tensor input is.
    if (!target_in(*node, {"aten.__and__", "aten.__or__", "aten.__xor__", "aten.__invert__",
                           "aten.bitwise_and", "aten.bitwise_or", "aten.bitwise_xor", "aten.bitwise_not",
                           "aten.logical_and", "aten.logical_or", "aten.logical_xor", "aten.logical_not",
                           "aten.eq", "aten.ne", "aten.lt", "aten.le", "aten.gt", "aten.ge", "aten.mul",
                           "aten.add", "aten.sub", "aten.rsub", "aten.div", "aten.neg", "aten.where",
                           "aten.masked_fill", "aten.to", "aten._to_copy", "aten.type_as", "aten.clone",
                           "aten.alias", "aten.contiguous", "aten.expand", "aten.slice"})) {
      return fail("'" + id + "' comes from " + node->target + ", which the key-mask proof does not follow");
    }
    if (target_is(*node, "aten.slice")) {
      const Arg* input = discover::detail::argument(*node, 0, "self");
      return input != nullptr && input->is_tensor() && g_.value(input->tensor).desc.rank() == value.desc.rank() &&
             invariant(input->tensor, depth + 1);
    }
    for (const Arg& arg : node->args) {
      if (arg.is_tensor() && !invariant(arg.tensor, depth + 1)) return false;
    }
    return true;
  }

  const Graph& g_;
  std::map<ValueId, bool> known_;
  std::string why_not_;
};

}  // namespace

KeyMaskReading read_key_mask(const Graph& g, const ValueId& mask) {
  KeyMaskReading reading;
  KeyMaskProof proof(g);
  reading.key_mask = proof.invariant(mask);
  reading.detail = reading.key_mask
                       ? "a key mask: the same for every query and head (row 0 of each batch entry is read)"
                       : "not a key mask: " + proof.why_not();
  return reading;
}

}  // namespace fact::attention
