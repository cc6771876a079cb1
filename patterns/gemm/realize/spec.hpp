// GemmSpec: the GEMM pattern's frozen description of one CUTLASS kernel instantiation (the
// parameters of its realize::KernelSpec), the single source of truth for rendering, naming and
// caching. patterns/gemm_f32_strict renders the same spec with its own
// mainloop.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/realize/kernel_spec.hpp"
#include "fact/realize/param_space.hpp"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

using graph::DType;

// Multistage: the Ampere-style cp.async mainloop through CUTLASS 2.x's device API (no TMA, no
// warp specialization); used by the strict pattern's portable 3xTF32 fallback.
// Which operand a kernel transposes into its workspace before the GEMM (GemmSpec::staged_transpose).
enum class StagedTranspose { None, A, B };

enum class MainloopSchedule { Auto, TmaWarpSpecialized, Cooperative, Pingpong, Multistage };
enum class EpilogueSchedule { Auto, TmaWarpSpecialized, TmaCooperative, NoSmem };
enum class TileScheduler { Persistent, StreamK };
enum class RasterOrder { Heuristic, AlongM, AlongN };
// How float32 operands are multiplied. Native: the operand dtype's own tensor-core path
// (bf16/fp16). Tf32: one TF32 product (precision mode "tf32"). Tf32x3: split-operand 3xTF32,
// float32-accurate (precision mode "strict"). Simt: CUDA-core FFMA.
enum class MathMode { Native, Tf32, Tf32x3, Simt };

struct Shape3 {
  int m = 1, n = 1, k = 1;
  bool operator==(const Shape3&) const = default;
};

// Epilogue step kinds without tensors: what the kernel computes, not which tensors it reads.
struct EpilogueOpSpec {
  EpilogueStep::Kind kind = EpilogueStep::Kind::Scale;
  Activation activation = Activation::Identity;
  DType operand_dtype = DType::Unknown;
  bool operator==(const EpilogueOpSpec&) const = default;
};

struct GemmSpec {
  std::string pattern = "gemm";  // owning pattern folder
  // Problem class (not the sizes: one kernel serves every size it can implement).
  DType a_dtype = DType::BFloat16, b_dtype = DType::BFloat16;
  DType d_dtype = DType::BFloat16, accumulate = DType::Float32;
  Layout a_layout = Layout::RowMajor, b_layout = Layout::ColumnMajor;
  Layout d_layout = Layout::RowMajor;
  int align_a = 8, align_b = 8, align_d = 8;  // in elements
  bool batched = false;
  MathMode math = MathMode::Native;
  std::vector<EpilogueOpSpec> epilogue;
  // Tuning parameters.
  Shape3 tile{128, 128, 64};
  Shape3 cluster{1, 1, 1};
  MainloopSchedule mainloop = MainloopSchedule::Auto;
  EpilogueSchedule epilogue_schedule = EpilogueSchedule::Auto;
  TileScheduler scheduler = TileScheduler::Persistent;
  RasterOrder raster = RasterOrder::Heuristic;
  int swizzle = 1;   // max swizzle size for the persistent scheduler (1, 2, 4, 8)
  int split_k = 1;   // >1: stream-K scheduler in split-K mode with that many splits
  // How the stream-K scheduler sums the partial tiles of one output tile: true = in split order
  // (each split waits for the one before: deterministic, a serial chain of `split_k` steps);
  // false = in arrival order (concurrent adds into the workspace: no chain, last-bit
  // nondeterministic between runs). Only meaningful with the stream-K scheduler.
  bool ordered_reduction = true;
  int stages = 0;    // 0 = auto-carveout from the builder
  // An operand the kernel first copies, transposed, into its workspace so that it becomes
  // K-major (patterns/gemm_f32_strict: a float32 GEMM with A column-major and B row-major, a
  // weight gradient, has no K-major operand for TF32 wgmma). None for every other kernel.
  StagedTranspose staged_transpose = StagedTranspose::None;

  bool operator==(const GemmSpec&) const = default;

  // Readable, unique-per-configuration name usable as a C identifier, e.g.
  // "gemm_bias_gelu_tanh_bf16_tn_128x256x64_c2x1_coop_persistent". For logs and symbols;
  // never a cache key on its own.
  std::string name() const;
  nlohmann::json to_json() const;
  static GemmSpec from_json(const nlohmann::json& j);
  // The engine's form (kind "gemm", this pattern, name(), to_json()) and back; of() throws
  // std::invalid_argument for a spec of another kind.
  realize::KernelSpec to_kernel_spec() const;
  static GemmSpec of(const realize::KernelSpec& spec);
};

// A parameter space of GEMM specs (realize::ParamSpace in the GEMM pattern's own type).
struct GemmPruned {
  GemmSpec spec;
  std::string reason;
};
struct GemmSpace {
  std::vector<GemmSpec> candidates;  // unique, in preference order (first = default)
  std::vector<GemmPruned> pruned;
  realize::ParamSpace to_param_space() const;
};

// The GEMM pattern's space options: the engine's, with the problem's sizes (0 = unknown):
// tiles far larger than the problem are pruned, deep-K split counts come from them.
struct SpaceOptions : realize::SpaceOptions {
  int64_t m = 0, n = 0, k = 0, batch = 1;
};

}  // namespace fact::gemm
