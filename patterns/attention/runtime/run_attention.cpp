// The attention kind's runtime (fact/runtime/kind_runtime.hpp): what `fact run-kernel` and the
// tuner's child processes run for an attention kernel library. It lays out Q, K, V and O the
// way the problem's views say (a fused-QKV projection read at offsets, merged-head output
// strides; dense [B, T, H, D] tensors for a problem written on the command line), and runs the
// verification sequence every kernel passes (docs/runtime.md), each against a float64
// attention computed on the GPU from the same inputs:
//   primary       fresh random inputs (seed 0), output poisoned (NaN pattern) with guard bands
//   fresh_inputs  NEW random inputs (seed 1): a kernel replaying a cached result fails
//   other_stream  the secondary stream, with the poisoning queued behind a spin: a kernel that
//                 ignores its stream argument races the poison
//   repoison      same inputs, output poisoned again: every element written again, and
//                 bit-identical to the run before (deterministic)
//   scale         new inputs (seed 2) and another softmax scale: a kernel ignoring the ABI's
//                 scale fails
// Each check also requires every output element written, none outside the output view, no
// NaN/Inf, the inputs unchanged and ‖out − ref‖ / ‖ref‖ within the precision contract's
// tolerance. Then the kernel is timed (CUDA events, L2 flushed). No library baseline runs here
// (cuDNN's frontend is not available to C++ in this build); bench_attention.py compares
// against PyTorch's SDPA backends.
#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <random>
#include <set>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/kernel_library.hpp"
#include "fact/runtime/kind_runtime.hpp"
#include "fact/runtime/run_kernel.hpp"
#include "fact/runtime/timing.hpp"
#include "patterns/attention/attention_abi.h"
#include "patterns/attention/kind/pack.hpp"
#include "patterns/attention/kind/problem.hpp"
#include "patterns/attention/realize/spec.hpp"
#include "patterns/attention/runtime/attention_device.hpp"

namespace fact::attention {
namespace {

using nlohmann::json;
using runtime::CheckResult;
using runtime::CudaStream;
using runtime::DeviceBuffer;
using runtime::RunReport;
using runtime::RunStatus;

constexpr int64_t kGuardElements = 2048;  // poisoned elements on each side of O
constexpr int64_t kStreamCheckDelayNs = 2'000'000;
constexpr float kInputScale = 1.7320508f;  // uniform [-√3, √3): unit variance

void set_phase(runtime::ProcessGuard* guard, const std::string& phase) {
  if (guard) guard->set_phase(phase);
}

uint64_t fresh_seed() {
  std::random_device device;
  const uint64_t seed = (uint64_t{device()} << 32) ^ device();
  return seed == 0 ? 1 : seed;
}

// One past the last element a [B, H, T, D] view addresses.
int64_t view_end(const TensorView& v) {
  int64_t end = v.offset + 1;
  for (size_t d = 0; d < 4; ++d) end += (v.shape[d] - 1) * v.stride[d];
  return end;
}

device::View device_view(const TensorView& v) { return {v.stride[0], v.stride[1], v.stride[2], v.offset}; }

// The buffers of one problem: one per operand value (Q, K, V may share one), O with guards.
class Harness {
 public:
  Harness(const AttentionProblem& p, device::Element type) : p_(p), type_(type) {
    std::map<std::string, int64_t> extent;
    for (const TensorView* v : {&p.q, &p.k, &p.v}) extent[v->value] = std::max(extent[v->value], view_end(*v));
    for (const auto& [value, elements] : extent) {
      inputs_[value] = {DeviceBuffer(size_t(elements * runtime::element_bytes(type))), elements};
    }
    o_elements_ = view_end(p.o) + 2 * kGuardElements;
    o_ = DeviceBuffer(size_t(o_elements_ * runtime::element_bytes(type)));
    reference_ = DeviceBuffer(size_t(p.batch * p.heads * p.seq * p.v_head_dim) * sizeof(double));
    scratch_ = DeviceBuffer(sizeof(device::Sums) + 4 * sizeof(unsigned long long));
    dp_ = {p.batch, p.heads, p.kv_heads, p.seq, p.kv_seq, p.head_dim, p.v_head_dim, 0, p.scale};
    dp_.window = p.mask == MaskKind::None ? 0 : p.window;
    switch (p.mask) {
      case MaskKind::None: dp_.mask = FACT_ATTN_MASK_NONE; break;
      case MaskKind::CausalTopLeft: dp_.mask = FACT_ATTN_MASK_CAUSAL_TOP_LEFT; break;
      case MaskKind::CausalBottomRight: dp_.mask = FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
    }
  }

  cudaStream_t primary() const { return primary_.get(); }
  cudaStream_t secondary() const { return secondary_.get(); }
  int64_t input_bytes() const {
    int64_t n = 0;
    for (const auto& [value, buffer] : inputs_) n += buffer.second * runtime::element_bytes(type_);
    return n;
  }

  void randomize(uint64_t seed) {
    uint64_t s = seed;
    for (auto& [value, buffer] : inputs_) {
      runtime::launch_fill_uniform(buffer.first.data(), type_, buffer.second, ++s * 0x100000001b3ull, kInputScale, primary());
    }
    FACT_CUDA_CHECK(cudaStreamSynchronize(primary()));
    reference_scale_ = -1;  // stale
  }

  // The ABI arguments on these buffers with softmax scale `scale`.
  FactAttentionArgs args(double scale) const {
    AttentionProblem p = p_;
    p.scale = scale;
    FactAttentionArgs a = attention_args(p);
    const int64_t bytes = runtime::element_bytes(type_);
    auto base = [&](const TensorView& v) {
      return static_cast<const void*>(static_cast<const char*>(inputs_.at(v.value).first.data()) + v.offset * bytes);
    };
    a.q = base(p.q);
    a.k = base(p.k);
    a.v = base(p.v);
    a.o = static_cast<char*>(o_.data()) + (kGuardElements + p.o.offset) * bytes;
    return a;
  }

  // Runs `launch` on `stream` for `scale` and checks the result (file comment).
  CheckResult check(const std::string& name, const std::function<int(const FactAttentionArgs&, cudaStream_t)>& launch,
                    cudaStream_t stream, double scale, double tolerance, uint64_t seed, int* status) {
    CheckResult c;
    c.name = name;
    c.seed = seed;
    c.tolerance = tolerance;
    c.stream = stream == primary() ? "primary" : "secondary";
    c.elements = p_.batch * p_.heads * p_.seq * p_.v_head_dim;
    ensure_reference(scale);
    const uint64_t before = input_checksum();
    if (stream == secondary()) {
      // The poison lands only after the spin: a kernel launched elsewhere finishes first.
      runtime::launch_spin_kernel(kStreamCheckDelayNs, stream);
    }
    runtime::launch_fill_poison(o_.data(), type_, o_elements_, stream);
    *status = launch(args(scale), stream);
    FACT_CUDA_CHECK(cudaStreamSynchronize(stream));
    FACT_CUDA_CHECK(cudaDeviceSynchronize());
    if (*status != FACT_OK) {
      c.failure = "the kernel returned status " + std::to_string(*status);
      return c;
    }
    auto* sums = static_cast<device::Sums*>(scratch_.data());
    auto* total = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch_.data()) + sizeof(device::Sums));
    // Every copy and memset is ordered on the primary stream: the harness streams are
    // non-blocking, so the legacy default stream does not order them with the kernels.
    FACT_CUDA_CHECK(cudaMemsetAsync(scratch_.data(), 0, scratch_.bytes(), primary()));
    device::Problem dp = dp_;
    dp.scale = scale;
    TensorView o = p_.o;
    o.offset += kGuardElements;
    device::compare(dp, type_, o_.data(), device_view(o), reference_.as<double>(), sums, primary());
    runtime::launch_count_not_poison(o_.data(), type_, o_elements_, total, primary());
    FACT_CUDA_CHECK(cudaStreamSynchronize(primary()));
    device::Sums s;
    unsigned long long written_anywhere = 0;
    FACT_CUDA_CHECK(cudaMemcpy(&s, sums, sizeof(s), cudaMemcpyDeviceToHost));
    FACT_CUDA_CHECK(cudaMemcpy(&written_anywhere, total, sizeof(written_anywhere), cudaMemcpyDeviceToHost));
    c.unwritten = int64_t(s.unwritten);
    c.nonfinite = int64_t(s.nonfinite);
    c.out_of_bounds = int64_t(written_anywhere) - int64_t(s.written);
    c.max_abs_err = s.max_abs_diff;
    c.ref_norm = std::sqrt(s.sum_sq_ref);
    if (c.ref_norm > 0) c.rel_err = std::sqrt(s.sum_sq_diff) / c.ref_norm;
    c.inputs_unchanged = input_checksum() == before;
    if (c.unwritten > 0) {
      c.failure = std::to_string(c.unwritten) + " of " + std::to_string(c.elements) + " output elements not written";
    } else if (c.nonfinite > 0) {
      c.failure = std::to_string(c.nonfinite) + " output elements are NaN or Inf";
    } else if (c.out_of_bounds != 0) {
      c.failure = std::to_string(c.out_of_bounds) + " elements written outside the output view";
    } else if (!c.inputs_unchanged) {
      c.failure = "the kernel changed its inputs";
    } else if (!c.rel_err || !(*c.rel_err <= tolerance)) {
      c.failure = "rel_err " + (c.rel_err ? std::to_string(*c.rel_err) : std::string("n/a")) + " above the tolerance " +
                  std::to_string(tolerance);
    }
    c.passed = c.failure.empty();
    return c;
  }

  // A checksum of the whole output buffer (guards included): equal for bit-identical runs.
  uint64_t output_checksum() {
    auto* sum = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch_.data()) + sizeof(device::Sums) + 8);
    return runtime::checksum_of(o_.data(), o_.bytes(), sum, primary());
  }

 private:
  void ensure_reference(double scale) {
    if (reference_scale_ == scale) return;
    device::Problem dp = dp_;
    dp.scale = scale;
    auto base = [&](const TensorView& v) { return inputs_.at(v.value).first.data(); };
    device::reference(dp, type_, base(p_.q), device_view(p_.q), base(p_.k), device_view(p_.k), base(p_.v),
                      device_view(p_.v), reference_.as<double>(), primary());
    FACT_CUDA_CHECK(cudaStreamSynchronize(primary()));
    reference_scale_ = scale;
  }

  uint64_t input_checksum() {
    auto* sum = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch_.data()) + sizeof(device::Sums) + 16);
    // One sum per input buffer, folded on the host in the map's (fixed) order.
    uint64_t combined = 0;
    for (const auto& [value, buffer] : inputs_) {
      combined = combined * 0x100000001B3ull + runtime::checksum_of(buffer.first.data(), buffer.first.bytes(), sum, primary());
    }
    return combined;
  }

  AttentionProblem p_;
  device::Element type_;
  device::Problem dp_;
  std::map<std::string, std::pair<DeviceBuffer, int64_t>> inputs_;
  DeviceBuffer o_, reference_, scratch_;
  int64_t o_elements_ = 0;
  double reference_scale_ = -1;
  CudaStream primary_, secondary_;
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

  void run(const runtime::RunKernelOptions& options, const Problem& problem, const runtime::KernelLibrary* library,
           runtime::ProcessGuard* guard, RunReport& report) const override {
    AttentionProblem p = attention_problem_of(problem);
    if (p.q.value.empty() || p.k.value.empty() || p.v.value.empty() || p.o.value.empty()) set_dense_views(p);
    report.problem = problem_json(p);
    report.tolerance = kind_of(problem).tolerance(problem.desc, options.precision);
    if (options.baseline_only || library == nullptr) {
      report.status = RunStatus::Error;
      report.error = "no C++ attention baseline (cuDNN's frontend is not available here); "
                     "patterns/attention/bench_attention.py compares with PyTorch's SDPA";
      return;
    }
    if (p.dtype != DType::BFloat16 && p.dtype != DType::Float16 && p.dtype != DType::Float32) {
      report.status = RunStatus::CannotImplement;
      report.error = "attention kernels take bf16, fp16 or float32, not " + std::string(graph::dtype_name(p.dtype));
      return;
    }
    const AttentionSpec spec = AttentionSpec::of(library->spec());
    if (spec.dtype != p.dtype || spec.head_dim != p.head_dim || spec.head_dim != p.v_head_dim ||
        spec.causal != (p.mask != MaskKind::None)) {
      report.status = RunStatus::CannotImplement;
      report.error = "kernel " + spec.name() + " is not built for " + p.fusion_name() + " " + p.shape_string() + " " +
                     std::string(graph::dtype_label(p.dtype));
      return;
    }
    set_phase(guard, "initializing CUDA");
    if (runtime::cuda_device_count() == 0) {
      report.status = RunStatus::Error;
      report.error = "no CUDA device is visible";
      return;
    }
    FACT_CUDA_CHECK(cudaSetDevice(options.device));
    report.device = runtime::current_device_json();
    const device::Element type = p.dtype == DType::BFloat16 ? device::Element::BF16
                                 : p.dtype == DType::Float16  ? device::Element::F16
                                                              : device::Element::F32;
    Harness harness(p, type);
    const uint64_t base_seed = options.seed != 0 ? options.seed : fresh_seed();
    report.timing = {{"base_seed", base_seed}};

    set_phase(guard, "querying the workspace size");
    const FactEntry entry = library->entry();
    size_t workspace_bytes = 0;
    const FactAttentionArgs sample = harness.args(p.scale);
    const int query = entry(&sample.header, nullptr, &workspace_bytes, harness.primary());
    if (query != FACT_OK) {
      report.status = query == FACT_ERR_CANNOT_IMPLEMENT ? RunStatus::CannotImplement : RunStatus::Error;
      report.error = "workspace query returned " + runtime::fact_status_name(query);
      return;
    }
    report.workspace_bytes = static_cast<int64_t>(workspace_bytes);
    const DeviceBuffer workspace = runtime::dirty_workspace(workspace_bytes);
    auto launch = [&](const FactAttentionArgs& args, cudaStream_t stream) {
      return entry(&args.header, workspace.data(), nullptr, stream);
    };

    set_phase(guard, "verifying the kernel");
    report.status = RunStatus::Ok;
    struct Step {
      const char* name;
      int seed;      // check_seed index; -1: keep the inputs
      bool other_stream;
      double scale;
    };
    const Step steps[] = {{"primary", 0, false, p.scale},
                          {"fresh_inputs", 1, false, p.scale},
                          {"other_stream", -1, true, p.scale},
                          {"repoison", -1, false, p.scale},
                          {"scale", 2, false, p.scale * 1.7}};
    uint64_t last_output = 0;
    for (const Step& step : steps) {
      uint64_t seed = 0;
      if (step.seed >= 0) {
        seed = runtime::check_seed(base_seed, step.seed);
        harness.randomize(seed);
      } else if (!report.checks.empty()) {
        seed = report.checks.back().seed;
      }
      int status = FACT_OK;
      CheckResult c = harness.check(step.name, launch, step.other_stream ? harness.secondary() : harness.primary(),
                                    step.scale, report.tolerance, seed, &status);
      if (status != FACT_OK) {
        report.status = status == FACT_ERR_CANNOT_IMPLEMENT && report.checks.empty() ? RunStatus::CannotImplement
                                                                                     : RunStatus::Error;
        report.error = std::string(step.name) + ": the kernel returned " + runtime::fact_status_name(status);
        report.checks.push_back(c);
        return;
      }
      const uint64_t output = harness.output_checksum();
      if (c.passed && std::string(step.name) == "repoison" && output != last_output) {
        c.passed = false;
        c.failure = "not bit-identical to the run before on the same inputs";
      }
      last_output = output;
      if (c.rel_err && (!report.rel_err || *c.rel_err > *report.rel_err)) report.rel_err = c.rel_err;
      report.checks.push_back(c);
      if (!c.passed) {
        report.status = RunStatus::Wrong;
        report.error = std::string(step.name) + ": " + c.failure;
        return;
      }
    }

    if (!options.verify_only) {
      set_phase(guard, "timing the kernel");
      harness.randomize(runtime::check_seed(base_seed, 0));
      runtime::L2Flusher flusher;
      report.timing.update(runtime::describe(options.timing, &flusher));
      const FactAttentionArgs args = harness.args(p.scale);
      report.ms = runtime::time_launches(
          [&](cudaStream_t stream) {
            const int status = launch(args, stream);
            if (status != FACT_OK) {
              throw std::runtime_error("kernel returned " + runtime::fact_status_name(status) + " while being timed");
            }
          },
          harness.primary(), options.timing, &flusher);
      report.tflops = runtime::tflops_per_s(p.flops(), report.ms->median);
    }
    if (!options.baselines.empty()) {
      // The known baselines are cuBLAS GEMMs; attention has none in C++ (cuDNN's frontend is
      // not available here): said once, not as failed baselines.
      report.timing["baselines"] = "none for attention (the cuBLAS baselines are GEMMs; bench_attention.py "
                                   "compares with PyTorch's SDPA)";
    }
    set_phase(guard, "writing the report");
  }
};

const runtime::KindRuntimeRegistrar kAttentionRuntime{std::make_unique<AttentionRuntime>()};

}  // namespace
}  // namespace fact::attention
