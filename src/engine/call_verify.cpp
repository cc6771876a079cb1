#include "fact/engine/call_verify.hpp"

#include <cstring>
#include <stdexcept>

#include "fact/graph/graph.hpp"
#include "fact/problem/arg_image.hpp"

#ifdef FACT_HAVE_CUDA
#include "fact/runtime/cuda_backend.hpp"
#include "fact/runtime/device_buffer.hpp"
#include "fact/runtime/host_backend.hpp"
#include "fact/runtime/run_options.hpp"
#include "fact/runtime/verifier.hpp"
#endif

namespace fact::engine {

#ifdef FACT_HAVE_CUDA
namespace {

using runtime::ElementType;

ElementType element_type_of(const std::string& name) {
  std::string text = name;
  if (text.rfind("torch.", 0) == 0) text = text.substr(6);
  switch (graph::parse_dtype(text)) {
    case graph::DType::Float32: return ElementType::F32;
    case graph::DType::BFloat16: return ElementType::BF16;
    case graph::DType::Float16: return ElementType::F16;
    case graph::DType::Float64: return ElementType::F64;
    case graph::DType::Int64: return ElementType::I64;
    case graph::DType::Int32: return ElementType::I32;
    case graph::DType::Bool: case graph::DType::UInt8: return ElementType::U8;
    default: throw std::invalid_argument("the verifier has no storage for dtype '" + name + "'");
  }
}

struct Tensor {
  ElementType type = ElementType::F32;
  std::vector<int64_t> shape, stride;
  int64_t offset = 0;  // the largest pointer slot's element_offset into it
  size_t bytes = 0;    // the storage: every element the view addresses, past the offset too
  int64_t alloc_elements = 0;  // a result's "alloc_shape" (docs/plan.md): the kernel may write all
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

Tensor tensor_of(const nlohmann::json& j) {
  Tensor t;
  t.type = element_type_of(j.at("dtype").get<std::string>());
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  t.stride = j.at("stride").get<std::vector<int64_t>>();
  if (t.shape.size() != t.stride.size() || t.shape.size() > size_t(runtime::kMaxViewRank)) {
    throw std::invalid_argument("a call's tensor needs as many strides as sizes, at most 8");
  }
  if (j.contains("alloc_shape")) {
    t.alloc_elements = 1;
    for (int64_t v : j.at("alloc_shape").get<std::vector<int64_t>>()) t.alloc_elements *= v;
  }
  return t;
}

void size_storage(Tensor& t) {
  int64_t extent = t.offset + 1;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) extent = t.offset;
    else extent += (t.shape[d] - 1) * t.stride[d];
  }
  extent = std::max(extent, t.offset + t.alloc_elements);
  t.bytes = size_t(std::max<int64_t>(extent, 1)) * size_t(runtime::element_bytes(t.type));
}

// The call's buffers: operands first, then results.
class CallCase final : public runtime::VerifyCase {
 public:
  CallCase(const nlohmann::json& call, double tolerance, const CallVerifyHooks& hooks)
      : image_(ArgImage::from_json({{"operands", nlohmann::json::array()},
                                    {"results", nlohmann::json::array()},
                                    {"args", call.at("args")}})),
        tolerance_(tolerance), hooks_(hooks) {
    for (const auto& o : call.at("operands")) operands_.push_back(tensor_of(o));
    for (const auto& r : call.at("results")) results_.push_back(tensor_of(r));
    for (const PointerSlot& slot : image_.pointers) {
      auto& list = slot.from == PointerSlot::From::Operand ? operands_ : results_;
      if (slot.index >= list.size()) throw std::invalid_argument("a pointer slot names a missing tensor");
      list[slot.index].offset = std::max(list[slot.index].offset, slot.element_offset);
    }
    for (Tensor& t : operands_) size_storage(t);
    for (Tensor& t : results_) size_storage(t);
    if (results_.empty()) throw std::invalid_argument("the call has no results");
  }

  std::vector<runtime::BufferSpec> buffers() const override {
    std::vector<runtime::BufferSpec> specs;
    for (size_t i = 0; i < operands_.size(); ++i) {
      specs.push_back({"operand " + std::to_string(i), false, operands_[i].bytes, operands_[i].type, 0, {}, {}});
    }
    for (size_t i = 0; i < results_.size(); ++i) {
      // The result's view starts at its storage (a slot's element offset moves only the address
      // the kernel is given, as the plan's calls do).
      specs.push_back({"result " + std::to_string(i), true, results_[i].bytes, results_[i].type, 0,
                       results_[i].shape, results_[i].stride,
                       results_[i].alloc_elements > 0});  // padded rows: the kernel writes them
    }
    return specs;
  }

  void fill_inputs(runtime::VerifyBackend& backend, const runtime::BufferSet& buffers, uint64_t, int index) override {
    std::vector<std::vector<unsigned char>> staging;
    std::vector<void*> pointers;
    for (const Tensor& t : operands_) {
      staging.emplace_back(t.bytes, 0);
      pointers.push_back(staging.back().data());
    }
    hooks_.fill(index, pointers);
    for (size_t i = 0; i < operands_.size(); ++i) backend.upload(buffers[i], staging[i].data(), operands_[i].bytes);
  }

  std::shared_ptr<const runtime::Computation> computation() const override {
    return std::make_shared<Call>(*this);
  }
  double tolerance() const override { return tolerance_; }
  bool reference_after_call() const override { return true; }

  // The caller's baseline: the same computation (the same reference), called through the hook on
  // the buffers' addresses. Verified with the result buffers given (it writes them); timed
  // without (it computes into memory of its own: no copy into the verifier's buffers is timed).
  runtime::Baseline make_baseline(const std::string& name, runtime::VerifyBackend& backend,
                                  const runtime::BufferSet& buffers) override {
    if (!hooks_.baseline || name != hooks_.baseline_name) return VerifyCase::make_baseline(name, backend, buffers);
    const size_t count = operands_.size();
    std::vector<void*> operands(buffers.data.begin(), buffers.data.begin() + long(count));
    std::vector<void*> results(buffers.data.begin() + long(count), buffers.data.end());
    runtime::Baseline b;
    b.name = name;
    b.computes = "call";
    b.fused = true;
    b.config = "the caller's";
    b.computation = computation();
    const auto* hook = &hooks_.baseline;
    const auto through_hook = [hook, operands](std::vector<void*> writes) -> runtime::CallFunction {
      return [hook, operands, writes](const FactCallHeader*, void*, size_t* workspace_size, void* stream) {
        if (workspace_size) {
          *workspace_size = 0;
          return int(FACT_OK);
        }
        try {
          (*hook)(operands, writes, stream);
        } catch (const std::exception&) {
          return int(FACT_ERR_INTERNAL);
        }
        return int(FACT_OK);
      };
    };
    b.call = through_hook(results);
    b.timed = through_hook({});
    return b;
  }

 private:
  class Call final : public runtime::Computation {
   public:
    explicit Call(const CallCase& c) : c_(c) {}
    runtime::ArgBytes arguments(const runtime::BufferSet& buffers) const override {
      std::vector<const void*> operands;
      std::vector<void*> results;
      std::vector<int> operand_bytes, result_bytes;
      for (size_t i = 0; i < c_.operands_.size(); ++i) {
        operands.push_back(buffers[i]);
        operand_bytes.push_back(runtime::element_bytes(c_.operands_[i].type));
      }
      for (size_t i = 0; i < c_.results_.size(); ++i) {
        results.push_back(buffers[c_.operands_.size() + i]);
        result_bytes.push_back(runtime::element_bytes(c_.results_[i].type));
      }
      const std::vector<uint8_t> bytes = bind_addresses(c_.image_, operands, results, operand_bytes, result_bytes);
      runtime::ArgBytes image(bytes.size());
      std::memcpy(image.data(), bytes.data(), bytes.size());
      return image;
    }
    void reference(runtime::VerifyBackend& backend, const runtime::BufferSet& buffers,
                   const std::vector<double*>& refs) const override {
      std::vector<std::vector<unsigned char>> operands;
      std::vector<const void*> operand_pointers;
      for (size_t i = 0; i < c_.operands_.size(); ++i) {
        operands.emplace_back(c_.operands_[i].bytes);
        backend.download(operands.back().data(), buffers[i], c_.operands_[i].bytes);
        operand_pointers.push_back(operands.back().data());
      }
      std::vector<std::vector<double>> results;
      std::vector<double*> result_pointers;
      for (const Tensor& t : c_.results_) {
        results.emplace_back(size_t(std::max<int64_t>(t.elements(), 1)), 0.0);
        result_pointers.push_back(results.back().data());
      }
      c_.hooks_.reference(operand_pointers, result_pointers);
      for (size_t j = 0; j < results.size(); ++j) {
        backend.upload(refs.at(j), results[j].data(), results[j].size() * sizeof(double));
      }
    }
    std::string reference_key() const override { return "call"; }

   private:
    const CallCase& c_;
  };

  ArgImage image_;
  std::vector<Tensor> operands_, results_;
  double tolerance_;
  const CallVerifyHooks& hooks_;
};

}  // namespace

nlohmann::json verify_call(const nlohmann::json& request, FactEntry entry, const CallVerifyHooks& hooks) {
  if (entry == nullptr || !hooks.fill || !hooks.reference) {
    throw std::invalid_argument("verify_call needs an entry, a fill and a reference function");
  }
  CallVerifyHooks named = hooks;
  if (named.baseline && named.baseline_name.empty()) named.baseline_name = "pytorch";
  const std::string device = request.value("device", std::string("host"));
  CallCase verify_case(request.at("call"), request.at("tolerance").get<double>(), named);
  runtime::VerifyOptions options;
  options.base_seed = request.value("seed", uint64_t{1});
  options.verify_only = request.value("verify_only", false);
  if (request.contains("timing")) {
    const nlohmann::json& t = request.at("timing");
    options.timing.warmup_runs = t.value("warmup_runs", options.timing.warmup_runs);
    options.timing.min_runs = t.value("min_runs", options.timing.min_runs);
    options.timing.min_time_s = t.value("min_time_s", options.timing.min_time_s);
    options.timing.max_runs = t.value("max_runs", options.timing.max_runs);
  }
  options.settle_ns = int64_t(request.value("settle_s", 0.05) * 1e9);
  if (named.baseline) options.baselines = {named.baseline_name};
  runtime::RunReport report;
  report.tolerance = verify_case.tolerance();
  try {
    if (device == "host") {
      runtime::HostBackend backend;
      runtime::verify_and_time(backend, verify_case, entry, options, nullptr, report);
    } else if (device == "cuda") {
      if (runtime::cuda_device_count() == 0) throw std::runtime_error("no CUDA device is visible");
      runtime::CudaBackend backend(!options.verify_only);
      runtime::verify_and_time(backend, verify_case, entry, options, nullptr, report);
    } else {
      throw std::invalid_argument("device must be host or cuda, not '" + device + "'");
    }
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    report.status = runtime::RunStatus::Error;
    report.error = e.what();
  }
  return runtime::to_json(report);
}

#else

nlohmann::json verify_call(const nlohmann::json&, FactEntry, const CallVerifyHooks&) {
  throw std::runtime_error("this engine was built without the runtime (no CUDA toolkit at configure time): "
                           "it cannot verify a call");
}

#endif

}  // namespace fact::engine
