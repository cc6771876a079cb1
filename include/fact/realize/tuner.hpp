// The auto-tuner. For one problem (of any kind) in one precision mode:
//
//   1. stored choice: the tuning database holds a choice for exactly this key → rebuild it (a
//      kernel-cache hit in the normal case) and return it without sweeping; with baselines or
//      `remeasure` it is timed again first, and a stored choice that no longer builds or
//      verifies is dropped and the space swept again.
//   2. sweep: enumerate the pattern's pruned parameter space, build every configuration through
//      the build driver (parallel, cached; `prebuild` builds the sweeps of many problems in one
//      go beforehand), then run each built one in a child process in the
//      fixed order can_implement → verify → time. A configuration that fails to compile,
//      cannot implement the problem, computes wrong numbers, crashes or hangs is excluded with
//      its reason; the fastest verified one (median time) wins and is stored in the database.
//   3. baselines (optional): the winner is run once more together with the requested library
//      baselines, so that the comparison comes from one process, same inputs, same run.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/problem/problem.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/candidate_runner.hpp"
#include "fact/realize/kernel_spec.hpp"
#include "fact/realize/param_space.hpp"
#include "fact/realize/tuning_db.hpp"

namespace fact::realize {

// Where candidates come from: a realizer's problem class, its pruned parameter space, the
// rendered source + compile command of each configuration, and what a tuning key needs.
// RealizerSource (realizer_source.hpp) asks the registered realizers; tests provide their own.
class CandidateSource {
 public:
  virtual ~CandidateSource() = default;
  // The problem class (dtypes, layouts, math, epilogue; default tuning parameters) that realizes
  // `problem` in `precision`. Throws std::invalid_argument when no realizer takes it.
  virtual KernelSpec problem_class(const Problem& problem, core::PrecisionMode precision) = 0;
  // The configurations to try, pruned (nothing that cannot fit or cannot run on the target),
  // most promising first, with the pruned ones and why. `space`: "default" or "exhaustive".
  virtual ParamSpace candidates(const KernelSpec& problem_class, const Problem& problem,
                                const std::string& space) = 0;
  // The build job (content key, source, entry symbol, compile command) for one configuration.
  // Throws when it cannot be rendered.
  virtual BuildJob build_job(const KernelSpec& spec) = 0;
  // The tuning key of `problem` realized with `problem_class`.
  virtual TuningKey tuning_key(const KernelSpec& problem_class, const Problem& problem,
                               core::PrecisionMode precision, const std::string& cutlass_version) = 0;
  // The kernel family of a spec (spread_selection keeps one of each when a sweep is cut).
  virtual std::string family(const KernelSpec& spec) = 0;
};

// `count` configurations of `specs` spread over kernel families (`family_of`: for GEMMs the
// mainloop schedule, tile scheduler, split-K or not): the first member of every family (in order of first appearance),
// then the rest in the space's order with at most half of `count` from one family; the result
// in the space's order. A cut space then still holds e.g. the stream-K variants a large-K
// problem needs, and otherwise follows the space's strongest-first order.
std::vector<KernelSpec> spread_selection(const std::vector<KernelSpec>& specs, size_t count,
                                         const std::function<std::string(const KernelSpec&)>& family_of);

struct TuneRequest {
  Problem problem;
  core::PrecisionMode precision = core::PrecisionMode::Native;
  std::string space = "default";
  size_t max_candidates = 0;         // 0: the whole pruned space; else spread_selection of it
  bool force = false;                // ignore the stored choice: sweep again
  bool reuse_bucket = false;         // on a miss, first try the nearest tuned shape of the bucket
  bool remeasure = false;            // stored choice: time it again (implied by baselines)
  std::vector<std::string> baselines;  // e.g. {"cublas"}: timed with the winner, same run
  std::chrono::milliseconds run_timeout{std::chrono::minutes(2)};  // per candidate run
  std::filesystem::path work_dir;    // runner reports per candidate; empty: a temporary folder
  bool show_progress = true;
  util::Console* console = nullptr;  // where the progress goes; nullptr: stderr
  std::string cutlass_version;       // empty: the CUTLASS version this build was configured with
};

struct CandidateOutcome {
  KernelSpec spec;
  std::string config;  // spec.name()
  std::string key;     // kernel cache key
  CandidateStatus status = CandidateStatus::Error;
  std::string reason;  // why excluded (empty when ok)
  std::optional<Timing> ms;
  std::optional<double> tflops;
  std::optional<double> rel_err;
  double compile_seconds = 0.0;
  std::filesystem::path library;
  bool best = false;

  nlohmann::json to_json() const;
};

struct TuneResult {
  TuningKey key;
  Problem problem;
  core::PrecisionMode precision = core::PrecisionMode::Native;
  std::string origin;  // "sweep", "database" (stored choice), "bucket" (nearest tuned shape)
  std::vector<CandidateOutcome> candidates;  // every configuration considered, in space order
  std::optional<CandidateOutcome> best;      // the winner (also flagged in `candidates`)
  std::vector<BaselineMeasurement> baselines;  // measured in the winner's final run
  std::optional<TuningRecord> record;        // what the database holds for the key now
  nlohmann::json device = nlohmann::json::object();
  std::vector<std::string> notes;            // what happened beyond the table, for reports
  double seconds = 0.0;

  bool ok() const { return best.has_value(); }
  // Readable name of the problem: "gemm_bias_65536x2304x768_bf16_native" (the kind's fusion and
  // shape, the dtype, the precision).
  std::string problem_name() const;
  nlohmann::json to_json() const;
};

class Tuner {
 public:
  Tuner(CandidateSource& source, BuildDriver& builder, CandidateRunner& runner, TuningDb& db);

  // Throws std::invalid_argument when the source cannot realize the problem; every candidate
  // failure is an outcome, never an exception.
  TuneResult tune(const TuneRequest& request);

  // Builds, in ONE call of the build driver (parallel over all its jobs), the sweep candidates
  // of every request that will sweep: no stored choice for its key (or `force`), and no bucket
  // choice to try first. The builds land in the kernel cache, so each request's tune() then
  // finds its candidates built and only runs them: a model's distinct problems compile side by
  // side instead of one problem's few candidates at a time. Requests the source cannot realize
  // or render are skipped (their tune() reports why). Returns the number of distinct build jobs
  // submitted (0: nothing to build).
  size_t prebuild(const std::vector<TuneRequest>& requests);

 private:
  // The configurations a sweep of `request` tries: the pruned space of `problem_class`, cut by
  // spread_selection to max_candidates; what was pruned or cut goes to `notes` (may be null).
  std::vector<KernelSpec> sweep_specs(const TuneRequest& request, const KernelSpec& problem_class,
                                      std::vector<std::string>* notes);
  // Whether this request's sweep would try more configurations than the stored choice was
  // picked from (a deeper --tune than the run that stored it): then it sweeps again.
  bool deeper_than_stored(const TuningRecord& stored, const TuneRequest& request, const KernelSpec& problem_class);
  CandidateOutcome run_candidate(const KernelSpec& spec, const BuildJob& job, const BuildOutcome& built,
                                 const TuneRequest& request, const std::vector<std::string>& baselines,
                                 const std::filesystem::path& work_dir, RunResult* run_result);
  CandidateSource& source_;
  BuildDriver& builder_;
  CandidateRunner& runner_;
  TuningDb& db_;
};

}  // namespace fact::realize
