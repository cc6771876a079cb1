#include <sstream>
#include <stdexcept>

#include "patterns/gemm/realize/cutlass_names.hpp"
#include "fact/runtime/fact_abi.h"
#include "patterns/gemm/realize/render.hpp"
#include "patterns/gemm_f32_strict/realize/render.hpp"

namespace fact::strict {

using namespace fact::gemm;  // NOLINT: the GEMM spec and its tables
using realize::KernelTemplate;
using realize::RenderError;
using realize::kEntryPlaceholder;
using realize::kKeyPlaceholder;

namespace {

constexpr const char* kTemplateIdentity = "gemm_f32_strict/2";  // 2: epilogue chains
constexpr int kFloatAlignment = 4;          // float elements in a 16-byte access
constexpr int kSm90SharedMemoryBytes = 232448;  // opt-in dynamic shared memory per block, sm_90

using Kind = EpilogueStep::Kind;

// The epilogue steps after a leading Scale (which is alpha).
std::vector<EpilogueOpSpec> steps_after_alpha(const GemmSpec& spec) {
  std::vector<EpilogueOpSpec> steps = spec.epilogue;
  if (!steps.empty() && steps.front().kind == Kind::Scale) steps.erase(steps.begin());
  return steps;
}

// Both kernel families: alpha (a leading Scale), then bias, activation, residual (beta * C) and
// multiply (* C) links in any order, float32 operands, one bias vector, C read once.
std::optional<std::string> epilogue_unsupported_reason(const GemmSpec& spec) {
  int biases = 0, sources = 0;
  for (const auto& op : steps_after_alpha(spec)) {
    switch (op.kind) {
      case Kind::Scale:
        return "a scale step after other epilogue steps has no run-time argument";
      case Kind::Activation:
        if (op.activation == Activation::Identity) return "an identity activation step";
        break;
      case Kind::Bias:
        if (++biases > 1) return "two bias steps: a kernel reads one bias vector";
        break;
      case Kind::Residual:
      case Kind::Multiply:
        if (++sources > 1) return "two epilogue steps read C: a kernel reads C once";
        break;
    }
    if (op.kind != Kind::Activation && op.operand_dtype != DType::Float32 &&
        op.operand_dtype != DType::Unknown)
      return "strict epilogue operands (bias, C) must be float32";
  }
  return std::nullopt;
}

// The multistage kernel's CUTLASS 2.x epilogue computes act(alpha * acc + beta * source) with
// one source operand (C, or the bias vector read as a matrix with leading dimension 0).
std::optional<std::string> sm80_epilogue_unsupported_reason(const GemmSpec& spec) {
  const std::vector<EpilogueOpSpec> steps = steps_after_alpha(spec);
  size_t i = 0;
  if (i < steps.size() && (steps[i].kind == Kind::Bias || steps[i].kind == Kind::Residual)) ++i;
  if (i < steps.size() && steps[i].kind == Kind::Activation) ++i;
  if (i != steps.size())
    return "the multistage (sm80) strict kernel fuses [activation of] alpha * acc plus a bias or "
           "beta * C, not both, no product with C (the cooperative sm90 kernel fuses any chain)";
  return std::nullopt;
}

// The spec's chain as the type of patterns/gemm/gemm_epilogue.cuh, alpha folded in and
// operands spelled float.
std::string chain_type(const GemmSpec& spec) {
  GemmSpec chain_spec = spec;
  chain_spec.epilogue = steps_after_alpha(spec);
  for (auto& op : chain_spec.epilogue)
    if (op.kind != Kind::Activation) op.operand_dtype = DType::Float32;
  return gemm::epilogue_chain_type(chain_spec);
}

// Warp tile of the multistage kernel: at most 64 x 32 per warp (64 x 64 spills with the
// 3xTF32 fragments: 255 registers and 1.5 KiB of spills at 128 x 128 x 32), 1 to 8 warps.
Shape3 sm80_warp_tile(const GemmSpec& spec) {
  return Shape3{spec.tile.m < 64 ? spec.tile.m : 64, spec.tile.n < 32 ? spec.tile.n : 32,
                spec.tile.k};
}

std::optional<std::string> sm80_unsupported_reason(const GemmSpec& spec) {
  const Shape3& t = spec.tile;
  if (t.m % 32 || t.n % 32 || t.m < 32 || t.n < 32) return "tile M and N must be multiples of 32";
  if (t.k != 16 && t.k != 32) return "tile K must be 16 or 32";
  Shape3 w = sm80_warp_tile(spec);
  int warps = (t.m / w.m) * (t.n / w.n);
  if (warps > 8) return "more than 8 warps per threadblock";
  if (spec.stages < 3 || spec.stages > 6) return "multistage kernels take 3 to 6 stages";
  long smem = long(t.m + t.n) * t.k * 4 * spec.stages;
  if (smem > kSm90SharedMemoryBytes) return "pipeline stages exceed shared memory";
  if (spec.cluster != Shape3{1, 1, 1}) return "multistage kernels run without clusters";
  return sm80_epilogue_unsupported_reason(spec);
}

// Shared memory the sm90 kernel's epilogue takes beside the pipeline stages (TMA store staging,
// C load stages, pipeline barriers, scheduler state). Measured with CUTLASS 4.2 (sizeof the
// collective epilogue's SharedStorage, 256 x 128 tile): 34 KiB without C, 66 KiB when the chain
// reads C (four float32 C stages of the 128 x 32 epilogue tile, D staged in the C buffers); a
// bias row adds nothing measurable (it fits the alignment padding).
long sm90_epilogue_bytes(const GemmSpec& spec) {
  for (const auto& op : spec.epilogue)
    if (op.kind == Kind::Residual || op.kind == Kind::Multiply) return 66 * 1024;
  return 34 * 1024;
}

long sm90_stage_bytes(const Shape3& tile) {
  return long(tile.m + 2 * tile.n) * tile.k * 4;  // A, B (hi in place), B lo
}

std::optional<std::string> sm90_unsupported_reason(const GemmSpec& spec) {
  if (spec.a_layout == Layout::ColumnMajor && spec.b_layout == Layout::RowMajor)
    return "A column-major with B row-major has no K-major operand for TF32 wgmma";
  const Shape3& t = spec.tile;
  if (t.k != 32) return "tile K must be 32 (one 128-byte swizzle row of float32)";
  if (t.m % 128 || t.m < 128) return "tile M must be a multiple of 128 (two consumer warpgroups)";
  if (t.n % 64 || t.n < 64) return "tile N must be a multiple of 64 (64 x 64 accumulator blocks)";
  if (long(t.m) * t.n > 256L * 128) return "accumulators exceed the consumer register budget";
  if (spec.stages < 2) return "the sm90 kernel needs at least 2 stages";
  if (sm90_stage_bytes(t) * spec.stages + sm90_epilogue_bytes(spec) > kSm90SharedMemoryBytes)
    return "pipeline stages exceed shared memory";
  if (spec.cluster != Shape3{1, 1, 1}) return "the sm90 strict kernel runs without clusters";
  if (spec.split_k != 1) return "split-K slices are a launch argument (FactGemmArgs::split_k)";
  return std::nullopt;
}

std::string sm90_type_block(const GemmSpec& spec) {
  std::ostringstream out;
  out << "#include \"patterns/gemm_f32_strict/strict_gemm_sm90.cuh\"\n\n"
      << "using FactKernel = fact::strict::Sm90StrictGemm<\n"
      << "    " << layout_cpp(spec.a_layout) << ",  // A (M x K)\n"
      << "    " << layout_cpp(spec.b_layout) << ",  // B (K x N)\n"
      << "    cute::Shape<cute::Int<" << spec.tile.m << ">, cute::Int<" << spec.tile.n
      << ">, cute::Int<" << spec.tile.k << ">>,  // CTA tile of the kernel's (M, N, K)\n"
      << "    " << spec.stages << ",  // pipeline stages\n"
      << "    " << tile_scheduler_cpp(spec.scheduler) << ",  // tile scheduler\n"
      << "    " << chain_type(spec) << ">;  // epilogue chain\n";
  return out.str();
}

std::string sm80_type_block(const GemmSpec& spec) {
  Shape3 w = sm80_warp_tile(spec);
  std::ostringstream out;
  out << "#include \"patterns/gemm_f32_strict/strict_gemm_sm80.cuh\"\n\n"
      << "using FactKernel = fact::strict::Sm80StrictGemm<\n"
      << "    " << layout_cpp(spec.a_layout) << ",  // A (M x K)\n"
      << "    " << layout_cpp(spec.b_layout) << ",  // B (K x N)\n"
      << "    cutlass::gemm::GemmShape<" << spec.tile.m << ", " << spec.tile.n << ", "
      << spec.tile.k << ">,  // threadblock tile\n"
      << "    cutlass::gemm::GemmShape<" << w.m << ", " << w.n << ", " << w.k
      << ">,  // warp tile\n"
      << "    " << spec.stages << ",  // pipeline stages\n"
      << "    " << chain_type(spec) << ">;  // epilogue chain\n";
  return out.str();
}

std::string entry_block(const GemmSpec& spec) {
  const std::string entry(kEntryPlaceholder);
  nlohmann::json info = {
      {"abi_version", FACT_ABI_VERSION},
      {"entry", entry},
      {"key", std::string(kKeyPlaceholder)},
      {"name", spec.name()},
      {"pattern", spec.pattern},
      {"template", kTemplateIdentity},
      {"arch", "sm_90a"},
      {"spec", spec.to_json()},
  };
  const bool a_row = spec.a_layout == Layout::RowMajor;
  const bool b_row = spec.b_layout == Layout::RowMajor;
  std::ostringstream out;
  out << "\nextern \"C\" __attribute__((visibility(\"default\"))) int " << entry
      << "(const FactGemmArgs* args, void* workspace, size_t* workspace_size, cudaStream_t stream) {\n"
      << "  return FactKernel::run(args, workspace, workspace_size, stream);\n"
      << "}\n\n"
      << "extern \"C\" __attribute__((visibility(\"default\"))) const char* fact_kernel_info(void) {\n"
      << "  return R\"FACT(" << info.dump() << ")FACT\";\n"
      << "}\n\n"
      << "#ifdef FACT_STANDALONE_MAIN\n"
      << "#include \"patterns/gemm_f32_strict/standalone_check.cuh\"\n"
      << "int main(int argc, char** argv) {\n"
      << "  return fact::strict_check::standalone_main<FactKernel::Chain>(argc, argv, " << entry
      << ", fact_kernel_info(), " << (a_row ? "true" : "false") << ", "
      << (b_row ? "true" : "false") << ");\n"
      << "}\n"
      << "#endif\n";
  return out.str();
}

void replace_all(std::string& text, std::string_view from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

}  // namespace

std::optional<std::string> f32_strict_unsupported_reason(const GemmSpec& spec) {
  if (spec.math != MathMode::Tf32x3) return "math mode is not 3xtf32";
  if (spec.a_dtype != DType::Float32 || spec.b_dtype != DType::Float32 ||
      spec.d_dtype != DType::Float32 || spec.accumulate != DType::Float32)
    return "strict kernels take float32 A, B, D and accumulate in float32";
  if (spec.d_layout != Layout::RowMajor) return "D must be row-major";
  if (spec.align_a != kFloatAlignment || spec.align_b != kFloatAlignment ||
      spec.align_d != kFloatAlignment)
    return "strict kernels need 16-byte aligned operands (alignment 4)";
  if (auto why = epilogue_unsupported_reason(spec)) return why;
  switch (spec.mainloop) {
    case MainloopSchedule::Multistage:
      return sm80_unsupported_reason(spec);
    case MainloopSchedule::Cooperative:
      return sm90_unsupported_reason(spec);
    default:
      return "strict kernels use the multistage (sm80) or cooperative (sm90) mainloop";
  }
}

KernelTemplate render_f32_strict_template(const GemmSpec& spec) {
  if (auto why = f32_strict_unsupported_reason(spec))
    throw RenderError("gemm_f32_strict cannot realize " + spec.name() + ": " + *why);
  std::ostringstream out;
  out << "// Generated by FACT (template " << kTemplateIdentity
      << "). Do not edit: render the GemmSpec again.\n"
      << "// Kernel: " << spec.name() << "\n"
      << "// Key:    " << kKeyPlaceholder << "\n";
  std::vector<std::string> headers = {"patterns/gemm_f32_strict/standalone_check.cuh",
                                      "patterns/gemm_f32_strict/strict_epilogue.cuh",
                                      "patterns/gemm/gemm_epilogue.cuh",
                                      "include/fact/runtime/fact_abi.h"};
  if (spec.mainloop == MainloopSchedule::Cooperative) {
    out << sm90_type_block(spec);
    headers.push_back("patterns/gemm_f32_strict/strict_gemm_sm90.cuh");
  } else {
    out << sm80_type_block(spec);
    headers.push_back("patterns/gemm_f32_strict/strict_gemm_sm80.cuh");
  }
  out << entry_block(spec);
  return KernelTemplate{out.str(), headers, kTemplateIdentity};
}

std::string render_f32_strict_source(const GemmSpec& spec) {
  std::string source = render_f32_strict_template(spec).source;
  replace_all(source, kEntryPlaceholder, "fact_" + spec.name());
  replace_all(source, kKeyPlaceholder, "unkeyed (rendered without render_kernel)");
  return source;
}

std::vector<GemmSpec> f32_strict_candidates(const GemmSpec& problem) {
  std::vector<GemmSpec> out;
  GemmSpec base = problem;
  base.math = MathMode::Tf32x3;
  base.cluster = {1, 1, 1};
  base.split_k = 1;
  // Each tile at its stage count, or the deepest pipeline that fits beside the epilogue (a
  // chain reading C takes 32 KiB more: one stage fewer).
  struct Sm90Choice { Shape3 tile; int stages; };
  const Sm90Choice sm90_choices[] = {{{256, 128, 32}, 3}, {{128, 128, 32}, 4}, {{256, 64, 32}, 4}};
  for (const auto& choice : sm90_choices) {
    for (TileScheduler scheduler : {TileScheduler::Persistent, TileScheduler::StreamK}) {
      GemmSpec s = base;
      s.mainloop = MainloopSchedule::Cooperative;
      s.epilogue_schedule = EpilogueSchedule::TmaCooperative;
      s.scheduler = scheduler;
      s.tile = choice.tile;
      for (s.stages = choice.stages; s.stages >= 2; --s.stages) {
        if (!f32_strict_unsupported_reason(s)) {
          out.push_back(s);
          break;
        }
      }
    }
  }
  struct Sm80Choice { Shape3 tile; int stages; };
  const Sm80Choice sm80_choices[] = {
      {{128, 128, 32}, 3}, {{128, 128, 16}, 4}, {{256, 64, 32}, 3}, {{128, 64, 32}, 4}};
  for (const auto& choice : sm80_choices) {
    GemmSpec s = base;
    s.mainloop = MainloopSchedule::Multistage;
    s.epilogue_schedule = EpilogueSchedule::Auto;
    s.scheduler = TileScheduler::Persistent;
    s.tile = choice.tile;
    s.stages = choice.stages;
    if (!f32_strict_unsupported_reason(s)) out.push_back(s);
  }
  return out;
}

}  // namespace fact::strict
