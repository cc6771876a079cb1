// Realization of the strict-float32 GEMM pattern: KernelSpecs with MathMode::Tf32x3 (float32
// A, B, D; D row-major; float32-accurate split-operand 3xTF32 tensor-core products).
//
// Two kernel families, chosen by GemmSpec::mainloop:
//   MainloopSchedule::Multistage   portable CUTLASS 2.x GemmUniversal with
//                                  arch::OpMultiplyAddFastF32 (strict_gemm_sm80.cuh); any
//                                  layouts, batched, serial split-K.
//   MainloopSchedule::Cooperative  the Hopper kernel (strict_gemm_sm90.cuh): TMA + wgmma,
//                                  operands split to TF32 hi/lo inside the kernel; a call
//                                  with no K-major operand copies one transposed first
//                                  (strict_staged_transpose.cuh, GemmSpec::staged_transpose).
// realizer.cpp registers the pattern's realizer, which renders with render_f32_strict_template(),
// so render_kernel() keys and names these kernels like any other.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "patterns/gemm/realize/spec.hpp"
#include "fact/realize/render.hpp"

namespace fact::strict {

using namespace fact::gemm;  // NOLINT: the GEMM spec and its tables
using realize::KernelTemplate;
using realize::RenderError;
using realize::kEntryPlaceholder;
using realize::kKeyPlaceholder;


// Why `spec` cannot be realized by a strict kernel (wrong dtypes or math mode, unsupported
// layout, epilogue, tile or stage count, shared memory over the sm_90 limit), or nullopt when
// it can.
std::optional<std::string> f32_strict_unsupported_reason(const GemmSpec& spec);

// The template of one kernel library (render.hpp's KernelTemplate): type aliases, the
// `extern "C"` entry point (kEntryPlaceholder) and fact_kernel_info() (name, key, spec JSON),
// and, under -DFACT_STANDALONE_MAIN, a main() that checks the kernel against a float64
// reference and times it against cuBLAS. Compile with -I<repo root> -I<repo root>/include and
// the CUTLASS include folders. Throws RenderError naming f32_strict_unsupported_reason().
KernelTemplate render_f32_strict_template(const GemmSpec& spec);

// The template's source with the entry symbol spelled "fact_" + spec.name(): a readable,
// self-contained source for examples and debugging (render_kernel() is the keyed path).
std::string render_f32_strict_source(const GemmSpec& spec);

// The tuning candidates for a problem class: `problem` supplies dtypes, layouts, batched and
// the epilogue; each candidate varies the kernel family, tile, stages and scheduler, and for
// A column-major with B row-major the operand the sm90 kernel stages transposed (the smaller
// of A and B first when the problem's M and N are given; 0: unknown). Every candidate passes
// f32_strict_unsupported_reason(). Empty when the class is not strict.
std::vector<GemmSpec> f32_strict_candidates(const GemmSpec& problem, int64_t m = 0, int64_t n = 0);

}  // namespace fact::strict
