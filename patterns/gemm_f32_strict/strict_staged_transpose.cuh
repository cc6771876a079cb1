// A float32 GEMM with no K-major operand on the Hopper strict kernel.
//
// TF32 wgmma reads a float32 operand from shared memory K-major only, and the sm90 strict kernel
// (strict_gemm_sm90.cuh) needs one such operand. A column-major with B row-major has none: it is
// the weight gradient of a linear layer, dW = dY^T · X, with dY and X as the forward stored them.
// Sm90StagedTransposeGemm runs it in two steps on the call's stream:
//   1. one operand is copied, transposed, into the workspace, where it is K-major:
//        StagedOperand::A  A (M x K, column-major) becomes row-major, leading dimension K
//                          rounded up to 4 floats; Inner is Sm90StrictGemm<RowMajor, RowMajor>
//        StagedOperand::B  B (K x N, row-major) becomes column-major, likewise;
//                          Inner is Sm90StrictGemm<ColumnMajor, ColumnMajor>
//   2. Inner runs the GEMM on the staged call (its own K-slices and reduction, its epilogue).
// A K that is not a multiple of 4 (a weight gradient over 4095 tokens) is run at K rounded up:
// the staged copy's extra columns are zeros, and the other operand is copied into the workspace
// with as many zero rows (zeros along K add nothing to the product: the result is exact).
// The copy moves 8 bytes per element of the staged operand against the GEMM's 2·M·N·K FLOPs
// (about 4% of a 4096³ GEMM's time); the renderer stages the smaller operand first
// (f32_strict_candidates) and the tuner may pick the other.
// Workspace: the staged copy (per batch, 256-byte aligned), the other operand's padded copy
// (only when K is not a multiple of 4), then Inner's workspace.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/gemm_padding.cuh"
#include "patterns/gemm_f32_strict/strict_epilogue.cuh"
#include "patterns/gemm_f32_strict/strict_gemm_sm90.cuh"

namespace fact::strict {

enum class StagedOperand { A, B };

// dst[l][c][r] = src[l][r][c] for r < rows, c < cols: a batched transpose of a row-major
// `rows` x `cols` matrix (leading dimension src_ld) into a row-major `cols` x `rows` one
// (leading dimension dst_ld). 32 x 32 tiles through shared memory (one column of padding against
// bank conflicts), 32 x 8 threads, a grid-stride loop over the tiles of every batch; coalesced
// reads and writes.
__global__ void transpose_into_workspace(const float* __restrict__ src, int64_t src_ld,
                                         int64_t src_batch_stride, float* __restrict__ dst,
                                         int64_t dst_ld, int64_t dst_batch_stride, int64_t rows,
                                         int64_t cols, int64_t batch) {
  __shared__ float tile[32][33];
  const int64_t tiles_r = (rows + 31) / 32, tiles_c = (cols + 31) / 32;
  const int64_t tiles = tiles_r * tiles_c * batch;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t c0 = (t % tiles_c) * 32;
    const int64_t r0 = ((t / tiles_c) % tiles_r) * 32;
    const int64_t l = t / (tiles_c * tiles_r);
    const float* s = src + l * src_batch_stride;
    float* d = dst + l * dst_batch_stride;
    for (int j = threadIdx.y; j < 32; j += 8) {
      const int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[j][threadIdx.x] = s[r * src_ld + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8) {
      const int64_t c = c0 + j, r = r0 + threadIdx.x;
      if (c < cols && r < rows) d[c * dst_ld + r] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

template <StagedOperand Staged, class Inner>
struct Sm90StagedTransposeGemm {
  using Chain = typename Inner::Chain;
  static constexpr int kProducts = Inner::kProducts;
  static_assert(Staged == StagedOperand::A ? (Inner::kProblemARow && Inner::kProblemBRow)
                                           : (!Inner::kProblemARow && !Inner::kProblemBRow),
                "Inner must take the call's layouts after the staged operand's transpose");

  // The C ABI (fact_abi.h) behind the GEMM pattern's zero padding, like Inner's.
  static int run(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                 cudaStream_t stream) noexcept {
    return fact::gemm::padding::run_padded(header, workspace, workspace_size, stream, false,
                                           &run_unpadded);
  }

  // The call's layouts: A column-major, B row-major.
  static int run_unpadded(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                          cudaStream_t stream) noexcept {
    return run_outer_batches<Chain>(header, workspace, workspace_size, stream, false, true,
                                    &run_slice);
  }

  // One outer batch: the staged copy, then Inner's run of the staged call.
  static int run_slice(const FactGemmArgs* args, void* workspace, size_t* workspace_size,
                       cudaStream_t stream, int device, int sm_count) {
    const bool size_query = workspace_size != nullptr;
    constexpr bool kStageA = Staged == StagedOperand::A;
    // The staged operand is `lines` rows of K (leading dimension ld) per batch.
    const int64_t ld = (args->k + kFloatAlignment - 1) / kFloatAlignment * kFloatAlignment;
    const int64_t lines = kStageA ? args->m : args->n;
    const int64_t batch_stride = lines * ld;
    const size_t staged_bytes = Inner::round_up(size_t(args->batch) * size_t(batch_stride) * sizeof(float));
    float* staged_copy = static_cast<float*>(workspace);
    FactGemmArgs staged = *args;
    if constexpr (kStageA) {
      staged.a = staged_copy;
      staged.lda = ld;
      staged.stride_a = batch_stride;
      staged.a_layout = FACT_ROW_MAJOR;
    } else {
      staged.b = staged_copy;
      staged.ldb = ld;
      staged.stride_b = batch_stride;
      staged.b_layout = FACT_COLUMN_MAJOR;
    }
    // K not a multiple of 4: the other operand (K rows of `other_lines` contiguous elements)
    // gets ld - K zero rows in the workspace, and the call runs at K = ld.
    const bool pad_k = ld != args->k;
    fact::gemm::padding::Copy2D other;
    size_t other_bytes = 0;
    if (pad_k) {
      const int64_t other_lines = kStageA ? args->n : args->m;
      const int64_t other_ld = (other_lines + kFloatAlignment - 1) / kFloatAlignment * kFloatAlignment;
      const int64_t source_stride = kStageA ? args->stride_b : args->stride_a;
      other.src = kStageA ? args->b : args->a;
      other.bytes = sizeof(float);
      other.rows = args->k;
      other.cols = other_lines;
      other.dst_rows = ld;
      other.dst_cols = other_lines;
      other.src_ld = kStageA ? args->ldb : args->lda;
      other.src_batch_stride = source_stride;
      other.dst_ld = other_ld;
      other.batch = source_stride == 0 ? 1 : args->batch;
      other.dst_batch_stride = source_stride == 0 ? 0 : ld * other_ld;
      other_bytes = Inner::round_up(size_t(other.batch) * size_t(ld * other_ld) * sizeof(float));
      staged.k = ld;
      if constexpr (kStageA) {
        staged.ldb = other_ld;
        staged.stride_b = other.dst_batch_stride;
      } else {
        staged.lda = other_ld;
        staged.stride_a = other.dst_batch_stride;
      }
    }
    if (size_query) {
      size_t inner = 0;
      if (int status = Inner::run_slice(&staged, nullptr, &inner, stream, device, sm_count);
          status != FACT_OK)
        return status;
      *workspace_size = staged_bytes + other_bytes + inner;
      return FACT_OK;
    }
    if (!workspace) return FACT_ERR_WORKSPACE;
    if (pad_k) {
      other.dst = static_cast<char*>(workspace) + staged_bytes;
      if constexpr (kStageA) staged.b = other.dst; else staged.a = other.dst;
      if (int status = fact::gemm::padding::launch_copy(other, stream); status != FACT_OK) return status;
      // the staged copy's columns K..ld-1 must read as zeros
      if (cudaMemsetAsync(staged_copy, 0, staged_bytes, stream) != cudaSuccess) return FACT_ERR_LAUNCH;
    }
    // The source: K rows of `lines` columns (A column-major is K x M row-major; B is K x N).
    const float* source = static_cast<const float*>(kStageA ? args->a : args->b);
    const int64_t source_ld = kStageA ? args->lda : args->ldb;
    const int64_t source_batch_stride = kStageA ? args->stride_a : args->stride_b;
    const int64_t tiles = ((args->k + 31) / 32) * ((lines + 31) / 32) * args->batch;
    const unsigned blocks = unsigned(tiles < int64_t(sm_count) * 32 ? tiles : int64_t(sm_count) * 32);
    transpose_into_workspace<<<blocks, dim3(32, 8), 0, stream>>>(
        source, source_ld, source_batch_stride, staged_copy, ld, batch_stride, args->k, lines,
        args->batch);
    if (cudaGetLastError() != cudaSuccess) return FACT_ERR_LAUNCH;
    return Inner::run_slice(&staged, static_cast<char*>(workspace) + staged_bytes + other_bytes, nullptr, stream,
                            device, sm_count);
  }
};

}  // namespace fact::strict
