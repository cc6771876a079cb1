// A problem is what one kernel computes, tagged by kind ("gemm", "attention", ...). The
// pattern folder that owns a kind registers a ProblemKind: the only code that reads the
// kind's description. Stages (discovery's ranking and reports, the tuner, the tuning database,
// the plan writer, the host reference) hold problems as {kind, JSON description} and ask the
// kind; none of them knows what a GEMM is (docs/architecture.md, "The plan is the contract").
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/graph/graph.hpp"
#include "fact/problem/arg_image.hpp"
#include "fact/problem/device_profile.hpp"
#include "fact/core/fact_abi.h"
#include "fact/core/precision.hpp"

namespace fact {

struct Problem {
  std::string kind;    // a registered ProblemKind's name
  nlohmann::json desc; // the kind's own description (its schema lives in its pattern folder)

  bool operator==(const Problem&) const = default;
};

// {"kind": ..., <desc members>}: the description with the kind added (desc has no "kind").
nlohmann::json problem_to_json(const Problem& problem);
// Inverse of problem_to_json; throws std::invalid_argument when "kind" is missing.
Problem problem_from_json(const nlohmann::json& j);

// What a kind tells the stages about its problems. Every method may throw
// std::invalid_argument for a description it cannot read.
class ProblemKind {
 public:
  virtual ~ProblemKind() = default;
  virtual std::string name() const = 0;  // "gemm"

  // Readable names for tables and logs: "gemm_bias_gelu_tanh", "65536x3072x768".
  virtual std::string fusion(const nlohmann::json& desc) const = 0;
  virtual std::string shape(const nlohmann::json& desc) const = 0;
  // The dtype the problem computes in (its inputs'), for reports and precision checks.
  virtual graph::DType dtype(const nlohmann::json& desc) const = 0;
  virtual double flops(const nlohmann::json& desc) const = 0;
  // Bytes that must cross device memory once (every input read once, every output written once).
  virtual double min_bytes(const nlohmann::json& desc) const = 0;
  // Roofline seconds of one fused kernel for the problem on `device` under `precision`.
  virtual double fused_seconds(const nlohmann::json& desc, const DeviceProfile& device,
                               core::PrecisionMode precision) const = 0;
  // The sizes a tuning key is exact in, and bucketed by (gemm: m, n, k, batch).
  virtual std::vector<int64_t> tuning_dims(const nlohmann::json& desc) const = 0;
  // The precision contract's bound on ||out - ref|| / ||ref|| for this problem under `precision`.
  virtual double tolerance(const nlohmann::json& desc, core::PrecisionMode precision) const = 0;

  // The call that computes the problem: the kind's ABI argument struct as bytes with the
  // places for tensor addresses, the graph values it reads and the results it writes, with
  // their shapes and strides as `captured` holds them (docs/plan.md). Throws
  // std::invalid_argument when the problem cannot be expressed as one call (the reason).
  virtual ArgImage pack(const nlohmann::json& desc, const graph::Graph& captured) const = 0;
  // The float64 host reference: computes what the kernel computes for the same argument struct
  // with host pointers. Returns a FactStatus.
  virtual int reference(const FactCallHeader* args) const = 0;

  // A problem written on a command line (`fact tune --problem ...`): `words` holds the options
  // the user gave ("problem", "dtype", "epilogue", "layout", ...). nullopt when the words are
  // not this kind's; throws std::invalid_argument when they are but are malformed.
  virtual std::optional<nlohmann::json> from_command_line(
      const std::map<std::string, std::string>& words) const = 0;

  // The vendor baselines the kind's runtime implements, by name (`fact run-kernel --baselines`
  // takes only these; the tuner asks for those of its request the kind has). None by default.
  virtual std::vector<std::string> baselines() const { return {}; }
};

class KindRegistry {
 public:
  static KindRegistry& global();
  // Throws std::logic_error when the name is taken.
  void add(std::unique_ptr<ProblemKind> kind);
  const ProblemKind* find(std::string_view name) const;
  // Throws std::invalid_argument naming the registered kinds when `name` is not one.
  const ProblemKind& get(std::string_view name) const;
  const ProblemKind* find_by_id(uint32_t kind_id) const;  // fact_kind_id(name)
  std::vector<std::string> names() const;  // sorted

 private:
  std::vector<std::unique_ptr<ProblemKind>> kinds_;
};

// Registers a kind at static-initialization time (one per kind, in its pattern folder).
struct KindRegistrar {
  explicit KindRegistrar(std::unique_ptr<ProblemKind> kind);
};

// Shorthands through the global registry.
const ProblemKind& kind_of(const Problem& problem);
// "gemm_bias_gelu_tanh 65536x3072x768 bf16"
std::string problem_summary(const Problem& problem);

// The host reference of whatever kind `args` holds; FACT_ERR_INVALID_ARGS for an unknown kind
// or a wrong ABI version.
int reference_call(const FactCallHeader* args);

}  // namespace fact
