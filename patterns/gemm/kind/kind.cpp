// The "gemm" problem kind: what the engine's stages may ask about a GEMM problem
// (fact/problem/problem.hpp). Registered here; nothing outside this folder knows the kind.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "fact/problem/problem.hpp"
#include "fact/core/precision.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/kind/reference_host.hpp"

namespace fact::gemm {
namespace {

// The tensor-core rate a FACT GEMM kernel runs at: 16-bit natively, float32 as one TF32
// product (tf32) or three (strict, 3xTF32).
double kernel_rate(graph::DType dtype, const DeviceProfile& device, core::PrecisionMode precision) {
  if (dtype == graph::DType::BFloat16 || dtype == graph::DType::Float16) return device.bf16_flops;
  if (precision == core::PrecisionMode::Tf32) return device.tf32_flops;
  return device.tf32_flops / 3.0;
}

class GemmKind final : public ProblemKind {
 public:
  std::string name() const override { return kKindName; }

  std::string fusion(const nlohmann::json& desc) const override {
    return gemm_problem_from_json(desc).fusion_name();
  }
  std::string shape(const nlohmann::json& desc) const override {
    return gemm_problem_from_json(desc).shape_string();
  }
  graph::DType dtype(const nlohmann::json& desc) const override {
    return gemm_problem_from_json(desc).a.dtype;
  }
  double flops(const nlohmann::json& desc) const override {
    return gemm_problem_from_json(desc).flops();
  }
  double min_bytes(const nlohmann::json& desc) const override {
    return gemm_problem_from_json(desc).min_bytes();
  }
  double fused_seconds(const nlohmann::json& desc, const DeviceProfile& device,
                       core::PrecisionMode precision) const override {
    const GemmProblem p = gemm_problem_from_json(desc);
    return roofline_seconds(p.flops(), kernel_rate(p.a.dtype, device, precision), p.min_bytes(),
                            device);
  }
  std::vector<int64_t> tuning_dims(const nlohmann::json& desc) const override {
    const GemmProblem p = gemm_problem_from_json(desc);
    return {p.m, p.n, p.k, p.batch};
  }
  double tolerance(const nlohmann::json& desc, core::PrecisionMode precision) const override {
    const GemmProblem p = gemm_problem_from_json(desc);
    return core::tolerance_for(precision, p.d.dtype);
  }
  ArgImage pack(const nlohmann::json& desc, const graph::Graph& captured) const override {
    return pack_gemm(gemm_problem_from_json(desc), captured);
  }
  int reference(const FactCallHeader* args) const override {
    if (args->size != sizeof(FactGemmArgs)) return FACT_ERR_INVALID_ARGS;
    FactGemmArgs copy;
    std::memcpy(&copy, args, sizeof(copy));
    return reference_gemm_host(copy);
  }
  std::optional<nlohmann::json> from_command_line(
      const std::map<std::string, std::string>& words) const override {
    auto word = [&](const char* key, const char* fallback) {
      auto it = words.find(key);
      return it == words.end() || it->second.empty() ? std::string(fallback) : it->second;
    };
    const std::string sizes = word("problem", "");
    // Ours when the sizes name m, n and k.
    if (sizes.find("m=") == std::string::npos || sizes.find("n=") == std::string::npos ||
        sizes.find("k=") == std::string::npos) {
      return std::nullopt;
    }
    GemmProblem p = make_gemm_problem(parse_gemm_sizes(sizes),
                                      parse_operand_dtype(word("dtype", "bf16")),
                                      word("epilogue", ""), word("layout", "tn"));
    if (const std::string out = word("out_dtype", ""); !out.empty()) {
      p.d.dtype = parse_operand_dtype(out);  // e.g. bf16 operands with a float32 output
    }
    return gemm_problem_to_json(p);
  }
  // Implemented by patterns/gemm/runtime/blas_baselines.hpp.
  std::vector<std::string> baselines() const override { return {"cublas", "cublaslt"}; }
};

const KindRegistrar kGemmKind{std::make_unique<GemmKind>()};

}  // namespace
}  // namespace fact::gemm
