#include "fact/problem/operand_transform.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "fact/util/json_fields.hpp"

namespace fact {

namespace {

using nlohmann::json;

std::string torch_dtype(graph::DType dtype) { return "torch." + std::string(graph::dtype_name(dtype)); }

graph::DType parse_torch_dtype(const std::string& text, const std::string& where) {
  const std::string name = text.rfind("torch.", 0) == 0 ? text.substr(6) : text;
  const graph::DType dtype = graph::parse_dtype(name);
  if (dtype == graph::DType::Unknown) throw std::invalid_argument(where + ": unknown dtype '" + text + "'");
  return dtype;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

struct Meta {
  std::vector<int64_t> shape;
  graph::DType dtype = graph::DType::Unknown;
};

int64_t wrap_dim(int64_t dim, size_t rank, const std::string& where) {
  const int64_t r = static_cast<int64_t>(rank);
  if (dim < -r || dim >= r) throw std::invalid_argument(where + ": dim " + std::to_string(dim) +
                                                        " out of range for rank " + std::to_string(r));
  return dim < 0 ? dim + r : dim;
}

std::vector<int64_t> int_list(const json& attrs, const char* key, const std::string& where) {
  if (!attrs.contains(key) || !attrs.at(key).is_array())
    throw std::invalid_argument(where + ": attribute '" + key + "' must be a list of integers");
  std::vector<int64_t> out;
  for (const auto& v : attrs.at(key)) {
    if (!v.is_number_integer()) throw std::invalid_argument(where + ": attribute '" + key + "' must hold integers");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

int64_t int_attr(const json& attrs, const char* key, const std::string& where) {
  if (!attrs.contains(key) || !attrs.at(key).is_number_integer())
    throw std::invalid_argument(where + ": attribute '" + key + "' must be an integer");
  return attrs.at(key).get<int64_t>();
}

// The result of one op from its inputs' metadata.
Meta infer(const TransformOp& op, const std::vector<Meta>& in, const std::string& where) {
  auto arity = [&](size_t n) {
    if (in.size() != n) throw std::invalid_argument(where + ": '" + op.op + "' takes " + std::to_string(n) +
                                                    " argument(s), not " + std::to_string(in.size()));
  };
  if (op.op == "reshape") {
    arity(1);
    const auto shape = int_list(op.attrs, "shape", where);
    if (numel(shape) != numel(in[0].shape))
      throw std::invalid_argument(where + ": reshape of " + shape_text(in[0].shape) + " to " + shape_text(shape));
    return {shape, in[0].dtype};
  }
  if (op.op == "permute") {
    arity(1);
    const auto dims = int_list(op.attrs, "dims", where);
    if (dims.size() != in[0].shape.size())
      throw std::invalid_argument(where + ": permute of rank " + std::to_string(in[0].shape.size()) +
                                  " with " + std::to_string(dims.size()) + " dims");
    std::set<int64_t> seen;
    Meta out{{}, in[0].dtype};
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(d, dims.size(), where);
      if (!seen.insert(w).second) throw std::invalid_argument(where + ": permute repeats dim " + std::to_string(w));
      out.shape.push_back(in[0].shape[static_cast<size_t>(w)]);
    }
    return out;
  }
  if (op.op == "slice") {
    arity(1);
    const int64_t dim = wrap_dim(int_attr(op.attrs, "dim", where), in[0].shape.size(), where);
    const int64_t start = int_attr(op.attrs, "start", where), end = int_attr(op.attrs, "end", where);
    const int64_t size = in[0].shape[static_cast<size_t>(dim)];
    if (start < 0 || end < start || end > size)
      throw std::invalid_argument(where + ": slice [" + std::to_string(start) + ", " + std::to_string(end) +
                                  ") of a dim of size " + std::to_string(size));
    Meta out = in[0];
    out.shape[static_cast<size_t>(dim)] = end - start;
    return out;
  }
  if (op.op == "pad") {
    arity(1);
    const int64_t dim = wrap_dim(int_attr(op.attrs, "dim", where), in[0].shape.size(), where);
    const int64_t size = int_attr(op.attrs, "size", where);
    const int64_t have = in[0].shape[static_cast<size_t>(dim)];
    if (size < have)
      throw std::invalid_argument(where + ": pad of a dim of size " + std::to_string(have) + " to " +
                                  std::to_string(size));
    Meta out = in[0];
    out.shape[static_cast<size_t>(dim)] = size;
    return out;
  }
  if (op.op == "repeat") {
    arity(1);
    const auto repeats = int_list(op.attrs, "repeats", where);
    if (repeats.size() < in[0].shape.size())
      throw std::invalid_argument(where + ": repeat needs at least one count per dim");
    Meta out{{}, in[0].dtype};
    const size_t lead = repeats.size() - in[0].shape.size();
    for (size_t i = 0; i < repeats.size(); ++i) {
      if (repeats[i] < 1) throw std::invalid_argument(where + ": repeat counts must be >= 1");
      out.shape.push_back(repeats[i] * (i < lead ? 1 : in[0].shape[i - lead]));
    }
    return out;
  }
  if (op.op == "stack" || op.op == "cat") {
    if (in.empty()) throw std::invalid_argument(where + ": '" + op.op + "' of nothing");
    const bool stack = op.op == "stack";
    const size_t rank = in[0].shape.size() + (stack ? 1 : 0);
    const int64_t dim = wrap_dim(int_attr(op.attrs, "dim", where), rank, where);
    Meta out = in[0];
    for (size_t i = 1; i < in.size(); ++i) {
      if (in[i].dtype != in[0].dtype) throw std::invalid_argument(where + ": '" + op.op + "' of different dtypes");
      if (in[i].shape.size() != in[0].shape.size())
        throw std::invalid_argument(where + ": '" + op.op + "' of different ranks");
      for (size_t d = 0; d < in[0].shape.size(); ++d) {
        if (!stack && static_cast<int64_t>(d) == dim) continue;
        if (in[i].shape[d] != in[0].shape[d])
          throw std::invalid_argument(where + ": '" + op.op + "' of " + shape_text(in[0].shape) + " and " +
                                      shape_text(in[i].shape));
      }
    }
    if (stack) {
      out.shape.insert(out.shape.begin() + dim, static_cast<int64_t>(in.size()));
    } else {
      int64_t total = 0;
      for (const auto& m : in) total += m.shape[static_cast<size_t>(dim)];
      out.shape[static_cast<size_t>(dim)] = total;
    }
    return out;
  }
  if (op.op == "mul") {
    arity(2);
    if (in[0].dtype != in[1].dtype) throw std::invalid_argument(where + ": mul of different dtypes");
    const size_t rank = std::max(in[0].shape.size(), in[1].shape.size());
    Meta out{std::vector<int64_t>(rank, 1), in[0].dtype};
    for (size_t i = 0; i < rank; ++i) {
      auto size_of = [&](const Meta& m) -> int64_t {
        const size_t lead = rank - m.shape.size();
        return i < lead ? 1 : m.shape[i - lead];
      };
      const int64_t a = size_of(in[0]), b = size_of(in[1]);
      if (a != b && a != 1 && b != 1)
        throw std::invalid_argument(where + ": mul of " + shape_text(in[0].shape) + " and " +
                                    shape_text(in[1].shape) + " does not broadcast");
      out.shape[i] = std::max(a, b);
    }
    return out;
  }
  if (op.op == "add_scalar") {
    arity(1);
    if (!op.attrs.contains("value") || !op.attrs.at("value").is_number())
      throw std::invalid_argument(where + ": add_scalar needs a numeric 'value'");
    return in[0];
  }
  if (op.op == "to") {
    arity(1);
    if (!op.attrs.contains("dtype") || !op.attrs.at("dtype").is_string())
      throw std::invalid_argument(where + ": to needs a 'dtype'");
    const graph::DType dtype = parse_torch_dtype(op.attrs.at("dtype").get<std::string>(), where);
    if (!graph::is_floating(dtype)) throw std::invalid_argument(where + ": to a non-floating dtype");
    return {in[0].shape, dtype};
  }
  throw std::invalid_argument(where + ": unknown op '" + op.op + "'");
}

}  // namespace

std::vector<int64_t> DerivedOperand::stride() const {
  std::vector<int64_t> out(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) out[i - 1] = out[i] * std::max<int64_t>(shape[i], 1);
  return out;
}

bool is_derived_value(const graph::ValueId& id) { return id.rfind(kDerivedPrefix, 0) == 0; }

json derived_to_json(const DerivedOperand& d) {
  json ops = json::array();
  for (const auto& op : d.ops) ops.push_back({{"op", op.op}, {"args", op.args}, {"attrs", op.attrs}});
  return {{"value", d.value},     {"from", d.from},        {"ops", std::move(ops)},
          {"dtype", torch_dtype(d.dtype)}, {"shape", d.shape}, {"stride", d.stride()},
          {"purpose", d.purpose}};
}

DerivedOperand derived_from_json(const json& j) {
  const std::string where = "derived";
  DerivedOperand d;
  try {
    d.value = util::string_field(j, "value", where);
    d.from = util::field(j, "from", where).get<std::vector<graph::ValueId>>();
    for (const auto& op : util::field(j, "ops", where)) {
      TransformOp t;
      t.op = util::string_field(op, "op", where + ".ops");
      t.args = util::field(op, "args", where + ".ops").get<std::vector<std::string>>();
      if (op.contains("attrs")) t.attrs = op.at("attrs");
      d.ops.push_back(std::move(t));
    }
    d.dtype = parse_torch_dtype(util::string_field(j, "dtype", where), where + ".dtype");
    d.shape = util::field(j, "shape", where).get<std::vector<int64_t>>();
    d.purpose = j.value("purpose", std::string());
  } catch (const json::exception& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  return d;
}

void check_derived(const DerivedOperand& d, const graph::Graph& captured) {
  const std::string where = "derived value '" + d.value + "'";
  if (!is_derived_value(d.value))
    throw std::invalid_argument(where + ": its id must start with '" + kDerivedPrefix + "'");
  if (d.ops.empty()) throw std::invalid_argument(where + ": no ops");
  std::vector<Meta> sources;
  for (const auto& id : d.from) {
    if (!captured.has_value(id)) throw std::invalid_argument(where + ": source '" + id + "' is not a graph value");
    const graph::Value& v = captured.value(id);
    if (v.kind != graph::ValueKind::Parameter && v.kind != graph::ValueKind::Buffer &&
        v.kind != graph::ValueKind::Constant) {
      throw std::invalid_argument(where + ": source '" + id +
                                  "' is computed by the model (a transform reads parameters, buffers "
                                  "and constants only)");
    }
    sources.push_back({v.desc.shape, v.desc.dtype});
  }
  std::vector<Meta> results;
  for (size_t i = 0; i < d.ops.size(); ++i) {
    const std::string at = where + ", op " + std::to_string(i) + " (" + d.ops[i].op + ")";
    std::vector<Meta> in;
    for (const auto& ref : d.ops[i].args) {
      size_t index = 0;
      try {
        if (ref.size() < 2) throw std::invalid_argument("short");
        index = static_cast<size_t>(std::stoul(ref.substr(1)));
      } catch (const std::exception&) {
        throw std::invalid_argument(at + ": bad reference '" + ref + "'");
      }
      if (ref[0] == '$' && index < sources.size()) {
        in.push_back(sources[index]);
      } else if (ref[0] == '%' && index < results.size()) {
        in.push_back(results[index]);
      } else {
        throw std::invalid_argument(at + ": reference '" + ref + "' names nothing before it");
      }
    }
    results.push_back(infer(d.ops[i], in, at));
  }
  const Meta& last = results.back();
  if (last.shape != d.shape || last.dtype != d.dtype) {
    throw std::invalid_argument(where + ": the program makes " + shape_text(last.shape) + " " +
                                std::string(graph::dtype_name(last.dtype)) + ", the plan declares " +
                                shape_text(d.shape) + " " + std::string(graph::dtype_name(d.dtype)));
  }
}

std::string source_ref(size_t index) { return "$" + std::to_string(index); }

std::string ProgramBuilder::add(std::string op, std::vector<std::string> args, json attrs) {
  ops.push_back({std::move(op), std::move(args), std::move(attrs)});
  return "%" + std::to_string(ops.size() - 1);
}
std::string ProgramBuilder::reshape(const std::string& x, std::vector<int64_t> shape) {
  return add("reshape", {x}, {{"shape", shape}});
}
std::string ProgramBuilder::permute(const std::string& x, std::vector<int64_t> dims) {
  return add("permute", {x}, {{"dims", dims}});
}
std::string ProgramBuilder::slice(const std::string& x, int64_t dim, int64_t start, int64_t end) {
  return add("slice", {x}, {{"dim", dim}, {"start", start}, {"end", end}});
}
std::string ProgramBuilder::pad(const std::string& x, int64_t dim, int64_t size) {
  return add("pad", {x}, {{"dim", dim}, {"size", size}});
}
std::string ProgramBuilder::repeat(const std::string& x, std::vector<int64_t> repeats) {
  return add("repeat", {x}, {{"repeats", repeats}});
}
std::string ProgramBuilder::stack(std::vector<std::string> xs, int64_t dim) {
  return add("stack", std::move(xs), {{"dim", dim}});
}
std::string ProgramBuilder::cat(std::vector<std::string> xs, int64_t dim) {
  return add("cat", std::move(xs), {{"dim", dim}});
}
std::string ProgramBuilder::mul(const std::string& a, const std::string& b) { return add("mul", {a, b}); }
std::string ProgramBuilder::add_scalar(const std::string& x, double value) {
  return add("add_scalar", {x}, {{"value", value}});
}
std::string ProgramBuilder::to(const std::string& x, graph::DType dtype) {
  return add("to", {x}, {{"dtype", torch_dtype(dtype)}});
}

}  // namespace fact
