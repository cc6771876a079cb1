// The "subgraph" problem kind (include/fact/core/fact_subgraph_abi.h): a captured subgraph
// computed by one call that receives its tensors only. Kernels an agent writes for a NEW match
// use it; no pattern owns it because it describes no computation of its own: the subgraph's
// captured nodes are its semantics (the registry keeps them, include/fact/registry/semantics.hpp)
// and the replaced FX subgraph, run in float64, is its reference.
//
// Description: {"operands": [value ids read], "results": [value ids written], "dtype": "<the
// match's compute dtype>", "rule": "<the match's rule>"}.
#include <cstddef>
#include <stdexcept>

#include "fact/core/dtype.hpp"
#include "fact/core/fact_subgraph_abi.h"
#include "fact/core/precision.hpp"
#include "fact/problem/problem.hpp"

namespace fact {
namespace {

std::vector<std::string> ids(const nlohmann::json& desc, const char* key) {
  if (!desc.contains(key) || !desc.at(key).is_array())
    throw std::invalid_argument(std::string("subgraph problem: no \"") + key + "\" list");
  return desc.at(key).get<std::vector<std::string>>();
}

class SubgraphKind final : public ProblemKind {
 public:
  std::string name() const override { return "subgraph"; }
  std::string fusion(const nlohmann::json& desc) const override { return desc.value("rule", std::string("subgraph")); }
  std::string shape(const nlohmann::json& desc) const override {
    return std::to_string(desc.value("operands", nlohmann::json::array()).size()) + " in, " +
           std::to_string(desc.value("results", nlohmann::json::array()).size()) + " out";
  }
  graph::DType dtype(const nlohmann::json& desc) const override {
    return graph::parse_dtype(desc.value("dtype", std::string()));
  }
  double flops(const nlohmann::json& desc) const override { return desc.value("flops", 0.0); }
  double min_bytes(const nlohmann::json& desc) const override { return desc.value("min_bytes", 0.0); }
  double fused_seconds(const nlohmann::json& desc, const DeviceProfile& device,
                       core::PrecisionMode) const override {
    return roofline_seconds(flops(desc), device.fp32_flops, min_bytes(desc), device);
  }
  std::vector<int64_t> tuning_dims(const nlohmann::json& desc) const override {
    return {static_cast<int64_t>(min_bytes(desc))};
  }
  double tolerance(const nlohmann::json& desc, core::PrecisionMode precision) const override {
    return core::tolerance_for(precision, dtype(desc));
  }

  ArgImage pack(const nlohmann::json& desc, const graph::Graph& captured) const override {
    const auto operands = ids(desc, "operands");
    const auto results = ids(desc, "results");
    if (operands.size() > FACT_SUBGRAPH_MAX_TENSORS || results.size() > FACT_SUBGRAPH_MAX_TENSORS)
      throw std::invalid_argument("subgraph call: more than " + std::to_string(FACT_SUBGRAPH_MAX_TENSORS) +
                                  " operands or results");
    ArgImage image;
    image.bytes.assign(sizeof(FactSubgraphArgs), 0);
    FactCallHeader header{FACT_ABI_VERSION, fact_kind_id("subgraph"), sizeof(FactSubgraphArgs), 0};
    image.put_header(offsetof(FactSubgraphArgs, header), header);
    image.put(offsetof(FactSubgraphArgs, num_operands), static_cast<int32_t>(operands.size()));
    image.put(offsetof(FactSubgraphArgs, num_results), static_cast<int32_t>(results.size()));
    auto describe = [&](size_t base, const graph::TensorDesc& d, const std::string& value) {
      const int32_t code = core::dtype_info(d.dtype).subgraph_abi;
      if (code < 0) throw std::invalid_argument("subgraph call: " + value + " has an element type the ABI has no code for");
      if (d.rank() > FACT_SUBGRAPH_MAX_RANK)
        throw std::invalid_argument("subgraph call: " + value + " has rank above " + std::to_string(FACT_SUBGRAPH_MAX_RANK));
      image.put(base + offsetof(FactTensor, dtype), code);
      image.put(base + offsetof(FactTensor, rank), static_cast<int32_t>(d.rank()));
      for (size_t i = 0; i < d.rank(); ++i) {
        image.put(base + offsetof(FactTensor, shape) + i * sizeof(int64_t), d.shape[i]);
        image.put(base + offsetof(FactTensor, stride) + i * sizeof(int64_t), d.stride[i]);
      }
    };
    for (size_t i = 0; i < operands.size(); ++i) {
      if (!captured.has_value(operands[i])) throw std::invalid_argument("subgraph call: no value " + operands[i]);
      const graph::TensorDesc& d = captured.value(operands[i]).desc;
      const size_t base = offsetof(FactSubgraphArgs, operands) + i * sizeof(FactTensor);
      describe(base, d, operands[i]);
      image.operand(operands[i], d.dtype);
      image.pointers.push_back({base + offsetof(FactTensor, data), PointerSlot::From::Operand, i, 0});
    }
    for (size_t i = 0; i < results.size(); ++i) {
      if (!captured.has_value(results[i])) throw std::invalid_argument("subgraph call: no value " + results[i]);
      const graph::TensorDesc& d = captured.value(results[i]).desc;
      const size_t base = offsetof(FactSubgraphArgs, results) + i * sizeof(FactTensor);
      describe(base, d, results[i]);
      image.results.push_back({results[i], d.shape, d.stride, d.dtype});
      image.pointers.push_back({base + offsetof(FactTensor, data), PointerSlot::From::Result, i, 0});
    }
    return image;
  }

  // The subgraph's reference is the captured subgraph itself (run by PyTorch), not a host
  // function of the argument struct.
  int reference(const FactCallHeader*) const override { return FACT_ERR_INVALID_ARGS; }

  std::optional<nlohmann::json> from_command_line(const std::map<std::string, std::string>&) const override {
    return std::nullopt;
  }
};

const KindRegistrar kSubgraphKind{std::make_unique<SubgraphKind>()};

}  // namespace
}  // namespace fact
