// The attention kind's runtime (fact/runtime/kind_runtime.hpp): what `fact run-kernel` and the
// tuner's child processes run for an attention kernel library, as a case of the one verifier
// (fact/runtime/verifier.hpp). The case lays out Q, K, V and O the way the problem's views say
// (a fused-QKV projection read at offsets, merged-head output strides; dense [B, T, H, D]
// tensors for a problem written on the command line), fills the inputs uniform in [-√3, √3)
// (unit variance), a key mask (if any) as a padding mask that hides up to a quarter of each
// batch entry's keys, and computes the float64 attention on the GPU from the same inputs
// (attention_device.hpp). Its constants-changed check is "scale" (another softmax scale: a
// kernel ignoring the ABI's scale fails), and it asks for determinism (the repoison run must be
// bit-identical). No vendor baseline is registered (cuDNN's frontend is not available to C++ in
// this build); patterns/attention/bench_attention.py compares with PyTorch's SDPA backends.
#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <optional>
#include <vector>
#include <sstream>

#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/kind_runtime.hpp"
#include "patterns/attention/attention_abi.h"
#include "patterns/attention/kind/pack.hpp"
#include "patterns/attention/kind/problem.hpp"
#include "patterns/attention/realize/spec.hpp"
#include "patterns/attention/runtime/attention_device.hpp"

namespace fact::attention {
namespace {

using nlohmann::json;
using runtime::BufferSet;
using runtime::BufferSpec;
using runtime::RunReport;
using runtime::RunStatus;

constexpr float kInputScale = 1.7320508f;  // uniform [-√3, √3): unit variance

// One past the last element a [B, H, T, D] view addresses.
int64_t view_end(const TensorView& v) {
  int64_t end = v.offset + 1;
  for (size_t d = 0; d < 4; ++d) end += (v.shape[d] - 1) * v.stride[d];
  return end;
}

device::View device_view(const TensorView& v) { return {v.stride[0], v.stride[1], v.stride[2], v.offset}; }

// The buffers of one problem: one per operand value (Q, K, V may share one), then O, then the
// key mask's (when there is one).
struct Layout {
  std::map<std::string, size_t> input;  // value → buffer index
  size_t o = 0;
  std::optional<size_t> key_mask;
};

// One past the last byte of the key mask's rows.
int64_t key_mask_end(const AttentionProblem& p) {
  return p.key_mask->offset + (p.batch - 1) * p.key_mask->batch_stride + (p.kv_seq - 1) * p.key_mask->key_stride + 1;
}

// Keys a padding mask hides at the end of batch entry b's row: a quarter of the keys, less for
// later entries, none for every fourth entry (so that rows see between 3/4 of the keys and all).
int64_t padded_keys(const AttentionProblem& p, int64_t b) { return (p.kv_seq / 4) * ((3 - b % 4)) / 3; }

// The attention with softmax scale `scale` on a case's buffers.
class AttentionComputation final : public runtime::Computation {
 public:
  AttentionComputation(AttentionProblem p, device::Element type, Layout layout, double scale)
      : p_(std::move(p)), type_(type), layout_(std::move(layout)) {
    p_.scale = scale;
  }

  runtime::ArgBytes arguments(const BufferSet& buffers) const override {
    FactAttentionArgs a = attention_args(p_);
    const int64_t bytes = runtime::element_bytes(type_);
    a.q = base(buffers, p_.q, bytes);
    a.k = base(buffers, p_.k, bytes);
    a.v = base(buffers, p_.v, bytes);
    a.o = static_cast<char*>(buffers[layout_.o]) + p_.o.offset * bytes;
    if (layout_.key_mask) a.key_mask = static_cast<const char*>(buffers[*layout_.key_mask]) + p_.key_mask->offset;
    runtime::ArgBytes image(sizeof a);
    std::memcpy(image.data(), &a, sizeof a);
    return image;
  }

  void reference(runtime::VerifyBackend& backend, const BufferSet& buffers,
                 const std::vector<double*>& refs) const override {
    device::Problem dp{p_.batch, p_.heads, p_.kv_heads, p_.seq, p_.kv_seq, p_.head_dim, p_.v_head_dim, 0, p_.scale};
    dp.window = p_.mask == MaskKind::None ? 0 : p_.window;
    switch (p_.mask) {
      case MaskKind::None: dp.mask = FACT_ATTN_MASK_NONE; break;
      case MaskKind::CausalTopLeft: dp.mask = FACT_ATTN_MASK_CAUSAL_TOP_LEFT; break;
      case MaskKind::CausalBottomRight: dp.mask = FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
    }
    if (layout_.key_mask) {
      dp.key_mask = static_cast<const uint8_t*>(buffers[*layout_.key_mask]) + p_.key_mask->offset;
      dp.key_mask_batch_stride = p_.key_mask->batch_stride;
      dp.key_mask_seq_stride = p_.key_mask->key_stride;
      dp.key_mask_keep = p_.key_mask->keep;
    }
    auto data = [&](const TensorView& v) { return static_cast<const void*>(buffers[layout_.input.at(v.value)]); };
    device::reference(dp, type_, data(p_.q), device_view(p_.q), data(p_.k), device_view(p_.k), data(p_.v),
                      device_view(p_.v), refs.at(0),
                      static_cast<cudaStream_t>(backend.stream_handle(runtime::StreamId::Primary)));
  }

  std::string reference_key() const override {
    std::ostringstream key;
    key.precision(17);
    key << "scale " << p_.scale;
    return key.str();
  }

 private:
  const void* base(const BufferSet& buffers, const TensorView& v, int64_t bytes) const {
    return static_cast<const char*>(buffers[layout_.input.at(v.value)]) + v.offset * bytes;
  }

  AttentionProblem p_;
  device::Element type_;
  Layout layout_;
};

class AttentionCase final : public runtime::VerifyCase {
 public:
  AttentionCase(AttentionProblem p, device::Element type, double tolerance)
      : p_(std::move(p)), type_(type), tolerance_(tolerance) {
    std::map<std::string, int64_t> extent;
    for (const TensorView* v : {&p_.q, &p_.k, &p_.v}) extent[v->value] = std::max(extent[v->value], view_end(*v));
    for (const auto& [value, elements] : extent) {
      layout_.input[value] = buffers_.size();
      buffers_.push_back({value, false, size_t(elements * runtime::element_bytes(type_)), type_, 0, {}, {}});
    }
    layout_.o = buffers_.size();
    BufferSpec o{p_.o.value + " (output)", true, size_t(view_end(p_.o) * runtime::element_bytes(type_)), type_,
                 p_.o.offset, {}, {}};
    for (size_t d = 0; d < 4; ++d) {
      o.shape.push_back(p_.o.shape[d]);
      o.stride.push_back(p_.o.stride[d]);
    }
    buffers_.push_back(o);
    if (p_.key_mask) {
      layout_.key_mask = buffers_.size();
      buffers_.push_back({p_.key_mask->value + " (key mask)", false, size_t(key_mask_end(p_)),
                          runtime::ElementType::U8, 0, {}, {}});
    }
  }

  std::vector<BufferSpec> buffers() const override { return buffers_; }
  void fill_inputs(runtime::VerifyBackend& backend, const BufferSet& buffers, uint64_t seed, int) override {
    uint64_t s = seed;
    for (const auto& [value, index] : layout_.input) {
      backend.fill_uniform(buffers[index], type_, int64_t(buffers_[index].bytes) / runtime::element_bytes(type_),
                           ++s * 0x100000001b3ull, kInputScale);
    }
    if (layout_.key_mask) {
      // A padding mask: the last padded_keys(b) keys of batch entry b hidden.
      const KeyMask& key = *p_.key_mask;
      std::vector<uint8_t> bytes(size_t(key_mask_end(p_)), 0);
      for (int64_t b = 0; b < p_.batch; ++b) {
        for (int64_t j = 0; j < p_.kv_seq; ++j) {
          const bool visible = j < p_.kv_seq - padded_keys(p_, b);
          bytes[size_t(key.offset + b * key.batch_stride + j * key.key_stride)] = visible == key.keep ? 1 : 0;
        }
      }
      backend.upload(buffers[*layout_.key_mask], bytes.data(), bytes.size());
    }
  }
  std::shared_ptr<const runtime::Computation> computation() const override {
    return std::make_shared<AttentionComputation>(p_, type_, layout_, p_.scale);
  }
  std::optional<runtime::VariedCheck> varied() const override {
    return runtime::VariedCheck{"scale", std::make_shared<AttentionComputation>(p_, type_, layout_, p_.scale * 1.7)};
  }
  double tolerance() const override { return tolerance_; }
  double flops() const override { return p_.flops(); }
  bool deterministic() const override { return true; }

 private:
  AttentionProblem p_;
  device::Element type_;
  double tolerance_;
  Layout layout_;
  std::vector<BufferSpec> buffers_;
};

json problem_json(const AttentionProblem& p) {
  json j = attention_problem_to_json(p);
  j["fusion"] = p.fusion_name();
  j["shape"] = p.shape_string();
  j["flops"] = p.flops();
  j["text"] = p.fusion_name() + " " + p.shape_string() + " " + std::string(graph::dtype_label(p.dtype));
  return j;
}

class AttentionRuntime final : public runtime::KindRuntime {
 public:
  std::string kind() const override { return kKindName; }

  std::unique_ptr<runtime::VerifyCase> prepare(const runtime::RunKernelOptions& options, const Problem& problem,
                                               const runtime::KernelLibrary* library,
                                               RunReport& report) const override {
    AttentionProblem p = attention_problem_of(problem);
    if (p.q.value.empty() || p.k.value.empty() || p.v.value.empty() || p.o.value.empty()) set_dense_views(p);
    report.problem = problem_json(p);
    report.tolerance = kind_of(problem).tolerance(problem.desc, options.precision);
    if (library == nullptr) {
      report.status = RunStatus::Error;
      report.error = "no C++ attention baseline (cuDNN's frontend is not available here); "
                     "patterns/attention/bench_attention.py compares with PyTorch's SDPA";
      return nullptr;
    }
    if (p.dtype != DType::BFloat16 && p.dtype != DType::Float16 && p.dtype != DType::Float32) {
      report.status = RunStatus::CannotImplement;
      report.error = "attention kernels take bf16, fp16 or float32, not " + std::string(graph::dtype_name(p.dtype));
      return nullptr;
    }
    const AttentionSpec spec = AttentionSpec::of(library->spec());
    if (spec.dtype != p.dtype || spec.head_dim != p.head_dim || spec.head_dim != p.v_head_dim ||
        spec.causal != (p.mask != MaskKind::None) || spec.key_mask != p.key_mask.has_value()) {
      report.status = RunStatus::CannotImplement;
      report.error = "kernel " + spec.name() + " is not built for " + p.fusion_name() + " " + p.shape_string() + " " +
                     std::string(graph::dtype_label(p.dtype));
      return nullptr;
    }
    const device::Element type = p.dtype == DType::BFloat16 ? device::Element::BF16
                                 : p.dtype == DType::Float16  ? device::Element::F16
                                                              : device::Element::F32;
    return std::make_unique<AttentionCase>(p, type, report.tolerance);
  }
};

const runtime::KindRuntimeRegistrar kAttentionRuntime{std::make_unique<AttentionRuntime>()};

}  // namespace
}  // namespace fact::attention
