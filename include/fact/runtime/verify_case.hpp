// What a problem kind supplies to the one verifier (verifier.hpp): the buffers of a call, how to
// fill its inputs for a seed, what a call computes (its argument image over the buffers and its
// float64 reference), and optionally named vendor baselines. The kind never allocates, poisons,
// checks or times: the verifier does, the same way for every kind, on a VerifyBackend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fact/core/fact_abi.h"
#include "fact/runtime/element_type.hpp"
#include "fact/runtime/verify_backend.hpp"

namespace fact::runtime {

// One buffer of a call. The verifier allocates `bytes` with guard bands on both sides (poisoned,
// checked after every call). Inputs are filled by the kind; outputs are poisoned before every
// call and their view [offset + Σ i_d · stride[d]] over `shape` is compared with the reference.
struct BufferSpec {
  std::string name;          // for reports: "A", "q", "result 0", ...
  bool output = false;       // written by the call (else only read, and must stay unchanged)
  size_t bytes = 0;          // the allocation (every element any view of the call addresses)
  ElementType type = ElementType::F32;
  // Outputs only: the logical view compared with the reference (elements, at most 8 dims).
  int64_t offset = 0;
  std::vector<int64_t> shape, stride;
  // Outputs only: the call may write the allocation's elements outside the view (a GEMM's D
  // with padded rows, whose padding columns the kernel writes: docs/plan.md "alloc_shape"); then
  // only the guard bands around the allocation are checked for stray writes, not the gaps.
  bool gaps_writable = false;
};

// Where the verifier put each buffer (in the order of VerifyCase::buffers()): the first byte
// of each allocation, guard bands excluded.
struct BufferSet {
  std::vector<void*> data;
  void* operator[](size_t i) const { return data.at(i); }
};

// The bytes of an argument image (the kind's ABI struct, FactCallHeader first), 8-byte aligned.
class ArgBytes {
 public:
  explicit ArgBytes(size_t bytes = 0) : words_((bytes + 7) / 8), bytes_(bytes) {}
  void* data() { return words_.data(); }
  const FactCallHeader* header() const { return reinterpret_cast<const FactCallHeader*>(words_.data()); }
  size_t size() const { return bytes_; }

 private:
  std::vector<uint64_t> words_;
  size_t bytes_ = 0;
};

// What one call computes on the buffers: the problem as given, with changed constants, or
// what a baseline computes (e.g. a GEMM without its epilogue).
class Computation {
 public:
  virtual ~Computation() = default;
  // The argument image of one call on `buffers`.
  virtual ArgBytes arguments(const BufferSet& buffers) const = 0;
  // Writes the float64 reference of every output into refs[j] (backend memory: the j-th output's
  // shape, dense, row-major) from the inputs now in `buffers`, computed from those same stored
  // inputs (not from higher-precision originals).
  virtual void reference(VerifyBackend& backend, const BufferSet& buffers,
                         const std::vector<double*>& refs) const = 0;
  // Everything the reference depends on besides the inputs (the verifier reuses a reference
  // while the inputs and this key are unchanged).
  virtual std::string reference_key() const = 0;
};

// A call of the FACT C ABI's shape: a size query when workspace_size is not null, else a run
// on `stream`; returns a FactStatus. A kernel library's entry is one; a baseline adapts a vendor
// library to it.
using CallFunction = std::function<int(const FactCallHeader* args, void* workspace,
                                       size_t* workspace_size, void* stream)>;

// A vendor implementation the kind registered under `name`, verified on the same buffers
// against the reference of what it computes, and timed interleaved with the kernel.
struct Baseline {
  std::string name;                          // as registered: "cublas", ...
  std::string computes;                      // what it computes, e.g. "gemm_bias"
  bool fused = false;                        // computes the whole problem
  std::string config;                        // algorithm, compute type (for reports)
  std::shared_ptr<const Computation> computation;
  CallFunction call;
  // What is timed, when it is not `call`: the same work without writing the case's outputs. A
  // baseline that computes into memory of its own (a framework's allocator) copies its results
  // into the outputs only so that `call` can be verified; that copy is not its work, so `timed`
  // leaves it out. Empty: `call` is timed.
  CallFunction timed;
  std::shared_ptr<void> state;               // handles and descriptors `call` uses
};

// A check with the problem's constants changed ("scalars" for GEMMs, "scale" for attention):
// a kernel that ignores a constant, or reads another's, fails it.
struct VariedCheck {
  std::string name;
  std::shared_ptr<const Computation> computation;
};

// A vendor implementation whose error on the primary inputs is reported beside the kernel's
// (strict GEMMs: cuBLAS SGEMM, "as accurate as the framework's float32 path"). Not a gate.
struct AccuracyPeer {
  Baseline baseline;
  double ratio_limit = 0;  // the kernel's error / the peer's within this: `within_limit`
};

// One problem of a kind, ready to verify.
class VerifyCase {
 public:
  virtual ~VerifyCase() = default;
  // The buffers of a call, inputs and outputs in any order (at least one output).
  virtual std::vector<BufferSpec> buffers() const = 0;
  // New input values for check `index` (0, 1, 2: the checks that take new inputs) from `seed`
  // (check_seed of the run's base seed), written into the input buffers, finished on return.
  // Each call must give other values than the last.
  virtual void fill_inputs(VerifyBackend& backend, const BufferSet& buffers, uint64_t seed, int index) = 0;
  // The problem as given.
  virtual std::shared_ptr<const Computation> computation() const = 0;
  // The constants-changed check, if the problem has constants.
  virtual std::optional<VariedCheck> varied() const { return std::nullopt; }
  // The relative-error bound ‖out − ref‖₂ / ‖ref‖₂ of every output (precision.hpp's table).
  virtual double tolerance() const = 0;
  // Useful floating-point operations of one call (TFLOP/s in the report; 0: none reported).
  virtual double flops() const { return 0.0; }
  // Whether the repoison check also requires a bit-identical output on the same inputs.
  virtual bool deterministic() const { return false; }
  // Whether the reference is computed only after each call (never reused, its buffers poisoned
  // before the call): no reference exists in memory while the kernel runs (agent-written kernels).
  virtual bool reference_after_call() const { return false; }
  // The baseline registered as `name` (ProblemKind::baselines()) for this problem, on `buffers`
  // (a vendor library may pick its algorithm by their addresses). Throws for a baseline that
  // cannot run it (reported as that baseline's error).
  virtual Baseline make_baseline(const std::string& name, VerifyBackend& backend, const BufferSet& buffers);
  // The accuracy peer, if the kind reports one for this problem.
  virtual std::optional<AccuracyPeer> accuracy_peer(VerifyBackend& backend, const BufferSet& buffers);
};

}  // namespace fact::runtime
