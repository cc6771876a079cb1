// Plan-time operand transforms (docs/plan.md, "Derived operands"): a kernel operand computed
// once, when the plan is applied, from module parameters, buffers or constants — e.g. two
// weights interleaved by rows, a norm's weight folded into the next projection's weight, the
// rows of each head permuted (the patterns that need them say why). The engine decides the
// transform and writes it into the plan as a small program over a fixed vocabulary of tensor
// ops; Python executes it with torch ops (python/fact/transforms.py) and knows nothing of why.
//
// A program: `from` lists the source values (graph values of kind parameter, buffer or
// constant, read by the replacement); `ops` are evaluated in order, each reading sources
// ("$i" = from[i]) or earlier results ("%j" = ops[j]); the last op's result, made contiguous,
// is the derived value, whose dtype, shape and (contiguous) stride the program declares.
//
// The vocabulary (each op's attributes; the semantics are torch's):
//   reshape    {shape}            torch.reshape (a copy when the input is not viewable)
//   permute    {dims}             Tensor.permute
//   slice      {dim, start, end}  x.narrow(dim, start, end - start)
//   pad        {dim, size}        zeros appended along dim up to `size` (>= its size)
//   repeat     {repeats}          Tensor.repeat
//   stack      {dim}              torch.stack of its args
//   cat        {dim}              torch.cat of its args
//   mul        {}                 a * b (broadcasting; both of one dtype)
//   add_scalar {value}            x + value
//   to         {dtype}            Tensor.to(dtype) (round to nearest even)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/graph/graph.hpp"

namespace fact {

struct TransformOp {
  std::string op;                 // a vocabulary name above
  std::vector<std::string> args;  // "$i" (a source) or "%j" (an earlier op's result)
  nlohmann::json attrs = nlohmann::json::object();

  bool operator==(const TransformOp&) const = default;
};

struct DerivedOperand {
  graph::ValueId value;              // the id the calls name it by ("derived:...")
  std::vector<graph::ValueId> from;  // its sources, graph values (parameters, buffers, constants)
  std::vector<TransformOp> ops;
  graph::DType dtype = graph::DType::Unknown;
  std::vector<int64_t> shape;        // contiguous
  std::string purpose;               // for reports: "gate and up weights interleaved by rows"

  bool operator==(const DerivedOperand&) const = default;
  std::vector<int64_t> stride() const;  // the contiguous strides of `shape`
};

// The prefix every derived value id starts with (never a captured graph value's).
inline constexpr const char* kDerivedPrefix = "derived:";
bool is_derived_value(const graph::ValueId& id);

// {"value","from","ops":[{"op","args","attrs"}],"dtype","shape","stride","purpose"}; dtype as
// the plan spells dtypes ("torch.bfloat16"). from_json throws std::invalid_argument naming the
// field when one is missing or malformed.
nlohmann::json derived_to_json(const DerivedOperand& d);
DerivedOperand derived_from_json(const nlohmann::json& j);

// The shape and dtype each op produces, from the sources' descriptions in `captured`; throws
// std::invalid_argument with the op's index and the reason when the program is malformed (an
// unknown op or reference, a source that is not a parameter, buffer or constant of `captured`,
// sizes that do not fit) or when its result differs from the declared dtype and shape.
void check_derived(const DerivedOperand& d, const graph::Graph& captured);

// Builders for the programs the patterns use. Each returns the ops appended to `ops` and the
// reference ("%j") of its result.
struct ProgramBuilder {
  std::vector<TransformOp> ops;
  std::string add(std::string op, std::vector<std::string> args,
                  nlohmann::json attrs = nlohmann::json::object());
  std::string reshape(const std::string& x, std::vector<int64_t> shape);
  std::string permute(const std::string& x, std::vector<int64_t> dims);
  std::string slice(const std::string& x, int64_t dim, int64_t start, int64_t end);
  std::string pad(const std::string& x, int64_t dim, int64_t size);
  std::string repeat(const std::string& x, std::vector<int64_t> repeats);
  std::string stack(std::vector<std::string> xs, int64_t dim);
  std::string cat(std::vector<std::string> xs, int64_t dim);
  std::string mul(const std::string& a, const std::string& b);
  std::string add_scalar(const std::string& x, double value);
  std::string to(const std::string& x, graph::DType dtype);
};
std::string source_ref(size_t index);  // "$<index>"

}  // namespace fact
