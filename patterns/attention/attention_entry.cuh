// The logic behind every FACT attention kernel library: an instantiation file
// names one Config (fmha_sm90.cuh's Config for bf16/fp16, fmha_f32_sm90.cuh's F32Config for
// float32 with 3xTF32 or TF32 products; KernelOf<Config> names the kernel) and expands
// FACT_ATTENTION_INSTANCE, which exports
//
//   extern "C" int fact_<key>(const FactCallHeader*, void* workspace, size_t* workspace_size,
//                             void* stream);          // kernel C ABI v2 (docs/abi.md)
//   extern "C" const char* fact_kernel_info(void);   // {"kind":"attention", ..., "spec":{...}}
//
// Entry<Cfg>::run implements the calling convention: header check (version, kind, size), then
// the attention arguments (sizes, mask kind, null pointers), then a size query or can_implement
// (head dims, dtype-dependent TMA alignment, the mask kind the kernel was built for), then the
// launch. It returns a FactStatus and never throws.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

#include "fact/runtime/prepared_launches.h"
#include "patterns/attention/attention_abi.h"
#include "patterns/attention/fmha_f32_sm90.cuh"
#include "patterns/attention/fmha_sm90.cuh"

#ifndef FACT_EXPORT
#define FACT_EXPORT __attribute__((visibility("default")))
#endif

namespace fact::attention {

inline constexpr uint32_t kKindId = fact_kind_id(FACT_ATTENTION_KIND_NAME);

template <class Cfg>
struct Entry {
  using Kernel = typename KernelOf<Cfg>::type;
  using Element = typename Cfg::Element;
  static_assert(!Cfg::kDynamicSchedule || Cfg::kPersistent, "a dynamic schedule needs a persistent grid");
  static constexpr int64_t kTmaStrideLimit = int64_t(1) << 40;  // bytes

  static constexpr const char* dtype_name() {
    return std::is_same_v<Element, float> ? "f32" : std::is_same_v<Element, cutlass::bfloat16_t> ? "bf16" : "fp16";
  }
  // The FactDType of Q, K, V and O this kernel was built for.
  static constexpr int32_t abi_dtype() {
    return std::is_same_v<Element, float>                  ? FACT_DTYPE_F32
           : std::is_same_v<Element, cutlass::bfloat16_t> ? FACT_DTYPE_BF16
                                                           : FACT_DTYPE_F16;
  }

  static size_t workspace_bytes() { return Cfg::kDynamicSchedule ? 16 : 0; }

  // The call's FactAttentionArgs when its header says it is one (version, kind, size), else
  // nullptr.
  static FactAttentionArgs const* args_of(FactCallHeader const* header) {
    if (header == nullptr || header->abi_version != FACT_ABI_VERSION || header->kind != kKindId ||
        header->size != sizeof(FactAttentionArgs)) {
      return nullptr;
    }
    return reinterpret_cast<FactAttentionArgs const*>(header);
  }

  // Header and argument sanity: FACT_ERR_INVALID_ARGS when malformed (including a `dtype` other
  // than the kernel's element type).
  static int check_args(FactCallHeader const* header, bool size_query) {
    FactAttentionArgs const* call = args_of(header);
    if (call == nullptr) return FACT_ERR_INVALID_ARGS;
    auto const& a = *call;
    if (a.batch <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.seq_q <= 0 || a.seq_k <= 0 ||
        a.head_dim <= 0 || a.v_head_dim <= 0) {
      return FACT_ERR_INVALID_ARGS;
    }
    if (a.heads % a.kv_heads != 0) return FACT_ERR_INVALID_ARGS;
    if (a.causal != FACT_ATTN_MASK_NONE && a.causal != FACT_ATTN_MASK_CAUSAL_TOP_LEFT &&
        a.causal != FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT) {
      return FACT_ERR_INVALID_ARGS;
    }
    if (!std::isfinite(a.scale) || a.sm_count < 0 || a.window < 0) return FACT_ERR_INVALID_ARGS;
    if (a.window > 0 && a.causal == FACT_ATTN_MASK_NONE) return FACT_ERR_INVALID_ARGS;  // a window is causal
    if (a.dtype != abi_dtype()) return FACT_ERR_INVALID_ARGS;  // another element type than built for
    if (a.key_mask != nullptr && (a.causal != FACT_ATTN_MASK_NONE || a.key_mask_batch_stride < 0 ||
                                  a.key_mask_seq_stride < 0 || (a.key_mask_keep != 0 && a.key_mask_keep != 1))) {
      return FACT_ERR_INVALID_ARGS;
    }
    if (!size_query && (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.o == nullptr)) {
      return FACT_ERR_INVALID_ARGS;
    }
    return FACT_OK;
  }

  // A stride TMA accepts: non-negative, a multiple of 16 bytes, under 2^40 bytes. A mode of extent
  // 1 is never stepped, so any stride does; it is replaced by a harmless one.
  static bool tma_stride(int64_t& stride, int64_t extent, int64_t fallback) {
    if (extent == 1) stride = fallback;
    int64_t const bytes = stride * int64_t(sizeof(Element));
    return stride > 0 && bytes % 16 == 0 && bytes < kTmaStrideLimit;
  }
  static bool aligned16(void const* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

  // Fills `p` from `a`; FACT_ERR_CANNOT_IMPLEMENT when this kernel cannot run these arguments.
  static int can_implement(FactAttentionArgs const& a, typename Kernel::Problem& p) {
    if (a.head_dim != Cfg::kHeadDim || a.v_head_dim != Cfg::kHeadDim) return FACT_ERR_CANNOT_IMPLEMENT;
    if (Cfg::kCausal != (a.causal != FACT_ATTN_MASK_NONE)) return FACT_ERR_CANNOT_IMPLEMENT;
    if (Cfg::kKeyMask != (a.key_mask != nullptr)) return FACT_ERR_CANNOT_IMPLEMENT;
    if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || !aligned16(a.o)) {
      return FACT_ERR_CANNOT_IMPLEMENT;
    }
    if (a.lse != nullptr && (reinterpret_cast<uintptr_t>(a.lse) & 3u) != 0) return FACT_ERR_CANNOT_IMPLEMENT;
    int64_t const fallback = 16 / int64_t(sizeof(Element));
    struct View {
      int64_t const* in;
      int64_t* out;
      int64_t heads, seq;
    };
    int64_t q_in[3] = {a.q_batch_stride, a.q_seq_stride, a.q_head_stride};
    int64_t k_in[3] = {a.k_batch_stride, a.k_seq_stride, a.k_head_stride};
    int64_t v_in[3] = {a.v_batch_stride, a.v_seq_stride, a.v_head_stride};
    int64_t o_in[3] = {a.o_batch_stride, a.o_seq_stride, a.o_head_stride};
    View views[4] = {{q_in, p.q_stride, a.heads, a.seq_q},
                     {k_in, p.k_stride, a.kv_heads, a.seq_k},
                     {v_in, p.v_stride, a.kv_heads, a.seq_k},
                     {o_in, p.o_stride, a.heads, a.seq_q}};
    for (View const& view : views) {
      for (int i = 0; i < 3; ++i) view.out[i] = view.in[i];
      if (!tma_stride(view.out[0], a.batch, fallback) || !tma_stride(view.out[1], view.seq, fallback) ||
          !tma_stride(view.out[2], view.heads, fallback)) {
        return FACT_ERR_CANNOT_IMPLEMENT;
      }
    }
    if (a.lse != nullptr && (a.lse_batch_stride < 0 || a.lse_head_stride < 0)) return FACT_ERR_CANNOT_IMPLEMENT;
    p.batch = a.batch;
    p.heads = a.heads;
    p.kv_heads = a.kv_heads;
    p.seq_q = a.seq_q;
    p.seq_k = a.seq_k;
    p.q = static_cast<Element const*>(a.q);
    p.k = static_cast<Element const*>(a.k);
    p.v = static_cast<Element const*>(a.v);
    p.o = static_cast<Element*>(a.o);
    p.diag_offset = a.causal == FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? a.seq_k - a.seq_q : 0;
    p.window = a.window;
    p.scale = a.scale;
    p.lse = a.lse;
    p.lse_batch_stride = a.lse_batch_stride;
    p.lse_head_stride = a.lse_head_stride;
    p.key_mask = static_cast<uint8_t const*>(a.key_mask);
    p.key_mask_stride[0] = a.key_mask_batch_stride;
    p.key_mask_stride[1] = a.key_mask_seq_stride;
    p.key_mask_keep = a.key_mask_keep != 0;
    return FACT_OK;
  }

  struct DeviceInfo {
    int sm_count = 0;
    int64_t l2_bytes = 0;
    bool smem_set = false;
  };
  static DeviceInfo* device_info(int device) {
    static DeviceInfo cache[64];
    if (device < 0 || device >= 64) return nullptr;
    DeviceInfo& d = cache[device];
    if (d.sm_count == 0) {
      int sms = 0, l2 = 0;
      if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
          cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
        return nullptr;
      }
      d.l2_bytes = l2;
      d.sm_count = sms;
    }
    return &d;
  }

  // What a launch is made from (fact/runtime/prepared_launches.h keeps the last few per thread).
  struct Prepared {
    typename Kernel::Params params;
    int grid;
  };

  // The prepared kernel on the stream (a dynamic schedule's tile counter zeroed first).
  static int launch(Prepared const& prepared, void* workspace, cudaStream_t s) {
    if constexpr (Cfg::kDynamicSchedule) {
      if (cudaMemsetAsync(workspace, 0, sizeof(int), s) != cudaSuccess) return FACT_ERR_LAUNCH;
    }
    KernelOf<Cfg>::function()<<<prepared.grid, Kernel::kThreads, Kernel::kSmemBytes, s>>>(prepared.params);
    if (cudaGetLastError() != cudaSuccess) return FACT_ERR_LAUNCH;
    return FACT_OK;
  }

  // A call equal to one this thread prepared before launches that preparation: its checks,
  // can_implement and TMA descriptors are the same.
  static int run(FactCallHeader const* header, void* workspace, size_t* workspace_size, void* stream) noexcept {
    static thread_local fact::runtime::PreparedLaunches<FactAttentionArgs, Prepared> prepared_launches;
    try {
      bool const size_query = workspace_size != nullptr;
      auto s = static_cast<cudaStream_t>(stream);
      int device = 0;
      FactAttentionArgs const* call = size_query ? nullptr : args_of(header);
      if (call != nullptr) {
        if (cudaGetDevice(&device) == cudaSuccess) {
          if (Prepared const* kept = prepared_launches.find(*call, device, workspace)) {
            return launch(*kept, workspace, s);
          }
        } else {
          (void)cudaGetLastError();  // reported below, after the argument checks
        }
      }
      if (int status = check_args(header, size_query); status != FACT_OK) return status;
      auto const& a = *reinterpret_cast<FactAttentionArgs const*>(header);
      if (size_query) {
        *workspace_size = workspace_bytes();
        return FACT_OK;
      }
      typename Kernel::Problem p{};
      if (int status = can_implement(a, p); status != FACT_OK) return status;
      if (workspace_bytes() > 0 && (workspace == nullptr || !aligned16(workspace))) return FACT_ERR_WORKSPACE;
      p.tile_counter = static_cast<int*>(workspace);

      if (cudaGetDevice(&device) != cudaSuccess) return FACT_ERR_INITIALIZE;
      DeviceInfo* info = device_info(device);
      if (info == nullptr) return FACT_ERR_INITIALIZE;
      p.l2_bytes = info->l2_bytes;
      auto kernel = KernelOf<Cfg>::function();
      if (!info->smem_set) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSmemBytes) !=
            cudaSuccess) {
          (void)cudaGetLastError();
          return FACT_ERR_INITIALIZE;
        }
        info->smem_set = true;
      }
      Prepared prepared{Kernel::make_params(p), 0};
      int const sms = a.sm_count > 0 ? a.sm_count : info->sm_count;
      int const tiles = prepared.params.total_tiles;
      int const slots = sms * Kernel::kCtasPerSm;  // persistent: every CTA that fits at once
      prepared.grid = Cfg::kPersistent ? (tiles < slots ? tiles : slots) : tiles;
      int const status = launch(prepared, workspace, s);
      if (status == FACT_OK) prepared_launches.keep(a, device, workspace, prepared);
      return status;
    } catch (...) {
      return FACT_ERR_INTERNAL;
    }
  }

  // The KernelSpec as JSON; `key` is the entry's suffix, `name` the readable name.
  static const char* info(const char* key, const char* name) noexcept {
    static char buffer[1024];
    static bool done = false;
    if (!done) {
      std::snprintf(buffer, sizeof(buffer),
                    "{\"kind\":\"attention\",\"abi_version\":%d,\"entry\":\"fact_%s\",\"key\":\"%s\","
                    "\"name\":\"%s\",\"spec\":{\"arch\":\"sm_90a\",\"dtype\":\"%s\",\"head_dim\":%d,"
                    "\"v_head_dim\":%d,\"causal\":%s,\"block_m\":%d,\"block_n\":%d,\"stages\":%d,"
                    "\"consumer_warpgroups\":%d,\"schedule\":\"%s\",\"tile_order\":\"%s\","
                    "\"persistent\":%s,\"smem_bytes\":%d,\"args_size\":%d,\"workspace_bytes\":%d,"
                    "\"products\":\"%s\",\"windows\":%s,\"tile_head_dim\":%d,\"key_mask\":%s}}",
                    FACT_ABI_VERSION, key, key, name, dtype_name(), Cfg::kHeadDim, Cfg::kHeadDim,
                    Cfg::kCausal ? "true" : "false", Cfg::kBlockM, Cfg::kBlockN, Cfg::kStages,
                    Kernel::kNumWG, "cooperative",
                    Cfg::kDynamicSchedule ? "dynamic_lpt" : "static_lpt",
                    Cfg::kPersistent ? "true" : "false", Kernel::kSmemBytes,
                    int(sizeof(FactAttentionArgs)), int(workspace_bytes()), KernelOf<Cfg>::precision(),
                    Kernel::kWindows ? "true" : "false", int(Kernel::D), Cfg::kKeyMask ? "true" : "false");
      done = true;
    }
    return buffer;
  }
};

}  // namespace fact::attention

// One kernel library: its C entry and its info. KEY becomes the symbol fact_KEY.
#define FACT_ATTENTION_INSTANCE(KEY, NAME, ...)                                                   \
  extern "C" FACT_EXPORT int fact_##KEY(const FactCallHeader* args, void* workspace,              \
                                        size_t* workspace_size, void* stream) noexcept {           \
    return ::fact::attention::Entry<__VA_ARGS__>::run(args, workspace, workspace_size, stream);    \
  }                                                                                                \
  extern "C" FACT_EXPORT const char* fact_kernel_info(void) noexcept {                             \
    return ::fact::attention::Entry<__VA_ARGS__>::info(#KEY, NAME);                                \
  }
