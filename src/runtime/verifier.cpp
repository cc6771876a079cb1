#include "fact/runtime/verifier.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

#include "fact/core/status_names.hpp"
#include "fact/runtime/run_options.hpp"

namespace fact::runtime {

namespace {

void set_phase(ProcessGuard* guard, const std::string& phase) {
  if (guard) guard->set_phase(phase);
}

std::string format_number(double v) {
  std::ostringstream out;
  out.precision(3);
  out << v;
  return out.str();
}

std::string status_text(int status) { return core::status_name(status); }

// The case's buffers in backend memory, each inside its own allocation with guard bands, plus
// the float64 references of the outputs and the cached reference's identity.
class Workbench {
 public:
  Workbench(VerifyBackend& backend, const std::vector<BufferSpec>& specs, size_t guard_bytes)
      : backend_(backend), specs_(specs), guard_(guard_bytes) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const BufferSpec& spec = specs_[i];
      if (spec.bytes == 0) throw std::invalid_argument("buffer " + spec.name + " has no bytes");
      const int64_t element = element_bytes(spec.type);
      if (spec.output) {
        if (spec.shape.size() != spec.stride.size() || spec.shape.size() > size_t(kMaxViewRank)) {
          throw std::invalid_argument("output " + spec.name + ": shape and strides of up to 8 dims");
        }
        if (spec.bytes % element != 0 || guard_ % element != 0) {
          throw std::invalid_argument("output " + spec.name + ": bytes not whole elements");
        }
        outputs_.push_back(i);
      }
      Allocation storage = backend_.allocate(spec.bytes + 2 * guard_);
      storages_.push_back(storage);
      buffers_.data.push_back(static_cast<char*>(storage.get()) + guard_);
      // Inputs' guards hold the byte poison; outputs' whole storage is poisoned before each call.
      if (!spec.output) {
        backend_.fill_bytes(storage.get(), uint8_t(poison_bits(ElementType::U8)), guard_, StreamId::Primary);
        backend_.fill_bytes(static_cast<char*>(storage.get()) + guard_ + spec.bytes,
                            uint8_t(poison_bits(ElementType::U8)), guard_, StreamId::Primary);
      }
    }
    if (outputs_.empty()) throw std::invalid_argument("the call has no output");
    for (size_t o : outputs_) {
      int64_t elements = 1;
      for (int64_t extent : specs_[o].shape) elements *= extent;
      reference_storage_.push_back(backend_.allocate(size_t(std::max<int64_t>(elements, 1)) * sizeof(double)));
      references_.push_back(static_cast<double*>(reference_storage_.back().get()));
    }
    backend_.synchronize(StreamId::Primary);
  }

  const BufferSet& buffers() const { return buffers_; }
  const std::vector<size_t>& outputs() const { return outputs_; }
  const std::vector<BufferSpec>& specs() const { return specs_; }
  const BufferSpec& spec(size_t i) const { return specs_[i]; }

  void fill_inputs(VerifyCase& verify_case, uint64_t seed, int index) {
    verify_case.fill_inputs(backend_, buffers_, seed, index);
    ++input_generation_;
    seed_ = seed;
  }
  uint64_t seed() const { return seed_; }  // of the inputs now in the buffers

  // Computes the reference of `computation` on the current inputs unless it is there already
  // (always when `fresh`).
  void ensure_reference(const Computation& computation, bool fresh = false) {
    const std::string key = std::to_string(input_generation_) + "|" + computation.reference_key();
    if (reference_key_ == key && !fresh) return;
    reference_key_.clear();
    computation.reference(backend_, buffers_, references_);
    backend_.synchronize(StreamId::Primary);
    reference_key_ = key;
  }

  void poison_references() {
    for (size_t j = 0; j < outputs_.size(); ++j) {
      int64_t elements = 1;
      for (int64_t extent : specs_[outputs_[j]].shape) elements *= extent;
      backend_.fill_poison(references_[j], ElementType::F64, std::max<int64_t>(elements, 1), StreamId::Primary);
    }
    backend_.synchronize(StreamId::Primary);
    reference_key_.clear();
  }

  void poison_outputs(StreamId stream) {
    for (size_t o : outputs_) {
      const BufferSpec& spec = specs_[o];
      backend_.fill_poison(storages_[o].get(), spec.type,
                           int64_t(spec.bytes + 2 * guard_) / element_bytes(spec.type), stream);
    }
  }

  uint64_t input_checksum() {
    uint64_t combined = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].output) continue;
      combined = combined * 0x100000001B3ull + backend_.checksum(buffers_[i], specs_[i].bytes) + i;
    }
    return combined;
  }

  uint64_t output_checksum() {
    uint64_t combined = 0;
    for (size_t o : outputs_) {
      combined = combined * 0x100000001B3ull + backend_.checksum(storages_[o].get(), specs_[o].bytes + 2 * guard_);
    }
    return combined;
  }

  // Bytes changed in the inputs' guard bands.
  int64_t input_guard_changes() {
    int64_t changed = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].output) continue;
      const char* storage = static_cast<const char*>(storages_[i].get());
      changed += backend_.count_not_poison(storage, ElementType::U8, int64_t(guard_));
      changed += backend_.count_not_poison(storage + guard_ + specs_[i].bytes, ElementType::U8, int64_t(guard_));
    }
    return changed;
  }

  // Elements of output storage j's guard bands not holding the poison.
  int64_t output_guard_changes(size_t j) {
    const BufferSpec& spec = specs_[outputs_[j]];
    const char* storage = static_cast<const char*>(storages_[outputs_[j]].get());
    const int64_t guard = int64_t(guard_) / element_bytes(spec.type);
    return backend_.count_not_poison(storage, spec.type, guard) +
           backend_.count_not_poison(storage + guard_ + spec.bytes, spec.type, guard);
  }

  // Elements of output storage j (guards and gaps included) not holding the poison.
  int64_t written_anywhere(size_t j) {
    const BufferSpec& spec = specs_[outputs_[j]];
    return backend_.count_not_poison(storages_[outputs_[j]].get(), spec.type,
                                     int64_t(spec.bytes + 2 * guard_) / element_bytes(spec.type));
  }

  ErrorSums compare(size_t j) {
    const BufferSpec& spec = specs_[outputs_[j]];
    StridedView view;
    view.data = static_cast<const char*>(buffers_[outputs_[j]]) + spec.offset * element_bytes(spec.type);
    view.type = spec.type;
    view.rank = int(spec.shape.size());
    for (int d = 0; d < view.rank; ++d) {
      view.shape[d] = spec.shape[d];
      view.stride[d] = spec.stride[d];
    }
    return backend_.compare(view, references_[j]);
  }

 private:
  VerifyBackend& backend_;
  std::vector<BufferSpec> specs_;
  size_t guard_;
  std::vector<Allocation> storages_, reference_storage_;
  BufferSet buffers_;
  std::vector<size_t> outputs_;
  std::vector<double*> references_;
  uint64_t input_generation_ = 0;
  uint64_t seed_ = 0;
  std::string reference_key_;
};

// A callee with its workspace: queried once, allocated and filled with 0xFF so that a kernel
// relying on a zeroed workspace fails.
struct Prepared {
  CallFunction call;
  Allocation workspace;
  size_t workspace_bytes = 0;
};

// The workspace query; FACT_OK or the status it returned.
int prepare(VerifyBackend& backend, const CallFunction& call, const Computation& computation,
            const BufferSet& buffers, Prepared& out) {
  out.call = call;
  const ArgBytes args = computation.arguments(buffers);
  size_t bytes = 0;
  const int status = call(args.header(), nullptr, &bytes, backend.stream_handle(StreamId::Primary));
  if (status != FACT_OK) return status;
  out.workspace_bytes = bytes;
  if (bytes > 0) {
    out.workspace = backend.allocate(bytes);
    backend.fill_bytes(out.workspace.get(), 0xFF, bytes, StreamId::Primary);
    backend.synchronize(StreamId::Primary);
  }
  return FACT_OK;
}

struct CheckPlan {
  std::string name;
  int inputs_index;  // check_seed index of new inputs; -1: keep the inputs
  StreamId stream;
  const Computation* computation;
};

// One call of `callee` on `stream` and every check of it (file comment of verifier.hpp).
// `status` receives the call's FactStatus (the check then has only its failure set when not OK).
CheckResult run_check(VerifyBackend& backend, Workbench& bench, const Prepared& callee,
                      const CheckPlan& plan, uint64_t seed, double tolerance,
                      const VerifyOptions& options, bool reference_after_call, int* status) {
  CheckResult result;
  result.name = plan.name;
  result.seed = seed;
  result.tolerance = tolerance;
  result.stream = plan.stream == StreamId::Secondary ? "secondary" : "primary";
  for (size_t j = 0; j < bench.outputs().size(); ++j) {
    int64_t elements = 1;
    for (int64_t extent : bench.spec(bench.outputs()[j]).shape) elements *= extent;
    result.elements += elements;
  }

  if (reference_after_call) {
    bench.poison_references();
  } else {
    bench.ensure_reference(*plan.computation);
  }
  const uint64_t inputs_before = bench.input_checksum();
  if (plan.stream == StreamId::Secondary) backend.delay(plan.stream, options.stream_delay_ns);
  bench.poison_outputs(plan.stream);
  const ArgBytes args = plan.computation->arguments(bench.buffers());
  *status = backend.call_on(plan.stream, [&](void* stream) {
    return callee.call(args.header(), callee.workspace.get(), nullptr, stream);
  });
  if (*status != FACT_OK) {
    backend.synchronize_all(0);
    result.failure = "returned " + status_text(*status);
    return result;
  }
  backend.synchronize(plan.stream);
  const uint64_t at_return = bench.output_checksum();
  backend.synchronize_all(options.settle_ns);
  result.final_at_return = bench.output_checksum() == at_return;
  if (reference_after_call) bench.ensure_reference(*plan.computation, true);

  result.inputs_unchanged = bench.input_checksum() == inputs_before;
  int64_t out_of_bounds = bench.input_guard_changes();
  double worst_rel = -1.0;
  for (size_t j = 0; j < bench.outputs().size(); ++j) {
    const ErrorSums sums = bench.compare(j);
    // An output whose gaps the call may write (padded rows) is checked at its guard bands only.
    out_of_bounds += bench.specs()[bench.outputs()[j]].gaps_writable
                         ? bench.output_guard_changes(j)
                         : bench.written_anywhere(j) - int64_t(sums.written);
    result.unwritten += int64_t(sums.unwritten);
    result.nonfinite += int64_t(sums.nonfinite);
    result.max_abs_err = std::max(result.max_abs_err, sums.max_abs_diff);
    const double ref_norm = std::sqrt(sums.sum_sq_ref);
    result.ref_norm = std::max(result.ref_norm, ref_norm);
    if (sums.ref_nonfinite != 0 && result.failure.empty()) {
      result.failure = "the float64 reference of " + bench.spec(bench.outputs()[j]).name + " has " +
                       std::to_string(sums.ref_nonfinite) +
                       " non-finite elements (inputs or constants out of range)";
    }
    if (sums.unwritten == 0 && sums.nonfinite == 0) {
      const double diff = std::sqrt(sums.sum_sq_diff);
      const double rel = ref_norm > 0.0 ? diff / ref_norm : diff;
      if (!(rel <= worst_rel)) worst_rel = rel;  // NaN wins
    }
  }
  result.out_of_bounds = out_of_bounds;
  if (!result.failure.empty()) return result;
  if (result.unwritten == 0 && result.nonfinite == 0) result.rel_err = worst_rel;

  if (result.unwritten != 0) {
    result.failure = std::to_string(result.unwritten) + " of " + std::to_string(result.elements) +
                     " output elements not written";
  } else if (result.nonfinite != 0) {
    result.failure = std::to_string(result.nonfinite) + " output elements are NaN or Inf";
  } else if (result.out_of_bounds != 0) {
    result.failure = std::to_string(result.out_of_bounds) +
                     " elements written outside the outputs (guard bands or gaps changed)";
  } else if (!result.inputs_unchanged) {
    result.failure = "the kernel modified its inputs";
  } else if (!result.final_at_return) {
    result.failure = "outputs changed after the stream was synchronized (work left running on "
                     "another stream or thread)";
  } else if (!(*result.rel_err <= tolerance)) {
    result.failure = "relative error " + format_number(*result.rel_err) + " above tolerance " +
                     format_number(tolerance);
  }
  result.passed = result.failure.empty();
  return result;
}

// A baseline verified on the current inputs; its call prepared for timing when it ran.
BaselineResult verify_baseline(VerifyBackend& backend, Workbench& bench, VerifyCase& verify_case,
                               const std::string& name, const VerifyOptions& options,
                               ProcessGuard* guard, std::optional<Baseline>& made, Prepared& prepared) {
  BaselineResult result;
  result.name = name;
  try {
    set_phase(guard, "setting up baseline " + name);
    made = verify_case.make_baseline(name, backend, bench.buffers());
    result.computes = made->computes;
    result.fused = made->fused;
    result.config = made->config;
    set_phase(guard, "verifying baseline " + name);
    const int query = prepare(backend, made->call, *made->computation, bench.buffers(), prepared);
    if (query != FACT_OK) throw std::runtime_error("workspace query returned " + status_text(query));
    int status = FACT_OK;
    const CheckPlan plan{"primary", -1, StreamId::Primary, made->computation.get()};
    CheckResult check = run_check(backend, bench, prepared, plan, bench.seed(), verify_case.tolerance(), options,
                                  verify_case.reference_after_call(), &status);
    if (status != FACT_OK) throw std::runtime_error("returned " + status_text(status));
    result.check = check;
    result.status = check.passed ? "ok" : "wrong";
    if (!check.passed) result.error = check.failure;
  } catch (const std::exception& e) {
    made.reset();
    result.status = "error";
    result.error = e.what();
  }
  return result;
}

}  // namespace

uint64_t fresh_seed() {
  std::random_device device;
  const uint64_t seed = (uint64_t{device()} << 32) ^ device();
  return seed == 0 ? 1 : seed;
}

void verify_and_time(VerifyBackend& backend, VerifyCase& verify_case, const CallFunction& kernel,
                     const VerifyOptions& options, ProcessGuard* guard, RunReport& report) {
  report.timing["base_seed"] = options.base_seed;
  set_phase(guard, "allocating the buffers");
  Workbench bench(backend, verify_case.buffers(), options.guard_bytes);
  const double tolerance = verify_case.tolerance();
  const std::shared_ptr<const Computation> given = verify_case.computation();
  report.status = RunStatus::Ok;

  uint64_t seed = check_seed(options.base_seed, 0);
  bench.fill_inputs(verify_case, seed, 0);
  Prepared prepared_kernel;
  if (kernel) {
    set_phase(guard, "querying the workspace size");
    const int query = prepare(backend, kernel, *given, bench.buffers(), prepared_kernel);
    if (query != FACT_OK) {
      report.status = query == FACT_ERR_CANNOT_IMPLEMENT ? RunStatus::CannotImplement : RunStatus::Error;
      report.error = "workspace query returned " + status_text(query);
      return;
    }
    report.workspace_bytes = int64_t(prepared_kernel.workspace_bytes);

    set_phase(guard, "verifying the kernel");
    std::vector<CheckPlan> plan = {{"primary", 0, StreamId::Primary, given.get()},
                                   {"repoison", -1, StreamId::Primary, given.get()},
                                   {"fresh_inputs", 1, StreamId::Primary, given.get()},
                                   {"other_stream", -1, StreamId::Secondary, given.get()}};
    const std::optional<VariedCheck> varied = verify_case.varied();
    if (varied) plan.push_back({varied->name, 2, StreamId::Primary, varied->computation.get()});
    uint64_t last_output = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      const CheckPlan& step = plan[i];
      if (step.inputs_index > 0) {
        seed = check_seed(options.base_seed, step.inputs_index);
        bench.fill_inputs(verify_case, seed, step.inputs_index);
      }
      int status = FACT_OK;
      CheckResult check = run_check(backend, bench, prepared_kernel, step, seed, tolerance, options,
                                   verify_case.reference_after_call(), &status);
      if (status != FACT_OK) {
        report.checks.push_back(check);
        report.status = i == 0 && status == FACT_ERR_CANNOT_IMPLEMENT ? RunStatus::CannotImplement : RunStatus::Error;
        report.error = i == 0 && status == FACT_ERR_CANNOT_IMPLEMENT
                           ? "kernel returned " + status_text(status)
                           : "check " + step.name + ": kernel returned " + status_text(status);
        return;
      }
      const uint64_t output = bench.output_checksum();
      if (check.passed && step.name == "repoison" && verify_case.deterministic() && output != last_output) {
        check.passed = false;
        check.failure = "not bit-identical to the run before on the same inputs";
      }
      last_output = output;
      if (check.rel_err) report.rel_err = std::max(report.rel_err.value_or(0.0), *check.rel_err);
      report.checks.push_back(check);
      if (!check.passed) {
        report.status = RunStatus::Wrong;
        report.error = "check " + step.name + " failed: " + check.failure;
        return;
      }
      if (i == 0) {
        if (std::optional<AccuracyPeer> peer = verify_case.accuracy_peer(backend, bench.buffers())) {
          set_phase(guard, "measuring " + peer->baseline.name + "'s error");
          Prepared prepared_peer;
          int peer_status = prepare(backend, peer->baseline.call, *peer->baseline.computation,
                                    bench.buffers(), prepared_peer);
          CheckResult peer_check;
          if (peer_status == FACT_OK) {
            const CheckPlan peer_plan{peer->baseline.name, -1, StreamId::Primary, peer->baseline.computation.get()};
            peer_check = run_check(backend, bench, prepared_peer, peer_plan, seed, tolerance, options,
                                   verify_case.reference_after_call(), &peer_status);
          }
          if (peer_status == FACT_OK && peer_check.rel_err && check.rel_err) {
            AccuracyComparison cmp;
            cmp.against = peer->baseline.name;
            cmp.rel_err = *peer_check.rel_err;
            cmp.ratio = cmp.rel_err > 0 ? *check.rel_err / cmp.rel_err : (*check.rel_err > 0 ? 1e30 : 1.0);
            cmp.limit = peer->ratio_limit;
            cmp.within_limit = cmp.ratio <= peer->ratio_limit;
            report.accuracy = cmp;
          }
          set_phase(guard, "verifying the kernel");
        }
      }
    }
  }

  std::vector<std::optional<Baseline>> made(options.baselines.size());
  std::vector<Prepared> prepared(options.baselines.size());
  for (size_t b = 0; b < options.baselines.size(); ++b) {
    report.baselines.push_back(verify_baseline(backend, bench, verify_case, options.baselines[b], options,
                                               guard, made[b], prepared[b]));
  }
  if (options.verify_only) {
    set_phase(guard, "writing the report");
    return;
  }

  set_phase(guard, "timing");
  report.timing.update(backend.describe_timing(options.timing));
  const ArgBytes kernel_args = given->arguments(bench.buffers());
  std::vector<std::function<void(void*)>> launches;
  std::vector<std::string> who;
  if (kernel) {
    launches.push_back([&](void* stream) {
      const int status = prepared_kernel.call(kernel_args.header(), prepared_kernel.workspace.get(), nullptr, stream);
      if (status != FACT_OK) {
        throw std::runtime_error("kernel returned " + status_text(status) + " while being timed");
      }
    });
    who.push_back("");
  }
  std::vector<ArgBytes> baseline_args;
  baseline_args.reserve(made.size());
  for (size_t b = 0; b < made.size(); ++b) {
    if (!made[b]) continue;
    baseline_args.push_back(made[b]->computation->arguments(bench.buffers()));
    const ArgBytes* args = &baseline_args.back();
    const Prepared* callee = &prepared[b];
    // The verified call, or the same work without the copy into the outputs (Baseline::timed).
    const CallFunction* timed = made[b]->timed ? &made[b]->timed : &callee->call;
    const std::string name = made[b]->name;
    launches.push_back([args, callee, timed, name](void* stream) {
      const int status = (*timed)(args->header(), callee->workspace.get(), nullptr, stream);
      if (status != FACT_OK) {
        throw std::runtime_error("baseline " + name + " returned " + status_text(status) + " while being timed");
      }
    });
    who.push_back(made[b]->name);
  }
  if (launches.empty()) return;
  const std::vector<TimingStats> stats = backend.time(launches, options.timing);
  const double flops = verify_case.flops();
  for (size_t i = 0; i < stats.size(); ++i) {
    std::optional<double> tflops;
    if (flops > 0) tflops = tflops_per_s(flops, stats[i].median);
    if (who[i].empty()) {
      report.ms = stats[i];
      report.tflops = tflops;
      continue;
    }
    for (BaselineResult& b : report.baselines) {
      if (b.name == who[i]) {
        b.ms = stats[i];
        b.tflops = tflops;
      }
    }
  }
  set_phase(guard, "writing the report");
}

}  // namespace fact::runtime
