#include "fact/discover/rank.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "fact/discover/rule.hpp"
#include "fact/discover/strided_view.hpp"

namespace fact::discover {

namespace {

using graph::DType;

double value_bytes(const graph::Graph& g, const graph::ValueId& id) {
  if (!g.has_value(id)) return 0.0;
  const auto& d = g.value(id).desc;
  return double(d.numel()) * graph::dtype_bytes(d.dtype);
}

double pytorch_matmul_rate(DType dtype, const DiscoverOptions& options) {
  if (dtype == DType::BFloat16 || dtype == DType::Float16) return options.device.bf16_flops;
  if (dtype == DType::Float32 && options.precision == core::PrecisionMode::Tf32) return options.device.tf32_flops;
  return options.device.fp32_flops;
}

double roofline(double flops, double rate, double bytes, const DiscoverOptions& options) {
  return roofline_seconds(flops, rate, bytes, options.device);
}

bool costs_nothing(const graph::Graph& g, const graph::Node& node) {
  if (target_in(node, {"aten.view", "aten._unsafe_view", "aten.expand", "aten.t",
                       "aten.transpose", "aten.permute", "aten.unsqueeze", "aten.squeeze",
                       "aten.alias", "aten.detach", "aten.slice", "aten.split",
                       "aten.split_with_sizes", "aten.select", "aten.unbind", "aten.chunk",
                       "aten.lift_fresh_copy"})) {
    return true;
  }
  const auto inputs = tensor_args(node);
  if (inputs.empty() || node.outputs.size() != 1 || !g.has_value(inputs.front())) return false;
  const auto& in = g.value(inputs.front()).desc;
  const auto& out = g.value(node.outputs.front()).desc;
  if (target_in(node, {"aten.to", "aten._to_copy", "aten.type_as"}))
    return in.dtype == out.dtype && in.stride == out.stride;
  if (target_is(node, "aten.contiguous")) return in.is_contiguous();
  if (target_is(node, "aten.reshape")) return restride(view_of(in), out.shape).has_value();
  return false;
}

// K of a matmul-family node: the last dim of its left operand.
std::optional<int64_t> reduction_dim(const graph::Graph& g, const graph::Node& node) {
  const auto inputs = tensor_args(node);
  size_t left = target_in(node, {"aten.addmm", "aten.baddbmm"}) ? 1 : 0;
  if (inputs.size() <= left || !g.has_value(inputs[left])) return std::nullopt;
  const auto& d = g.value(inputs[left]).desc;
  if (d.rank() < 1) return std::nullopt;
  return d.shape.back();
}

}  // namespace

double pytorch_node_seconds(const graph::Graph& g, const graph::Node& node,
                            const DiscoverOptions& options) {
  if (costs_nothing(g, node)) return 0.0;
  double bytes = 0.0;
  for (const auto& arg : node.args) {
    if (arg.kind == graph::Arg::Kind::Tensor) bytes += value_bytes(g, arg.tensor);
    if (arg.kind == graph::Arg::Kind::TensorList) {
      for (const auto& entry : arg.tensors) {
        if (entry) bytes += value_bytes(g, *entry);
      }
    }
  }
  for (const auto& [name, arg] : node.kwargs) {
    if (arg.kind == graph::Arg::Kind::Tensor) bytes += value_bytes(g, arg.tensor);
  }
  for (const auto& out : node.outputs) bytes += value_bytes(g, out);
  if (target_in(node, {"aten.linear", "aten.addmm", "aten.baddbmm", "aten.mm", "aten.bmm",
                       "aten.matmul"}) && node.outputs.size() == 1) {
    const auto k = reduction_dim(g, node);
    const auto& out = g.value(node.outputs.front()).desc;
    if (k) {
      const double flops = 2.0 * double(out.numel()) * double(*k);
      return roofline(flops, pytorch_matmul_rate(out.dtype, options), bytes, options);
    }
  }
  if (target_is(node, "aten.scaled_dot_product_attention") && !node.outputs.empty()) {
    const auto inputs = tensor_args(node);
    if (inputs.size() >= 3) {
      const auto& q = g.value(inputs[0]).desc;
      const auto& k = g.value(inputs[1]).desc;
      const double flops = 4.0 * double(q.numel()) * double(k.shape[k.rank() - 2]);
      return roofline(flops, pytorch_matmul_rate(q.dtype, options), bytes, options);
    }
  }
  return bytes / options.device.hbm_bytes_per_s + options.device.launch_overhead_s;
}

void estimate(Match& m, const graph::Graph& captured, const DiscoverOptions& options) {
  double before = 0.0;
  for (const auto& id : m.nodes) {
    if (const graph::Node* node = captured.node(id)) before += pytorch_node_seconds(captured, *node, options);
  }
  m.est_before_us = before * 1e6;
  if (m.status != MatchStatus::Declined && !m.problems.empty()) {
    double after = 0.0;
    for (const auto& problem : m.problems) {
      after += kind_of(problem).fused_seconds(problem.desc, options.device, options.precision);
    }
    m.est_after_us = after * 1e6;
  } else {
    m.est_after_us = m.est_before_us;
  }
}

Classification classify(const Match& m, bool pattern_has_template, const DiscoverOptions& options) {
  if (m.status == MatchStatus::Pending || !pattern_has_template) return Classification::New;
  if (m.status == MatchStatus::Accepted && !m.problems.empty() && options.key_of &&
      std::all_of(m.problems.begin(), m.problems.end(), [&](const Problem& p) {
        return options.tuned_keys.count(options.key_of(p, options.precision)) != 0;
      })) {
    return Classification::Reuse;
  }
  return Classification::Adapt;
}

void rank_matches(std::vector<Match>& matches) {
  auto group = [](const Match& m) {
    switch (m.status) {
      case MatchStatus::Accepted: return 0;
      case MatchStatus::Pending: return 1;
      case MatchStatus::Declined: return 2;
    }
    return 3;
  };
  std::stable_sort(matches.begin(), matches.end(), [&](const Match& a, const Match& b) {
    if (group(a) != group(b)) return group(a) < group(b);
    if (group(a) == 0) return a.est_saved_us() > b.est_saved_us();
    return a.est_before_us > b.est_before_us;
  });
}

}  // namespace fact::discover
