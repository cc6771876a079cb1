// The TMA store stages of a GEMM's collective epilogue, for the links that store D themselves
// (a step whose STORES_D column is 1 in the epilogue table): their shared-memory buffers follow
// the collective's store pipeline, so they size them by the collective's StagesD. The rendered
// kernel checks the two agree (render.cpp's static_assert).
#pragma once
#include "cute/tensor.hpp"

namespace fact::gemm::epilogue::detail {

// The collective's StagesD for a CTA tile and epilogue subtile (sm90_get_tma_dispatch_policy).
template <class CtaTile, class EpilogueTile>
constexpr int store_stages() {
  using namespace cute;
  constexpr int tiles = size(shape_div(take<0, 2>(CtaTile{}), EpilogueTile{}));
  return tiles < 2 ? tiles : 2;
}

}  // namespace fact::gemm::epilogue::detail
