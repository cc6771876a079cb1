// Building a Graph in code (tests, agents, synthetic problems) without writing graph JSON:
// declare inputs / parameters / buffers, append ops with their output shapes, finish.
//
//   GraphBuilder b(DType::BFloat16);
//   auto x = b.input("x", {128, 768});
//   auto w = b.parameter("w", {3072, 768});
//   auto y = b.op("aten.linear.default", {T(x), T(w)}, {128, 3072});
//   Graph g = b.finish({y});
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fact/graph/graph.hpp"

namespace fact::graph {

// Argument shorthands: a tensor, a constant (number, bool, string, list), a tensor list.
Arg T(const ValueId& id);
Arg C(nlohmann::json constant);
Arg TL(std::vector<std::optional<ValueId>> ids);

// Row-major (C-contiguous) strides of `shape`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

struct OpOptions {
  std::optional<std::vector<int64_t>> stride;  // output strides; contiguous when absent
  std::optional<DType> dtype;                  // output dtype; the first tensor arg's otherwise
  std::map<std::string, Arg> kwargs;
  std::string id;                              // node / output id; "<op name>_<n>" when empty
};

class GraphBuilder {
 public:
  explicit GraphBuilder(DType dtype = DType::Float32, std::string device = "cpu");

  // Each returns the new value's id (== `name`). Strides default to contiguous, dtype to the
  // builder's.
  ValueId input(const std::string& name, std::vector<int64_t> shape,
                std::optional<std::vector<int64_t>> stride = std::nullopt,
                std::optional<DType> dtype = std::nullopt);
  ValueId parameter(const std::string& name, std::vector<int64_t> shape,
                    std::optional<std::vector<int64_t>> stride = std::nullopt,
                    std::optional<DType> dtype = std::nullopt);
  ValueId buffer(const std::string& name, std::vector<int64_t> shape,
                 std::optional<DType> dtype = std::nullopt);
  // A 0-d constant tensor whose value is known.
  ValueId scalar_constant(const std::string& name, double value);

  // Appends a node with one output of `shape`. Throws std::invalid_argument when a tensor
  // argument names an unknown value.
  ValueId op(const std::string& target, std::vector<Arg> args, std::vector<int64_t> shape,
             OpOptions options = {});
  // Appends a node with several outputs (split, ...): one (shape, stride) per output.
  std::vector<ValueId> multi_op(const std::string& target, std::vector<Arg> args,
                                const std::vector<TensorDesc>& outputs, std::string id = {});

  const Graph& graph() const { return graph_; }
  // Sets the graph outputs and returns the graph.
  Graph finish(std::vector<ValueId> outputs);

 private:
  ValueId declare(ValueKind kind, const std::string& name, std::vector<int64_t> shape,
                  std::optional<std::vector<int64_t>> stride, std::optional<DType> dtype);
  std::string fresh_id(const std::string& target);
  DType first_tensor_dtype(const std::vector<Arg>& args) const;
  void check_args(const std::vector<Arg>& args) const;

  Graph graph_;
  DType dtype_;
  std::string device_;
  std::map<std::string, int> counters_;
};

}  // namespace fact::graph
