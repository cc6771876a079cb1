// Configuration rules of the sm90 GEMM template: what CUTLASS's builders and kernels accept,
// and a model of the shared memory they lay out. Numbers follow CUTLASS 4.2's sm90 builders
// (sm90_gmma_builder.inl, epilogue sm90_builder.inl).
#include <algorithm>
#include <numeric>
#include <string>

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/realize/cutlass_names.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/realize/space.hpp"

namespace fact::gemm {
namespace {
using Kind = EpilogueStep::Kind;

constexpr int kSmemCapacityBytes = 232448;   // sm90 per-CTA opt-in shared memory (227 KiB)
constexpr int kStageBarrierBytes = 16;       // full + empty barrier of one pipeline stage
constexpr int kEpilogueBarrierSlack = 256;   // epilogue load/store pipeline barriers (upper bound)
constexpr int kSmemAlignment = 128;

int round_up(int x, int to) { return (x + to - 1) / to * to; }

int bytes_of(DType d) { return graph::dtype_bytes(d); }

std::string token(DType d) { return std::string(realize::dtype_token(d)); }

bool is_16bit_float(DType d) { return d == DType::BFloat16 || d == DType::Float16; }
bool is_epilogue_float(DType d) { return is_16bit_float(d) || d == DType::Float32; }

// The dtype of C (the first M×N epilogue operand: CUTLASS's source fetch stages it in shared
// memory; further ones load straight into registers), else Unknown.
DType source_dtype(const GemmSpec& spec) {
  for (const auto& op : spec.epilogue) {
    if (step_op(op.kind).operand == OperandShape::MATRIX) return op.operand_dtype;
  }
  return DType::Unknown;
}

// Shared memory of the bias rows: each bias step broadcasts a tile-N row from shared memory.
int bias_bytes(const GemmSpec& spec) {
  int bytes = 0;
  for (const auto& op : spec.epilogue) {
    if (step_op(op.kind).operand == OperandShape::COLUMN_VECTOR) bytes += spec.tile.n * bytes_of(op.operand_dtype);
  }
  return bytes;
}

std::optional<std::string> alignment_error(const char* operand, int align, DType dtype) {
  const int bytes = align * bytes_of(dtype);
  if (align <= 0) return std::string(operand) + " alignment must be positive";
  if (bytes % 16 != 0) {
    return std::string(operand) + " alignment " + std::to_string(align) + " elements (" +
           std::to_string(bytes) + " bytes): TMA needs multiples of 16 bytes";
  }
  return std::nullopt;
}

std::optional<std::string> dtype_error(const GemmSpec& s) {
  switch (s.math) {
    case MathMode::Tf32x3:
      return std::string("math 3xtf32 (strict float32) is not available in the sm90 "
                         "CollectiveBuilder template: the strict GEMM kernels provide it");
    case MathMode::Simt:
      return std::string("math simt has no sm90 CollectiveBuilder path");
    case MathMode::Tf32:
      if (s.a_dtype != DType::Float32 || s.b_dtype != DType::Float32) {
        return "math tf32 needs float32 operands (got " + token(s.a_dtype) + "/" +
               token(s.b_dtype) + ")";
      }
      break;
    case MathMode::Native:
      if (s.a_dtype == DType::Float32 || s.b_dtype == DType::Float32) {
        return std::string("float32 operands need math tf32 or 3xtf32");
      }
      if (s.a_dtype != s.b_dtype || !is_16bit_float(s.a_dtype)) {
        return "operands " + token(s.a_dtype) + "/" + token(s.b_dtype) +
               ": the native path takes bf16 or f16 operands of one dtype";
      }
      break;
  }
  if (!is_epilogue_float(s.d_dtype)) return "output dtype " + token(s.d_dtype) + " unsupported";
  if (s.accumulate != DType::Float32) return "accumulation must be f32 (got " + token(s.accumulate) + ")";
  return std::nullopt;
}

std::optional<std::string> tile_error(const GemmSpec& s) {
  const auto& t = s.tile;
  if (t.m != 64 && t.m != 128 && t.m != 256) {
    return "tile M " + std::to_string(t.m) + ": must be 64, 128 or 256";
  }
  if (t.n < 16 || t.n > 256 || t.n % 16 != 0) {
    return "tile N " + std::to_string(t.n) + ": must be a multiple of 16 in [16, 256]";
  }
  const int k_bytes = t.k * bytes_of(s.a_dtype);
  if (t.k <= 0 || k_bytes % 64 != 0 || k_bytes > 512) {
    return "tile K " + std::to_string(t.k) + " (" + std::to_string(k_bytes) +
           " bytes): must be a multiple of 64 bytes, at most 512";
  }
  const bool tn = s.a_layout == Layout::RowMajor && s.b_layout == Layout::ColumnMajor;
  if (s.math == MathMode::Tf32 && !tn) {
    // The builder sends 32-bit operands that are not both K-major through its register-sourced
    // (operand-swapping) mainloop; on an H200 with CUTLASS 4.2 that path returned wrong results
    // for row-major B (relative error ~1.4), so it is not offered here: patterns/gemm_f32_strict
    // realizes the other layouts with its own mainloop (one TF32 product).
    return std::string("the CUTLASS TF32 kernels take K-major operands only (row-major A, "
                       "column-major B): other layouts run on gemm_f32_strict's mainloop");
  }
  const auto& c = s.cluster;
  auto pow2 = [](int v) { return v == 1 || v == 2 || v == 4; };
  if (c.k != 1 || !pow2(c.m) || !pow2(c.n) || c.m * c.n > 8) {
    return "cluster " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
           std::to_string(c.k) + ": M and N in {1, 2, 4}, at most 8 CTAs, K = 1";
  }
  return std::nullopt;
}

std::optional<std::string> schedule_error(const GemmSpec& s) {
  if (s.mainloop == MainloopSchedule::Multistage) {
    return std::string("the multistage (cp.async) mainloop is CUTLASS 2.x's, not this template's");
  }
  const MainloopSchedule mainloop = resolved_mainloop(s);
  const int m = s.tile.m;
  if (mainloop == MainloopSchedule::Cooperative && m < 128) {
    return "cooperative splits the tile's M over two consumer warp groups: needs tile M >= 128 "
           "(tile M is " + std::to_string(m) + ")";
  }
  if ((mainloop == MainloopSchedule::Pingpong || mainloop == MainloopSchedule::TmaWarpSpecialized) &&
      m != 64 && m != 128) {
    return std::string(mainloop_token(mainloop)) +
           " runs one consumer warp group per tile: tile M must be 64 or 128 (tile M is " +
           std::to_string(m) + ")";
  }
  switch (s.epilogue_schedule) {
    case EpilogueSchedule::NoSmem:
      if (!stores_d_directly(s)) {
        return std::string("the NoSmem epilogue is the direct-store variant for a D whose rows "
                           "are not 16-byte aligned (an aligned D takes a TMA epilogue)");
      }
      break;
    case EpilogueSchedule::TmaCooperative:
      if (mainloop != MainloopSchedule::Cooperative) {
        return std::string("the cooperative TMA epilogue pairs only with the cooperative mainloop");
      }
      break;
    case EpilogueSchedule::TmaWarpSpecialized:
      if (mainloop == MainloopSchedule::Cooperative) {
        return std::string("the cooperative mainloop needs the cooperative TMA epilogue");
      }
      break;
    case EpilogueSchedule::Auto:
      break;
  }
  if (stores_d_directly(s)) {
    if (resolved_epilogue_schedule(s) != EpilogueSchedule::NoSmem) {
      return std::string("a D whose rows are not 16-byte aligned is stored by the NoSmem "
                         "epilogue (no TMA store can address it)");
    }
    for (const auto& op : s.epilogue) {
      const StepOp& descriptor = step_op(op.kind);
      if (descriptor.stores_d || descriptor.operand == OperandShape::TABLES) {
        return "the direct-store epilogue computes the chain per element: a " +
               std::string(descriptor.name) + " step needs a TMA epilogue";
      }
    }
    if (s.scheduler != TileScheduler::Persistent || s.split_k > 1) {
      return std::string("the direct-store epilogue runs the persistent scheduler (its stream-K "
                         "/ split-K fix-up is not validated here)");
    }
  }
  if (s.scheduler == TileScheduler::StreamK && mainloop != MainloopSchedule::Cooperative) {
    return std::string("stream-K needs the cooperative kernel (ping-pong rejects it, the basic "
                       "warp-specialized kernel is not persistent)");
  }
  if (s.split_k < 1) return std::string("split_k must be >= 1");
  if (s.split_k > 1 && s.scheduler != TileScheduler::StreamK) {
    return std::string("split-K runs through the stream-K scheduler");
  }
  if (!s.ordered_reduction && s.scheduler != TileScheduler::StreamK) {
    return std::string("an unordered reduction needs the stream-K scheduler (nothing else reduces partials)");
  }
  if (s.swizzle != 1 && s.swizzle != 2 && s.swizzle != 4 && s.swizzle != 8) {
    return "swizzle " + std::to_string(s.swizzle) + ": must be 1, 2, 4 or 8";
  }
  if (s.stages < 0 || s.stages == 1) {
    return "stages " + std::to_string(s.stages) + ": 0 (auto) or at least 2";
  }
  return std::nullopt;
}

std::optional<std::string> epilogue_error(const GemmSpec& s) {
  if (s.epilogue.size() > FACT_GEMM_MAX_STEPS) {
    return std::to_string(s.epilogue.size()) + " epilogue steps (a kernel takes at most " +
           std::to_string(FACT_GEMM_MAX_STEPS) + ")";
  }
  for (size_t i = 0; i < s.epilogue.size(); ++i) {
    const EpilogueOpSpec& op = s.epilogue[i];
    if (op.kind == Kind::Activation && op.activation == Activation::Identity) {
      return std::string("identity activation: drop the step");
    }
    // A step that stores D itself (ops.def's STORES_D: its link owns the TMA store).
    const StepOp& descriptor = step_op(op.kind);
    const std::string name(descriptor.name);
    if (descriptor.stores_d) {
      if (i + 1 != s.epilogue.size()) return "a " + name + " step must be the epilogue's last";
      if (descriptor.constants == StepConstantsRead::ACTIVATION &&
          !activation_op(op.activation).gates) {  // ops.def's GATES column
        std::string gates;
        for (const ActivationOp& a : kActivationOps) {
          if (a.gates) gates += (gates.empty() ? "" : ", ") + std::string(a.name);
        }
        return name + " with " + std::string(activation_token(op.activation)) + ": a gate takes " + gates;
      }
      if (source_dtype(s) != DType::Unknown) {
        return name + " after an M×N operand step (its kernel reads no C)";
      }
      if (!is_16bit_float(s.d_dtype) || s.d_layout != Layout::RowMajor) {
        return name + " writes a row-major bf16/f16 D (its own TMA store)";
      }
      if (s.split_k > 1 || s.scheduler == TileScheduler::StreamK) {
        return name + " kernels run the persistent scheduler (the stream-K fix-up with a void D "
               "and the " + name + " store is not built)";
      }
    }
    // Tables are read per row position: M is sequences x positions of one batch.
    if (descriptor.operand == OperandShape::TABLES && s.batched) {
      return name + " runs unbatched GEMMs (M = sequences x positions)";
    }
    if (reads_operand(op.kind) && !is_epilogue_float(op.operand_dtype)) {
      return std::string(epilogue_kind_token(op.kind)) + " operand dtype " +
             token(op.operand_dtype) + " unsupported (bf16, f16 or f32)";
    }
  }
  return std::nullopt;
}

}  // namespace

MainloopSchedule resolved_mainloop(const GemmSpec& spec) {
  if (spec.mainloop != MainloopSchedule::Auto) return spec.mainloop;
  return spec.tile.m == 64 ? MainloopSchedule::Pingpong : MainloopSchedule::Cooperative;
}

bool stores_d_directly(const GemmSpec& spec) {
  return spec.align_d > 0 && (spec.align_d * bytes_of(spec.d_dtype)) % 16 != 0;
}

EpilogueSchedule resolved_epilogue_schedule(const GemmSpec& spec) {
  if (spec.epilogue_schedule != EpilogueSchedule::Auto) return spec.epilogue_schedule;
  if (stores_d_directly(spec)) return EpilogueSchedule::NoSmem;
  return resolved_mainloop(spec) == MainloopSchedule::Cooperative ? EpilogueSchedule::TmaCooperative
                                                                   : EpilogueSchedule::TmaWarpSpecialized;
}

SharedMemoryPlan plan_shared_memory(const GemmSpec& spec) {
  SharedMemoryPlan plan;
  plan.capacity_bytes = kSmemCapacityBytes;
  const auto& t = spec.tile;
  plan.stage_bytes = round_up(t.m * t.k * bytes_of(spec.a_dtype) + t.n * t.k * bytes_of(spec.b_dtype),
                              kSmemAlignment) +
                     kStageBarrierBytes;

  // Epilogue tile as EpilogueTileAuto picks it, then the C/D staging buffers.
  const bool cooperative = resolved_epilogue_schedule(spec) == EpilogueSchedule::TmaCooperative;
  const int epi_m = std::min(cooperative ? 128 : 64, t.m);
  const int epi_n = std::gcd(std::min(32, t.n), t.n);
  const int epi_tiles = (t.m / std::max(epi_m, 1)) * (t.n / std::max(epi_n, 1));
  const int tile_elements = epi_m * epi_n;
  const int d_bytes = bytes_of(spec.d_dtype);
  const int stages_d = std::min(epi_tiles, 2);
  int staging = 0;
  if (const DType c = source_dtype(spec); c != DType::Unknown) {
    const int c_bytes = bytes_of(c);
    const bool reuse = c_bytes == d_bytes && d_bytes > 1;
    const int stages_c = reuse ? std::max(std::min(epi_tiles, 4), stages_d + 1) : std::min(epi_tiles, 4);
    staging = reuse ? stages_c * tile_elements * std::max(c_bytes, d_bytes)
                    : stages_c * tile_elements * c_bytes + stages_d * tile_elements * d_bytes;
  } else {
    staging = stages_d * tile_elements * d_bytes;
  }
  if (!spec.epilogue.empty() && step_op(spec.epilogue.back().kind).stores_d) {
    // The collective keeps its (unused) D staging; the storing link stages subtiles of D's
    // width (half-width when it pairs two product columns into one).
    const int divisor = step_op(spec.epilogue.back().kind).halves_columns ? 2 : 1;
    staging += stages_d * tile_elements / divisor * d_bytes;
  }
  // The direct store stages nothing: it reads its operands from global memory and stores from
  // registers.
  const bool direct = resolved_epilogue_schedule(spec) == EpilogueSchedule::NoSmem;
  plan.epilogue_bytes = (direct ? 0 : staging + bias_bytes(spec)) + kEpilogueBarrierSlack;

  const int carveout = round_up(plan.epilogue_bytes, kSmemAlignment);
  const int fitting = (kSmemCapacityBytes - carveout) / plan.stage_bytes;
  plan.stages = spec.stages > 0 ? spec.stages : fitting;
  plan.total_bytes = plan.stages * plan.stage_bytes + carveout;
  return plan;
}

int accumulator_registers_per_thread(const GemmSpec& spec) {
  const int threads = resolved_mainloop(spec) == MainloopSchedule::Cooperative ? 256 : 128;
  return spec.tile.m * spec.tile.n / threads;
}

std::optional<std::string> gemm_spec_error(const GemmSpec& spec) {
  if (spec.pattern != "gemm") {
    return "pattern '" + spec.pattern + "' is not the sm90 GEMM template's ('gemm')";
  }
  if (spec.staged_transpose != StagedTranspose::None) {
    return std::string("the sm90 GEMM template reads its operands in place (a staged transpose "
                       "is gemm_f32_strict's)");
  }
  if (auto e = dtype_error(spec)) return e;
  if (auto e = alignment_error("A", spec.align_a, spec.a_dtype)) return e;
  if (auto e = alignment_error("B", spec.align_b, spec.b_dtype)) return e;
  // An unaligned D is the direct-store variant's (schedule_error checks what it runs).
  if (!stores_d_directly(spec) || spec.align_d <= 0) {
    if (auto e = alignment_error("D", spec.align_d, spec.d_dtype)) return e;
  }
  if (auto e = tile_error(spec)) return e;
  if (auto e = schedule_error(spec)) return e;
  if (auto e = epilogue_error(spec)) return e;
  const SharedMemoryPlan plan = plan_shared_memory(spec);
  if (plan.stages < 2) {
    return "only " + std::to_string(plan.stages) + " mainloop stage(s) of " +
           std::to_string(plan.stage_bytes) + " bytes fit in shared memory next to the " +
           std::to_string(plan.epilogue_bytes) + "-byte epilogue (needs 2)";
  }
  if (plan.total_bytes > plan.capacity_bytes) {
    return std::to_string(plan.stages) + " stages need " + std::to_string(plan.total_bytes) +
           " bytes of shared memory, " + std::to_string(plan.capacity_bytes) + " available";
  }
  return std::nullopt;
}

std::optional<std::string> gemm_prune_reason(const GemmSpec& spec,
                                             const SpaceOptions& options) {
  if (auto e = gemm_spec_error(spec)) return e;
  const SharedMemoryPlan plan = plan_shared_memory(spec);
  if (plan.stages < options.min_stages) {
    return "only " + std::to_string(plan.stages) + " mainloop stages of " +
           std::to_string(plan.stage_bytes) + " bytes fit next to the " +
           std::to_string(plan.epilogue_bytes) + "-byte epilogue (want >= " +
           std::to_string(options.min_stages) + ")";
  }
  if (int regs = accumulator_registers_per_thread(spec); regs > kMaxAccumulatorRegisters) {
    return std::to_string(regs) + " accumulator registers per consumer thread (limit " +
           std::to_string(kMaxAccumulatorRegisters) + "): spills";
  }
  const auto& t = spec.tile;
  if (options.m > 0 && t.m > 64 && t.m >= 2 * options.m) {
    return "tile M " + std::to_string(t.m) + " is at least twice the problem's M " +
           std::to_string(options.m);
  }
  if (options.n > 0 && t.n > 64 && t.n >= 2 * options.n) {
    return "tile N " + std::to_string(t.n) + " is at least twice the problem's N " +
           std::to_string(options.n);
  }
  if (options.m > 0 && spec.cluster.m > (options.m + t.m - 1) / t.m) {
    return "cluster M " + std::to_string(spec.cluster.m) + " exceeds the " +
           std::to_string((options.m + t.m - 1) / t.m) + " tile(s) along M";
  }
  if (options.n > 0 && spec.cluster.n > (options.n + t.n - 1) / t.n) {
    return "cluster N " + std::to_string(spec.cluster.n) + " exceeds the " +
           std::to_string((options.n + t.n - 1) / t.n) + " tile(s) along N";
  }
  if (options.m > 0 && options.n > 0 && spec.split_k > 1) {
    const int64_t tiles = ((options.m + t.m - 1) / t.m) * ((options.n + t.n - 1) / t.n) *
                          std::max<int64_t>(options.batch, 1);
    if (tiles >= options.sm_count) {
      return "split-K " + std::to_string(spec.split_k) + ": the " + std::to_string(tiles) +
             " output tiles already fill the " + std::to_string(options.sm_count) + " SMs";
    }
  }
  if (options.k > 0 && spec.split_k > 1 && options.k / spec.split_k < 2 * t.k) {
    return "split-K " + std::to_string(spec.split_k) + " leaves fewer than 2 K tiles per split (K = " +
           std::to_string(options.k) + ")";
  }
  return std::nullopt;
}

}  // namespace fact::gemm
