// What the GEMM pattern's realizer (realizer.cpp) shares with patterns/gemm_f32_strict, which
// realizes the same kind with its own kernels.
#pragma once
#include <string>
#include <vector>

#include "fact/realize/param_space.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {

// "bias+gelu_tanh" / "none": the epilogue part of a tuning key.
std::string epilogue_class_token(const std::vector<EpilogueOpSpec>& epilogue);
// "bf16.bf16.bf16.f32|tnt|bias": dtypes of A, B, D, accumulator | layouts of A, B, D | epilogue,
// and "|dstore" for the direct-store variant (an unaligned D: stores_d_directly).
std::string gemm_class_token(const GemmSpec& spec);
// "coop/persistent/whole": mainloop schedule / tile scheduler / split-K or not.
std::string gemm_family(const GemmSpec& spec);
// The engine's space options with the problem's sizes.
SpaceOptions gemm_space_options(const realize::SpaceOptions& options, const GemmProblem& problem);

}  // namespace fact::gemm
