#include "fact/graph/graph_builder.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace fact::graph {

Arg T(const ValueId& id) { return Arg::of_tensor(id); }
Arg C(nlohmann::json constant) { return Arg::of_constant(std::move(constant)); }
Arg TL(std::vector<std::optional<ValueId>> ids) {
  Arg arg;
  arg.kind = Arg::Kind::TensorList;
  arg.tensors = std::move(ids);
  return arg;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> stride(shape.size(), 1);
  int64_t running = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride[i] = running;
    running *= std::max<int64_t>(shape[i], 1);
  }
  return stride;
}

GraphBuilder::GraphBuilder(DType dtype, std::string device)
    : dtype_(dtype), device_(std::move(device)) {
  graph_.schema = "fact.graph/1";
  graph_.source = {{"module", "GraphBuilder"}, {"capture", "builder"}};
}

ValueId GraphBuilder::declare(ValueKind kind, const std::string& name, std::vector<int64_t> shape,
                              std::optional<std::vector<int64_t>> stride,
                              std::optional<DType> dtype) {
  if (graph_.has_value(name)) throw std::invalid_argument("value '" + name + "' already exists");
  Value v;
  v.id = name;
  v.kind = kind;
  v.desc.stride = stride ? *stride : contiguous_strides(shape);
  v.desc.shape = std::move(shape);
  v.desc.dtype = dtype.value_or(dtype_);
  v.desc.device = device_;
  if (kind == ValueKind::Parameter || kind == ValueKind::Buffer || kind == ValueKind::Constant)
    v.target = name;
  graph_.add_value(std::move(v));
  if (kind == ValueKind::Input) graph_.inputs.push_back(name);
  return name;
}

ValueId GraphBuilder::input(const std::string& name, std::vector<int64_t> shape,
                            std::optional<std::vector<int64_t>> stride, std::optional<DType> dtype) {
  return declare(ValueKind::Input, name, std::move(shape), std::move(stride), dtype);
}

ValueId GraphBuilder::parameter(const std::string& name, std::vector<int64_t> shape,
                                std::optional<std::vector<int64_t>> stride,
                                std::optional<DType> dtype) {
  return declare(ValueKind::Parameter, name, std::move(shape), std::move(stride), dtype);
}

ValueId GraphBuilder::buffer(const std::string& name, std::vector<int64_t> shape,
                             std::optional<DType> dtype) {
  return declare(ValueKind::Buffer, name, std::move(shape), std::nullopt, dtype);
}

ValueId GraphBuilder::scalar_constant(const std::string& name, double value) {
  ValueId id = declare(ValueKind::Constant, name, {}, std::nullopt, std::nullopt);
  graph_.mutable_value(id).scalar = value;
  return id;
}

std::string GraphBuilder::fresh_id(const std::string& target) {
  std::string base = target;
  if (base.rfind("aten.", 0) == 0) base = base.substr(5);
  if (base.rfind("fact.", 0) == 0) base = base.substr(5);
  base = base.substr(0, base.find('.'));
  int& count = counters_[base];
  std::string id = count == 0 ? base : base + "_" + std::to_string(count);
  ++count;
  while (graph_.has_value(id) || graph_.node(id) != nullptr) {
    id = base + "_" + std::to_string(count++);
  }
  return id;
}

DType GraphBuilder::first_tensor_dtype(const std::vector<Arg>& args) const {
  for (const auto& arg : args) {
    if (arg.kind == Arg::Kind::Tensor) return graph_.value(arg.tensor).desc.dtype;
  }
  return dtype_;
}

void GraphBuilder::check_args(const std::vector<Arg>& args) const {
  for (const auto& arg : args) {
    if (arg.kind == Arg::Kind::Tensor && !graph_.has_value(arg.tensor))
      throw std::invalid_argument("unknown value '" + arg.tensor + "'");
    if (arg.kind == Arg::Kind::TensorList) {
      for (const auto& entry : arg.tensors) {
        if (entry && !graph_.has_value(*entry))
          throw std::invalid_argument("unknown value '" + *entry + "'");
      }
    }
  }
}

ValueId GraphBuilder::op(const std::string& target, std::vector<Arg> args,
                         std::vector<int64_t> shape, OpOptions options) {
  check_args(args);
  for (const auto& [name, arg] : options.kwargs) check_args({arg});
  const std::string id = options.id.empty() ? fresh_id(target) : options.id;
  if (graph_.has_value(id)) throw std::invalid_argument("value '" + id + "' already exists");
  Value out;
  out.id = id;
  out.kind = ValueKind::Intermediate;
  out.desc.stride = options.stride ? *options.stride : contiguous_strides(shape);
  out.desc.shape = std::move(shape);
  out.desc.dtype = options.dtype.value_or(first_tensor_dtype(args));
  out.desc.device = device_;
  graph_.add_value(std::move(out));
  Node node;
  node.id = id;
  node.target = target;
  node.args = std::move(args);
  node.kwargs = std::move(options.kwargs);
  node.outputs = {id};
  graph_.add_node(std::move(node));
  return id;
}

std::vector<ValueId> GraphBuilder::multi_op(const std::string& target, std::vector<Arg> args,
                                            const std::vector<TensorDesc>& outputs,
                                            std::string id) {
  check_args(args);
  if (id.empty()) id = fresh_id(target);
  const DType dtype = first_tensor_dtype(args);
  Node node;
  node.id = id;
  node.target = target;
  node.args = std::move(args);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value out;
    out.id = id + "." + std::to_string(i);
    out.kind = ValueKind::Intermediate;
    out.desc = outputs[i];
    if (out.desc.stride.empty()) out.desc.stride = contiguous_strides(out.desc.shape);
    if (out.desc.dtype == DType::Unknown) out.desc.dtype = dtype;
    if (out.desc.device.empty()) out.desc.device = device_;
    node.outputs.push_back(out.id);
    graph_.add_value(std::move(out));
  }
  std::vector<ValueId> ids = node.outputs;
  graph_.add_node(std::move(node));
  return ids;
}

Graph GraphBuilder::finish(std::vector<ValueId> outputs) {
  for (const auto& id : outputs) {
    if (!graph_.has_value(id)) throw std::invalid_argument("unknown output value '" + id + "'");
  }
  graph_.outputs = std::move(outputs);
  return graph_;
}

}  // namespace fact::graph
