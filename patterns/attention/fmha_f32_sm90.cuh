// FACT's float32 fused attention forward kernel: flash attention whose two products run on the
// tensor cores in TF32 while the result stays float32-accurate (the `strict` precision mode).
//
//   kProducts 3 ("3xTF32", the `strict` precision mode): every operand x is split into
//     big = tf32(x) and small = tf32(x - big) and each product is big·big + big·small + small·big
//     (small·small, below float32's last bit, is dropped), accumulated in float32: float32
//     accuracy at tensor-core speed, the same contract as the GEMMs' 3xTF32 mainloop.
//   kProducts 1 ("tf32", the `tf32` mode): one TF32 product per multiply (operands rounded to
//     nearest), float32 accumulation.
// Softmax, its running max and sum, the rescaling of O and the output are float32 throughout.
//
// The kernel uses warp-level mma.sync m16n8k8 (TF32 wgmma needs both operands K-major in shared
// memory, which V, read in place as [keys, dim], is not; mma.sync fragments are loaded by the
// threads themselves in any order). One CTA = one tile of kBlockM query rows of one (batch,
// head), kBlockM / 16 warps, each owning 16 rows; key blocks of kBlockN keys. Per block:
//   wait K(n) -> load V(n) (cp.async, in flight during S) -> S = Q K^T -> mask -> online softmax
//   -> wait V(n) -> load K(n-1) (in flight during PV) -> O += P V
// Q, K and V stay in shared memory at a row pitch that makes every fragment load conflict-free.
// Two permutations of the contraction index (free: a sum does not depend on its order) avoid
// register shuffles:
//   S = Q K^T: the mma's k index t <-> dim 2t, t+4 <-> dim 2t+1, so Q and K fragments are
//     float2 loads;
//   O = P V:   k index t <-> key 2t, t+4 <-> key 2t+1, so the S accumulator of a thread (keys 2t,
//     2t+1 of its rows) is its P fragment as it stands; V is read at those two key rows.
// Causal tiles walk their key blocks from the diagonal down, skip fully masked blocks and mask
// only the blocks that cross the diagonal, the window's lower edge (sliding window) or the key
// tail. Rows beyond the sequence are zero-filled on load and never stored; rows that see no key
// get O = 0 and LSE = -inf. Tiles are launched longest first (causal: the last query blocks).
//
// The C entry (attention_entry.cuh) is shared with the bf16/fp16 kernel: KernelOf<Config> below
// tells it which kernel a Config builds.
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

#include "patterns/attention/kernel_problem.cuh"

namespace fact::attention {

// ------------------------------------------------------------------------------------------------
// Configuration (type choices only; the logic is below). An instantiation names one.
template <int kHeadDim_, int kBlockM_, int kBlockN_, bool kCausal_, int kProducts_>
struct F32Config {
  using Element = float;                        // Q, K, V, O
  static constexpr int kHeadDim = kHeadDim_;    // of Q, K and V (multiple of 8, at most 128)
  static constexpr int kBlockM = kBlockM_;      // query rows per CTA (16 per warp)
  static constexpr int kBlockN = kBlockN_;      // keys per block
  static constexpr bool kCausal = kCausal_;     // built for causal masks (either alignment)
  static constexpr int kProducts = kProducts_;  // 3: 3xTF32 (strict); 1: TF32 (tf32)
  // What the shared entry asks of every Config (the bf16 kernel's switches, fixed here).
  static constexpr int kStages = 1;
  static constexpr bool kDynamicSchedule = false;
  static constexpr bool kPersistent = false;
  static constexpr bool kKeyMask = false;  // the float32 kernel reads no key mask
};

namespace f32detail {

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// x = big + small to about 2^-22 relative (kProducts 3); big alone, rounded (kProducts 1).
template <int kProducts>
__device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  if constexpr (kProducts == 3) small = to_tf32(x - __uint_as_float(big));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += a·b with the split operands: the small terms first, then big·big.
template <int kProducts>
__device__ __forceinline__ void mma_split(float (&d)[4], uint32_t const (&ab)[4], uint32_t const (&as)[4],
                                          uint32_t bb0, uint32_t bb1, uint32_t bs0, uint32_t bs1) {
  if constexpr (kProducts == 3) {
    mma_tf32(d, as[0], as[1], as[2], as[3], bb0, bb1);
    mma_tf32(d, ab[0], ab[1], ab[2], ab[3], bs0, bs1);
  }
  mma_tf32(d, ab[0], ab[1], ab[2], ab[3], bb0, bb1);
}

// 16 bytes global -> shared, zero-filled when !valid (nothing is read then).
__device__ __forceinline__ void cp_async16(float* dst, float const* src, bool valid) {
  uint32_t const d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace f32detail

// ------------------------------------------------------------------------------------------------
template <class Cfg>
struct F32Fmha {
  using Element = float;
  static constexpr int D = Cfg::kHeadDim;
  static constexpr int kBlockM = Cfg::kBlockM;
  static constexpr int kBlockN = Cfg::kBlockN;
  static constexpr bool kCausal = Cfg::kCausal;
  static constexpr int kProducts = Cfg::kProducts;
  static constexpr int kWarps = kBlockM / 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kNumWG = (kWarps + 3) / 4;  // for the kernel info: warpgroups of the CTA
  static constexpr bool kWindows = kCausal;        // every causal instance takes a sliding window
  // Row pitches in floats. Q and K are read as float2 at (row g, dim 2t): a pitch of 8 or 24 mod
  // 32 puts the 4 rows of each half warp on distinct bank octets (D + 8 for a multiple of 16, D
  // itself otherwise). V is read as float at (key 2t, dim g): a pitch of 4 mod 8 (D + 4) puts the
  // 4 key pairs on distinct octets.
  static constexpr int kPitchQK = D % 16 == 0 ? D + 8 : D;
  static constexpr int kPitchV = D + 4;
  static_assert(kPitchQK % 32 == 8 || kPitchQK % 32 == 24, "Q/K pitch: conflict-free float2 fragment loads");
  static_assert(kPitchV % 8 == 4, "V pitch: conflict-free fragment loads");
  static constexpr int kSmemBytes = int(sizeof(float)) * ((kBlockM + kBlockN) * kPitchQK + kBlockN * kPitchV);
  // Two CTAs per SM where their shared memory fits (latency of one hidden by the other's math).
  static constexpr int kCtasPerSm = 2 * (kSmemBytes + 1024) <= 228 * 1024 ? 2 : 1;

  static_assert(Cfg::kProducts == 1 || Cfg::kProducts == 3, "1 (TF32) or 3 (3xTF32) products");
  static_assert(D % 8 == 0 && D >= 16 && D <= 128, "head dim: multiple of 8, at most 128");
  static_assert(kBlockM % 16 == 0 && kWarps >= 1 && kWarps <= 8, "tile M: 16 rows per warp, up to 8 warps");
  static_assert(kBlockN % 8 == 0 && kBlockN <= 128, "tile N: multiple of 8, at most 128");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");

  // Host: filled by the entry's can_implement.
  using Problem = KernelProblem<float>;

  struct Params {
    Problem p;
    int group, num_m_blocks, num_n_blocks, total_tiles, hb_total;
    float scale_log2;
  };

  static int num_m_blocks(int seq_q) { return (seq_q + kBlockM - 1) / kBlockM; }

  static Params make_params(Problem const& p) {
    Params params{};
    params.p = p;
    params.group = p.heads / p.kv_heads;
    params.num_m_blocks = num_m_blocks(p.seq_q);
    params.num_n_blocks = (p.seq_k + kBlockN - 1) / kBlockN;
    params.hb_total = p.heads * p.batch;
    params.total_tiles = params.num_m_blocks * params.hb_total;
    params.scale_log2 = float(double(p.scale) * 1.4426950408889634);
    if (!kCausal) params.p.window = 0;
    return params;
  }

  // Key blocks [n_min, n_max) tile m sees; blocks below n_window cross the window's lower edge.
  __device__ static int n_block_max(Params const& P, int m) {
    if constexpr (!kCausal) {
      return P.num_n_blocks;
    } else {
      int const last_row = min((m + 1) * kBlockM, P.p.seq_q) - 1;
      return min(P.num_n_blocks, f32detail::floor_div(last_row + P.p.diag_offset, kBlockN) + 1);
    }
  }
  __device__ static int n_block_min(Params const& P, int m) {
    if (!kCausal || P.p.window <= 0) return 0;
    return max(0, f32detail::floor_div(m * kBlockM + P.p.diag_offset - P.p.window + 1, kBlockN));
  }
  __device__ static int n_block_window(Params const& P, int m) {
    if (!kCausal || P.p.window <= 0) return 0;
    int const last_row = min((m + 1) * kBlockM, P.p.seq_q) - 1;
    return max(0, f32detail::floor_div(last_row + P.p.diag_offset - P.p.window + kBlockN, kBlockN));
  }

  // rows [row0, row0 + kRows) of a [seq, D] view (row stride `stride`) -> smem at `pitch`,
  // rows outside [0, rows) zero-filled.
  template <int kRows, int kPitch>
  __device__ static void load_rows(float* smem, float const* base, int64_t stride, int row0, int rows) {
    constexpr int kChunks = D / 4;
    for (int idx = int(threadIdx.x); idx < kRows * kChunks; idx += kThreads) {
      int const r = idx / kChunks;
      int const c = idx - r * kChunks;
      int const row = row0 + r;
      bool const valid = row >= 0 && row < rows;
      float const* src = base + (valid ? int64_t(row) * stride : 0) + c * 4;
      f32detail::cp_async16(smem + r * kPitch + c * 4, src, valid);
    }
  }

  __device__ static void run(Params const& P, float* smem) {
    using namespace f32detail;
    float* sQ = smem;
    float* sK = sQ + kBlockM * kPitchQK;
    float* sV = sK + kBlockN * kPitchQK;
    Problem const& p = P.p;

    // Longest first: all (batch, head) pairs' last query block, then the ones before.
    int const tile = int(blockIdx.x);
    int const m_rev = tile / P.hb_total;
    int const hb = tile - m_rev * P.hb_total;
    int const m = kCausal ? P.num_m_blocks - 1 - m_rev : m_rev;
    int const b = hb / p.heads;
    int const h = hb - b * p.heads;
    int const kvh = h / P.group;
    float const* q_base = p.q + b * p.q_stride[0] + h * p.q_stride[2];
    float const* k_base = p.k + b * p.k_stride[0] + kvh * p.k_stride[2];
    float const* v_base = p.v + b * p.v_stride[0] + kvh * p.v_stride[2];
    int const row0 = m * kBlockM;
    int const n_min = n_block_min(P, m);
    int const n_max = n_block_max(P, m);
    int const n_window = n_block_window(P, m);

    load_rows<kBlockM, kPitchQK>(sQ, q_base, p.q_stride[1], row0, p.seq_q);
    if (n_max > n_min) load_rows<kBlockN, kPitchQK>(sK, k_base, p.k_stride[1], (n_max - 1) * kBlockN, p.seq_k);
    cp_async_commit();

    int const warp = int(threadIdx.x) / 32;
    int const lane = int(threadIdx.x) % 32;
    int const g = lane / 4;  // fragment row (and column group) of this thread
    int const t = lane % 4;
    int const wrow = warp * 16;  // this warp's first row in the tile
    // This thread's two rows: row0 + wrow + g and + 8.
    int const my_row[2] = {row0 + wrow + g, row0 + wrow + g + 8};

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};  // this thread's share; the quad's sum at the end

    for (int n = n_max - 1; n >= n_min; --n) {
      cp_async_wait_all();
      __syncthreads();  // K(n) (and Q) landed; every warp is done with V(n+1)
      load_rows<kBlockN, kPitchV>(sV, v_base, p.v_stride[1], n * kBlockN, p.seq_k);
      cp_async_commit();

      // S = Q K^T (16 x kBlockN per warp).
      float s[kBlockN / 8][4];
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 8; ++kk) {
        float2 const q_lo = *reinterpret_cast<float2 const*>(sQ + (wrow + g) * kPitchQK + kk * 8 + 2 * t);
        float2 const q_hi = *reinterpret_cast<float2 const*>(sQ + (wrow + g + 8) * kPitchQK + kk * 8 + 2 * t);
        uint32_t ab[4], as[4];
        split<kProducts>(q_lo.x, ab[0], as[0]);  // (row g,   k t)   <- dim 2t
        split<kProducts>(q_hi.x, ab[1], as[1]);  // (row g+8, k t)
        split<kProducts>(q_lo.y, ab[2], as[2]);  // (row g,   k t+4) <- dim 2t+1
        split<kProducts>(q_hi.y, ab[3], as[3]);  // (row g+8, k t+4)
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
          float2 const kv = *reinterpret_cast<float2 const*>(sK + (j * 8 + g) * kPitchQK + kk * 8 + 2 * t);
          uint32_t bb0, bs0, bb1, bs1;
          split<kProducts>(kv.x, bb0, bs0);  // (k t,   key g) <- dim 2t
          split<kProducts>(kv.y, bb1, bs1);  // (k t+4, key g) <- dim 2t+1
          mma_split<kProducts>(s[j], ab, as, bb0, bb1, bs0, bs1);
        }
      }

      // Mask: the key tail, the blocks crossing the diagonal, the window's lower edge.
      bool const tail = (n + 1) * kBlockN > p.seq_k;
      bool const diagonal = kCausal && (n + 1) * kBlockN - 1 > row0 + p.diag_offset;
      bool const lower_edge = kCausal && n < n_window;
      if (tail || diagonal || lower_edge) {
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int const row = my_row[e / 2];
            int const col = n * kBlockN + j * 8 + 2 * t + (e & 1);
            bool visible = col < p.seq_k;
            if constexpr (kCausal) {
              visible = visible && col <= row + p.diag_offset;
              if (p.window > 0) visible = visible && col > row + p.diag_offset - p.window;
            }
            if (!visible) s[j][e] = -INFINITY;
          }
        }
      }

      // Online softmax, float32. Rows g (elements 0, 1) and g + 8 (elements 2, 3).
      float alpha[2];  // the factor O's rows are rescaled by (exp of the old max - the new one)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = row_max[half];
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * half], s[j][2 * half + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // A row that has seen no key yet keeps max -inf: exponents against 0 give p = 0.
        float const base = mx == -INFINITY ? 0.f : mx * P.scale_log2;
        alpha[half] = row_max[half] == -INFINITY ? 0.f : exp2f(row_max[half] * P.scale_log2 - base);
        row_max[half] = mx;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
          for (int e = 2 * half; e < 2 * half + 2; ++e) {
            float const pe = exp2f(fmaf(s[j][e], P.scale_log2, -base));
            s[j][e] = pe;
            sum += pe;
          }
        }
        row_sum[half] = row_sum[half] * alpha[half] + sum;
      }

      cp_async_wait_all();
      __syncthreads();  // V(n) landed; every warp is done with K(n)
      if (n - 1 >= n_min) {
        load_rows<kBlockN, kPitchQK>(sK, k_base, p.k_stride[1], (n - 1) * kBlockN, p.seq_k);
        cp_async_commit();
      }

      // O = alpha O + P V. P's fragment is the thread's S accumulator (k t <-> key 2t, k t+4 <->
      // key 2t+1). Two-level accumulation: the tensor cores' float32 accumulation truncates
      // (patterns/gemm_f32_strict/strict_gemm_sm90.cuh measured it), so the block's P V is
      // accumulated from zero in `pv` and added to O with a rounded FFMA; a chain over every key
      // block would grow the error with the sequence length.
      float pv[D / 8][4];
#pragma unroll
      for (int i = 0; i < D / 8; ++i) pv[i][0] = pv[i][1] = pv[i][2] = pv[i][3] = 0.f;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        uint32_t ab[4], as[4];
        split<kProducts>(s[j][0], ab[0], as[0]);  // (row g,   k t)   <- key 2t
        split<kProducts>(s[j][2], ab[1], as[1]);  // (row g+8, k t)
        split<kProducts>(s[j][1], ab[2], as[2]);  // (row g,   k t+4) <- key 2t+1
        split<kProducts>(s[j][3], ab[3], as[3]);  // (row g+8, k t+4)
        float const* v_lo = sV + (j * 8 + 2 * t) * kPitchV + g;
        float const* v_hi = v_lo + kPitchV;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          uint32_t bb0, bs0, bb1, bs1;
          split<kProducts>(v_lo[i * 8], bb0, bs0);  // (k t,   dim g) <- key 2t
          split<kProducts>(v_hi[i * 8], bb1, bs1);  // (k t+4, dim g) <- key 2t+1
          mma_split<kProducts>(pv[i], ab, as, bb0, bb1, bs0, bs1);
        }
      }
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][e] = fmaf(o[i][e], alpha[e / 2], pv[i][e]);
      }
    }
    cp_async_wait_all();  // nothing may be in flight at exit (a tile that saw no key loaded Q)

    // Epilogue: O / rowsum straight to global memory (float2 per thread and row), LSE.
    float* o_base = p.o + b * p.o_stride[0] + h * p.o_stride[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = row_sum[half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      int const row = my_row[half];
      if (row >= p.seq_q) continue;
      float const inv = sum > 0.f ? 1.f / sum : 0.f;
      float* out = o_base + int64_t(row) * p.o_stride[1] + 2 * t;
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        *reinterpret_cast<float2*>(out + i * 8) = make_float2(o[i][2 * half] * inv, o[i][2 * half + 1] * inv);
      }
      if (p.lse != nullptr && t == 0) {
        p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + row] =
            sum > 0.f ? row_max[half] * p.scale + logf(sum) : -INFINITY;
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, Kernel::kCtasPerSm)
    fmha_f32_kernel(__grid_constant__ typename Kernel::Params const params) {
  extern __shared__ __align__(16) float smem_f32[];
  Kernel::run(params, smem_f32);
}

template <class Cfg>
struct KernelOf;

template <int kHeadDim, int kBlockM, int kBlockN, bool kCausal, int kProducts>
struct KernelOf<F32Config<kHeadDim, kBlockM, kBlockN, kCausal, kProducts>> {
  using type = F32Fmha<F32Config<kHeadDim, kBlockM, kBlockN, kCausal, kProducts>>;
  static constexpr auto function() { return &fmha_f32_kernel<type>; }
  static constexpr const char* precision() { return kProducts == 3 ? "3xtf32" : "tf32"; }
};

}  // namespace fact::attention
