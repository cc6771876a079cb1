#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "patterns/gemm/realize/cutlass_names.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/realize/render.hpp"
#include "patterns/gemm_f32_strict/realize/render.hpp"

namespace fact::strict {

using namespace fact::gemm;  // NOLINT: the GEMM spec and its tables
using realize::KernelTemplate;
using realize::RenderError;
using realize::kEntryPlaceholder;
using realize::kKeyPlaceholder;

namespace {

constexpr const char* kTemplateIdentity = "gemm_f32_strict/3";  // 3: ABI v2, one TF32 product
constexpr int kFloatAlignment = 4;          // float elements in a 16-byte access
constexpr int kSm90SharedMemoryBytes = 232448;  // opt-in dynamic shared memory per block, sm_90

using Kind = EpilogueStep::Kind;

// Both kernel families: the spec's steps as the kernel runs them (kernel_epilogue: leading
// scales are alpha), float32 operands. The cooperative sm90 kernel takes any chain (scales and
// adds anywhere, any number of biases, activations and M×N operands).
std::optional<std::string> epilogue_unsupported_reason(const GemmSpec& spec) {
  if (spec.epilogue.size() > FACT_GEMM_MAX_STEPS)
    return std::to_string(spec.epilogue.size()) + " epilogue steps (a kernel takes at most " +
           std::to_string(FACT_GEMM_MAX_STEPS) + ")";
  for (const auto& op : spec.epilogue) {
    if (op.kind == Kind::Activation && op.activation == Activation::Identity)
      return "an identity activation step";
    const StepOp& descriptor = step_op(op.kind);
    if (descriptor.stores_d)
      return "a " + std::string(descriptor.name) + " step (its store writes bf16/f16 through "
             "the sm90 GEMM template's epilogue; strict kernels have none)";
    if (descriptor.operand == OperandShape::ROW_VECTOR)
      return "a " + std::string(descriptor.name) + " step (a per-row vector: realized for "
             "bf16/f16 GEMMs; the strict kernels' row-vector path is neither built nor verified)";
    if (reads_operand(op.kind) && op.operand_dtype != DType::Float32 &&
        op.operand_dtype != DType::Unknown)
      return "strict epilogue operands (bias, M×N tensors) must be float32";
  }
  return std::nullopt;
}

// The multistage kernel's CUTLASS 2.x epilogue computes act(alpha * acc + beta * source) with
// one source operand (C, or the bias vector read as a matrix with leading dimension 0).
std::optional<std::string> sm80_epilogue_unsupported_reason(const GemmSpec& spec) {
  const std::vector<EpilogueOpSpec>& steps = spec.epilogue;
  size_t i = 0;
  if (i < steps.size() && (steps[i].kind == Kind::Bias || steps[i].kind == Kind::Residual)) ++i;
  if (i < steps.size() && steps[i].kind == Kind::Activation) ++i;
  if (i != steps.size())
    return "the multistage (sm80) strict kernel fuses [activation of] alpha * acc plus a bias or "
           "beta * C, not both, no scale, add or product with C after them (the cooperative sm90 "
           "kernel fuses any chain)";
  return std::nullopt;
}

// The spec's chain as the type of patterns/gemm/gemm_epilogue.cuh, operands spelled float.
std::string chain_type(const GemmSpec& spec) {
  GemmSpec chain_spec = spec;
  for (auto& op : chain_spec.epilogue)
    if (reads_operand(op.kind)) op.operand_dtype = DType::Float32;
  return gemm::epilogue_chain_type(chain_spec);
}

// Warp tile of the multistage kernel: at most 64 x 32 per warp (64 x 64 spills with the
// 3xTF32 fragments: 255 registers and 1.5 KiB of spills at 128 x 128 x 32), 1 to 8 warps.
Shape3 sm80_warp_tile(const GemmSpec& spec) {
  return Shape3{spec.tile.m < 64 ? spec.tile.m : 64, spec.tile.n < 32 ? spec.tile.n : 32,
                spec.tile.k};
}

std::optional<std::string> sm80_unsupported_reason(const GemmSpec& spec) {
  if (spec.staged_transpose != StagedTranspose::None)
    return "the multistage (sm80) kernel reads any layout in place (no staged transpose)";
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
// bias row adds nothing measurable (it fits the alignment padding), each further one a row of
// the tile. M×N operands after the first are loaded straight into registers (no shared memory).
long sm90_epilogue_bytes(const GemmSpec& spec) {
  bool reads_c = false;
  int biases = 0;
  for (const auto& op : spec.epilogue) {
    reads_c = reads_c || gemm::step_op(op.kind).operand == gemm::OperandShape::MATRIX;
    biases += gemm::step_op(op.kind).operand == gemm::OperandShape::COLUMN_VECTOR;
  }
  const long rows = biases > 1 ? long(biases - 1) * std::max(spec.tile.m, spec.tile.n) * 4 : 0;
  return (reads_c ? 66 * 1024 : 34 * 1024) + rows;
}

// One pipeline stage: A and B, plus B's lo parts for 3xTF32.
long sm90_stage_bytes(const GemmSpec& spec) {
  const Shape3& tile = spec.tile;
  const int b_buffers = spec.math == MathMode::Tf32 ? 1 : 2;
  return long(tile.m + b_buffers * tile.n) * tile.k * 4;
}

int sm90_products(const GemmSpec& spec) { return spec.math == MathMode::Tf32 ? 1 : 3; }

// A column-major with B row-major: neither operand is K-major, as TF32 wgmma needs one.
bool no_k_major_operand(const GemmSpec& spec) {
  return spec.a_layout == Layout::ColumnMajor && spec.b_layout == Layout::RowMajor;
}

std::optional<std::string> sm90_unsupported_reason(const GemmSpec& spec) {
  if (no_k_major_operand(spec) && spec.staged_transpose == StagedTranspose::None)
    return "A column-major with B row-major has no K-major operand for TF32 wgmma (the sm90 "
           "kernel takes it with one operand transposed into its workspace: staged_transpose)";
  if (!no_k_major_operand(spec) && spec.staged_transpose != StagedTranspose::None)
    return "a staged transpose is for A column-major with B row-major only (every other layout "
           "has a K-major operand)";
  const Shape3& t = spec.tile;
  if (t.k != 32) return "tile K must be 32 (one 128-byte swizzle row of float32)";
  if (t.m % 128 || t.m < 128) return "tile M must be a multiple of 128 (two consumer warpgroups)";
  if (t.n % 64 || t.n < 64) return "tile N must be a multiple of 64 (64 x 64 accumulator blocks)";
  if (long(t.m) * t.n > 256L * 128) return "accumulators exceed the consumer register budget";
  if (spec.stages < 2) return "the sm90 kernel needs at least 2 stages";
  if (sm90_stage_bytes(spec) * spec.stages + sm90_epilogue_bytes(spec) > kSm90SharedMemoryBytes)
    return "pipeline stages exceed shared memory";
  if (spec.cluster != Shape3{1, 1, 1}) return "the sm90 strict kernel runs without clusters";
  if (spec.split_k != 1) return "split-K slices are a launch argument (FactGemmArgs::split_k)";
  return std::nullopt;
}

// The sm90 kernel type. With a staged transpose the kernel is Sm90StagedTransposeGemm over the
// Sm90StrictGemm of the layouts after the copy: A staged row-major (A and B row-major), or B
// staged column-major (A and B column-major).
std::string sm90_type_block(const GemmSpec& spec) {
  Layout a = spec.a_layout, b = spec.b_layout;
  if (spec.staged_transpose == StagedTranspose::A) a = Layout::RowMajor;
  if (spec.staged_transpose == StagedTranspose::B) b = Layout::ColumnMajor;
  const bool staged = spec.staged_transpose != StagedTranspose::None;
  std::ostringstream out;
  out << "#include \"patterns/gemm_f32_strict/strict_gemm_sm90.cuh\"\n";
  if (staged) out << "#include \"patterns/gemm_f32_strict/strict_staged_transpose.cuh\"\n";
  out << "\n";
  if (staged) {
    out << "using FactKernel = fact::strict::Sm90StagedTransposeGemm<\n"
        << "    fact::strict::StagedOperand::"
        << (spec.staged_transpose == StagedTranspose::A ? "A" : "B")
        << ",  // copied transposed into the workspace first (the call: A column-major, B "
           "row-major)\n"
        << "    fact::strict::Sm90StrictGemm<\n";
  } else {
    out << "using FactKernel = fact::strict::Sm90StrictGemm<\n";
  }
  out << "    " << layout_cpp(a) << ",  // A (M x K)\n"
      << "    " << layout_cpp(b) << ",  // B (K x N)\n"
      << "    cute::Shape<cute::Int<" << spec.tile.m << ">, cute::Int<" << spec.tile.n
      << ">, cute::Int<" << spec.tile.k << ">>,  // CTA tile of the kernel's (M, N, K)\n"
      << "    " << spec.stages << ",  // pipeline stages\n"
      << "    " << tile_scheduler_cpp(spec.scheduler) << ",  // tile scheduler\n"
      << "    " << chain_type(spec) << ",  // epilogue chain\n"
      << "    " << sm90_products(spec) << (staged ? ">>;" : ">;") << "  // TF32 products per k-step ("
      << (sm90_products(spec) == 3 ? "3xTF32: float32-accurate" : "one: precision tf32") << ")\n";
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
      {"kind", kKindName},
      {"abi_version", FACT_ABI_VERSION},
      {"entry", entry},
      {"key", std::string(kKeyPlaceholder)},
      {"name", spec.name()},
      {"pattern", spec.pattern},
      {"template", kTemplateIdentity},
      {"arch", "sm_90a"},
      {"spec", spec.to_kernel_spec().to_json()},
  };
  const bool a_row = spec.a_layout == Layout::RowMajor;
  const bool b_row = spec.b_layout == Layout::RowMajor;
  std::ostringstream out;
  out << "\nextern \"C\" __attribute__((visibility(\"default\"))) int " << entry
      << "(const FactCallHeader* args, void* workspace, size_t* workspace_size, void* stream) {\n"
      << "  return FactKernel::run(args, workspace, workspace_size, static_cast<cudaStream_t>(stream));\n"
      << "}\n\n"
      << "extern \"C\" __attribute__((visibility(\"default\"))) const char* fact_kernel_info(void) {\n"
      << "  return R\"FACT(" << info.dump() << ")FACT\";\n"
      << "}\n\n"
      << "#ifdef FACT_STANDALONE_MAIN\n"
      << "#include \"patterns/gemm_f32_strict/standalone_check.cuh\"\n"
      << "int main(int argc, char** argv) {\n"
      << "  return fact::strict_check::standalone_main<FactKernel::Chain>(argc, argv, " << entry
      << ", fact_kernel_info(), " << (a_row ? "true" : "false") << ", "
      << (b_row ? "true" : "false") << ", "
      << (spec.mainloop == MainloopSchedule::Cooperative ? sm90_products(spec) : 3) << ");\n"
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
  if (spec.math != MathMode::Tf32x3 && spec.math != MathMode::Tf32)
    return "math mode is neither 3xtf32 nor tf32";
  if (spec.math == MathMode::Tf32 && spec.mainloop != MainloopSchedule::Cooperative)
    return "one TF32 product runs on the cooperative sm90 kernel only (the multistage kernel "
           "computes 3xTF32)";
  if (spec.a_dtype != DType::Float32 || spec.b_dtype != DType::Float32 ||
      spec.d_dtype != DType::Float32 || spec.accumulate != DType::Float32)
    return "strict kernels take float32 A, B, D and accumulate in float32";
  if (spec.d_layout != Layout::RowMajor) return "D must be row-major";
  if (spec.pattern != "gemm_f32_strict") return "pattern '" + spec.pattern + "' is not gemm_f32_strict";
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
                                      "patterns/gemm_f32_strict/strict_epilogue.cuh"};
  const auto& epilogue = gemm_epilogue_headers();
  headers.insert(headers.end(), epilogue.begin(), epilogue.end());
  headers.push_back("include/fact/runtime/fact_abi.h");
  if (spec.mainloop == MainloopSchedule::Cooperative) {
    out << sm90_type_block(spec);
    headers.push_back("patterns/gemm_f32_strict/strict_gemm_sm90.cuh");
    if (spec.staged_transpose != StagedTranspose::None)
      headers.push_back("patterns/gemm_f32_strict/strict_staged_transpose.cuh");
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

std::vector<GemmSpec> f32_strict_candidates(const GemmSpec& problem, int64_t m, int64_t n) {
  std::vector<GemmSpec> out;
  GemmSpec base = problem;
  const bool tf32 = problem.math == MathMode::Tf32;
  base.math = tf32 ? MathMode::Tf32 : MathMode::Tf32x3;
  base.cluster = {1, 1, 1};
  base.split_k = 1;
  base.staged_transpose = StagedTranspose::None;
  // No K-major operand: the sm90 kernel copies one operand transposed first, the smaller one
  // first (A is M x K, B is K x N: the copy moves 8 bytes per element), B when unknown.
  std::vector<StagedTranspose> staged = {StagedTranspose::None};
  if (no_k_major_operand(base)) {
    staged = m > 0 && n > 0 && m < n
                 ? std::vector<StagedTranspose>{StagedTranspose::A, StagedTranspose::B}
                 : std::vector<StagedTranspose>{StagedTranspose::B, StagedTranspose::A};
  }
  // Each tile at its stage count, or the deepest pipeline that fits beside the epilogue (a
  // chain reading C takes 32 KiB more: one stage fewer). One TF32 product keeps no lo buffer of
  // B: a stage is a third (256-row tiles) to a half smaller, so deeper pipelines fit.
  struct Sm90Choice { Shape3 tile; int stages; };
  const Sm90Choice sm90_strict[] = {{{256, 128, 32}, 3}, {{128, 128, 32}, 4}, {{256, 64, 32}, 4}};
  const Sm90Choice sm90_tf32[] = {{{256, 128, 32}, 4}, {{128, 128, 32}, 6}, {{256, 64, 32}, 5}};
  for (StagedTranspose operand : staged) {
  for (const auto& choice : tf32 ? sm90_tf32 : sm90_strict) {
    for (TileScheduler scheduler : {TileScheduler::Persistent, TileScheduler::StreamK}) {
      GemmSpec s = base;
      s.staged_transpose = operand;
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
  }
  // The portable kernel: 3xTF32, offered for precision strict (more accurate than a tf32
  // problem asks, so there only when no sm90 kernel fits).
  if (tf32 && !out.empty()) return out;
  struct Sm80Choice { Shape3 tile; int stages; };
  const Sm80Choice sm80_choices[] = {
      {{128, 128, 32}, 3}, {{128, 128, 16}, 4}, {{256, 64, 32}, 3}, {{128, 64, 32}, 4}};
  for (const auto& choice : sm80_choices) {
    GemmSpec s = base;
    s.math = MathMode::Tf32x3;
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
