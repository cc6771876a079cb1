// The sm90a GEMM template: GemmSpec (pattern "gemm") -> CUTLASS 3.x source holding only type
// choices (element and layout aliases, the epilogue chain, the two CollectiveBuilder calls, the
// GemmUniversal kernel) and the C entry points; the logic is in gemm_entry.cuh. Registered with
// render.hpp under "gemm".
#pragma once
#include <string>
#include <vector>

#include "fact/realize/render.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {

// Throws realize::RenderError with gemm_spec_error's reason when the spec cannot be rendered.
realize::KernelTemplate render_gemm_template(const GemmSpec& spec);

// The epilogue chain type of a spec, innermost link last, e.g.
// "fact::gemm::epilogue::Activation<cutlass::epilogue::thread::GELU_taylor, ...>".
std::string epilogue_chain_type(const GemmSpec& spec);

// FACT headers a rendered GEMM source includes (relative to the FACT root).
const std::vector<std::string>& gemm_template_headers();

// The headers of the epilogue chain (gemm_epilogue.cuh and what it includes: the step table,
// the formulas, and the files of the steps pattern folders register, CMake's
// kGemmEpilogueStepFiles) and of the entries' zero padding (gemm_padding.h, .cuh), for every
// template that renders a chain.
const std::vector<std::string>& gemm_epilogue_headers();

}  // namespace fact::gemm
