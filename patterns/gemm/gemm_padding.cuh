// The entries' side of zero padding (gemm_padding.h): run_padded() wraps a GEMM entry so that a
// call whose rows are not 16-byte aligned runs padded — the staging copies on the call's stream
// into the workspace, the kernel on the padded call, D copied back — and an aligned call runs
// the entry unchanged. Every GEMM entry FACT renders goes through it (gemm_entry.cuh's run,
// patterns/gemm_f32_strict's sm90 and sm80 entries).
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/gemm_padding.h"

namespace fact::gemm::padding {

// One block per destination row (grid-stride over the rows of every batch), its threads over
// the row's columns: coalesced reads and writes, one index split per row. Element (o, l, r, col)
// is copied_element(c, o, l, r, col) (gemm_padding.h); element type by size.
template <class T>
__global__ void copy_padded_kernel(Copy2D c) {
  const int64_t lines = c.outer * c.batch * c.dst_rows;
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const int64_t r = line % c.dst_rows;
    const int64_t rest = line / c.dst_rows;
    const int64_t l = rest % c.batch;
    const int64_t o = rest / c.batch;
    T* dst = static_cast<T*>(c.dst) + o * c.dst_outer_stride + l * c.dst_batch_stride + r * c.dst_ld;
    const T* src = r < c.rows ? static_cast<const T*>(c.src) + o * c.src_outer_stride +
                                    l * c.src_batch_stride + r * c.src_ld
                              : nullptr;
    const int64_t cols = src ? c.cols : 0;
    for (int64_t col = threadIdx.x; col < c.dst_cols; col += blockDim.x) {
      dst[col] = col < cols ? src[col] : T(0);
    }
  }
}

// Launches one copy on `stream`; FACT_OK or FACT_ERR_LAUNCH.
inline int launch_copy(const Copy2D& c, cudaStream_t stream) {
  if (copy_elements(c) <= 0) return FACT_OK;
  const int64_t lines = c.outer * c.batch * c.dst_rows;
  const int threads = c.dst_cols >= 256 ? 256 : c.dst_cols >= 128 ? 128 : 64;
  const unsigned blocks = static_cast<unsigned>(lines < 65535 * 16 ? lines : 65535 * 16);
  switch (c.bytes) {
    case 2: copy_padded_kernel<uint16_t><<<blocks, threads, 0, stream>>>(c); break;
    case 4: copy_padded_kernel<uint32_t><<<blocks, threads, 0, stream>>>(c); break;
    case 8: copy_padded_kernel<uint64_t><<<blocks, threads, 0, stream>>>(c); break;
    default: return FACT_ERR_INVALID_ARGS;
  }
  if (cudaGetLastError() != cudaSuccess) return FACT_ERR_LAUNCH;
  return FACT_OK;
}

// The FACT C ABI (fact_abi.h) of `entry` with padding: `entry(header, workspace, workspace_size,
// stream)` is the kernel's own entry, `d_direct` whether it writes D element by element (the
// direct-store variant). A size query returns the staging bytes plus the kernel's workspace
// for the padded call; a call stages, runs the kernel on the padded call with the rest of the
// workspace, and copies D back (a call that needs staging and has no workspace:
// FACT_ERR_WORKSPACE, before anything touches the device). A header that is not a GEMM call's,
// or a malformed call (padding::malformed), goes to `entry` as it is (which refuses it); the
// kernel checks everything else (dtypes, layouts, steps) on the padded call. Never throws.
template <class Entry>
int run_padded(const FactCallHeader* header, void* workspace, size_t* workspace_size,
               cudaStream_t stream, bool d_direct, Entry entry) noexcept {
  const FactGemmArgs* gemm_call = fact_gemm_args_of(header);
  if (gemm_call == nullptr) return entry(header, workspace, workspace_size, stream);
  const FactGemmArgs& call = *gemm_call;
  if (malformed(call) || fact_gemm_dtype_bytes(call.a_type) == 0 || fact_gemm_dtype_bytes(call.b_type) == 0 ||
      fact_gemm_dtype_bytes(call.d_type) == 0) {
    return entry(header, workspace, workspace_size, stream);
  }
  const bool size_query = workspace_size != nullptr;
  Plan plan = padding::plan(call, d_direct, size_query ? nullptr : static_cast<char*>(workspace));
  if (plan.status != FACT_OK) return plan.status;
  if (plan.identity()) return entry(header, workspace, workspace_size, stream);
  if (size_query) {
    size_t inner = 0;
    if (int status = entry(&plan.args.header, nullptr, &inner, stream); status != FACT_OK) return status;
    *workspace_size = plan.staging_bytes + inner;
    return FACT_OK;
  }
  // A call padded only in its extents (every operand given padded) stages nothing and may have
  // no workspace at all.
  if (workspace == nullptr && plan.staging_bytes > 0) return FACT_ERR_WORKSPACE;
  for (int i = 0; i < plan.num_copies_in; ++i) {
    if (plan.copies_in[i].src == nullptr) return FACT_ERR_INVALID_ARGS;
    if (int status = launch_copy(plan.copies_in[i], stream); status != FACT_OK) return status;
  }
  void* rest = workspace == nullptr ? nullptr : static_cast<char*>(workspace) + plan.staging_bytes;
  if (int status = entry(&plan.args.header, rest, nullptr, stream); status != FACT_OK) return status;
  if (plan.copy_out) {
    if (plan.out.dst == nullptr) return FACT_ERR_INVALID_ARGS;
    if (int status = launch_copy(plan.out, stream); status != FACT_OK) return status;
  }
  return FACT_OK;
}

}  // namespace fact::gemm::padding
