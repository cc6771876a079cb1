#include "fact/realize/tuner.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "fact/build_info.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/progress.hpp"

namespace fact::realize {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json optional_number(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }

json timing_json(const std::optional<Timing>& t) {
  if (!t) return nullptr;
  return {{"median", t->median}, {"min", t->min}, {"p10", t->p10}, {"p90", t->p90}, {"max", t->max}, {"runs", t->runs}};
}

json baseline_json(const BaselineMeasurement& b) {
  json j = {{"status", b.status},          {"ms", optional_number(b.ms)}, {"rel_err", optional_number(b.rel_err)},
            {"tflops", optional_number(b.tflops)}, {"fused", b.fused},   {"computes", b.computes}};
  if (!b.error.empty()) j["error"] = b.error;
  return j;
}

// A scratch folder that is removed with the object unless it was given by the caller.
class WorkDir {
 public:
  explicit WorkDir(const fs::path& requested) {
    if (requested.empty()) {
      path_ = fs::temp_directory_path() / ("fact-tune-" + util::unique_suffix());
      owned_ = true;
    } else {
      path_ = requested;
    }
    fs::create_directories(path_);
  }
  ~WorkDir() {
    std::error_code ignored;
    if (owned_) fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool owned_ = false;
};

// The database key of `request` realized with `problem_class` (the request's CUTLASS version,
// else the one this build was configured with): what tune() and prebuild() look up.
TuningKey key_of(CandidateSource& source, const TuneRequest& request, const KernelSpec& problem_class) {
  const std::string cutlass_version =
      request.cutlass_version.empty() ? build_info::kCutlassVersion : request.cutlass_version;
  return source.tuning_key(problem_class, request.problem, request.precision, cutlass_version);
}

}  // namespace

json CandidateOutcome::to_json() const {
  return {{"config", config},
          {"key", key},
          {"status", candidate_status_name(status)},
          {"reason", reason},
          {"ms", timing_json(ms)},
          {"tflops", optional_number(tflops)},
          {"rel_err", optional_number(rel_err)},
          {"compile_seconds", compile_seconds},
          {"best", best},
          {"spec", spec.to_json()}};
}

std::string TuneResult::problem_name() const {
  const ProblemKind& kind = kind_of(problem);
  std::string shape = kind.shape(problem.desc);
  std::replace(shape.begin(), shape.end(), '(', '_');
  shape.erase(std::remove(shape.begin(), shape.end(), ')'), shape.end());
  return kind.fusion(problem.desc) + "_" + shape + "_" +
         std::string(graph::dtype_label(kind.dtype(problem.desc))) + "_" + std::string(core::precision_name(precision));
}

json TuneResult::to_json() const {
  json candidate_list = json::array();
  for (const auto& c : candidates) candidate_list.push_back(c.to_json());
  json baseline_map = json::object();
  for (const auto& b : baselines) baseline_map[b.name] = baseline_json(b);
  return {{"problem", problem_name()},
          {"key", key.to_json()},
          {"precision", precision},
          {"origin", origin},
          {"best", best ? best->to_json() : json(nullptr)},
          {"baselines", baseline_map},
          {"candidates", candidate_list},
          {"device", device},
          {"notes", notes},
          {"seconds", seconds}};
}

std::vector<KernelSpec> spread_selection(const std::vector<KernelSpec>& specs, size_t count,
                                         const std::function<std::string(const KernelSpec&)>& family_of) {
  std::vector<std::string> family_order;
  std::map<std::string, std::vector<size_t>> members;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string family = family_of(specs[i]);
    if (!members.count(family)) family_order.push_back(family);
    members[family].push_back(i);
  }
  // The first member of every family, then the space's order with at most half of the cut from
  // one family (the space lists its strongest configurations first).
  std::vector<size_t> chosen;
  std::vector<bool> taken(specs.size(), false);
  std::map<std::string, size_t> taken_per_family;
  const size_t wanted = std::min(count, specs.size());
  for (const std::string& family : family_order) {
    if (chosen.size() >= wanted) break;
    const size_t first = members[family].front();
    chosen.push_back(first);
    taken[first] = true;
    ++taken_per_family[family];
  }
  const size_t family_cap = std::max<size_t>(1, (count + 1) / 2);
  for (size_t pass = 0; pass < 2 && chosen.size() < wanted; ++pass) {
    for (size_t i = 0; i < specs.size() && chosen.size() < wanted; ++i) {
      if (taken[i]) continue;
      const std::string family = family_of(specs[i]);
      if (pass == 0 && taken_per_family[family] >= family_cap) continue;
      chosen.push_back(i);
      taken[i] = true;
      ++taken_per_family[family];
    }
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<KernelSpec> selection;
  for (size_t i : chosen) selection.push_back(specs[i]);
  return selection;
}

Tuner::Tuner(CandidateSource& source, BuildDriver& builder, CandidateRunner& runner, TuningDb& db)
    : source_(source), builder_(builder), runner_(runner), db_(db) {}

CandidateOutcome Tuner::run_candidate(const KernelSpec& spec, const BuildJob& job, const BuildOutcome& built,
                                      const TuneRequest& request, const std::vector<std::string>& baselines,
                                      const fs::path& work_dir, RunResult* run_result) {
  CandidateOutcome outcome;
  outcome.spec = spec;
  outcome.config = job.label.empty() ? spec.name() : job.label;
  outcome.key = job.key;
  outcome.compile_seconds = built.compile_seconds;
  if (!built.usable()) {
    outcome.status = CandidateStatus::BuildFailed;
    outcome.reason = built.reason;
    return outcome;
  }
  outcome.library = built.library;
  RunRequest run;
  run.library = built.library;
  run.problem = request.problem;
  run.precision = request.precision;
  // Only the baselines the problem's kind registered (a GEMM's cuBLAS baselines are not an
  // attention problem's).
  const std::vector<std::string> registered = kind_of(request.problem).baselines();
  for (const std::string& name : baselines) {
    if (std::find(registered.begin(), registered.end(), name) != registered.end()) run.baselines.push_back(name);
  }
  run.timeout = request.run_timeout;
  run.scratch_dir = work_dir / (job.key + (run.baselines.empty() ? "" : ".baselines"));
  RunResult result = runner_.run(run);
  outcome.status = result.status;
  outcome.reason = result.reason;
  outcome.ms = result.ms;
  outcome.tflops = result.tflops;
  outcome.rel_err = result.rel_err;
  if (run_result) *run_result = std::move(result);
  return outcome;
}

std::vector<KernelSpec> Tuner::sweep_specs(const TuneRequest& request, const KernelSpec& problem_class,
                                           std::vector<std::string>* notes) {
  ParamSpace space = source_.candidates(problem_class, request.problem, request.space);
  std::vector<KernelSpec> specs = std::move(space.candidates);
  if (notes && !space.pruned.empty()) {
    std::string note = std::to_string(space.pruned.size()) + " configuration(s) pruned before compiling";
    if (specs.empty()) {
      note += ", e.g.:";
      for (size_t i = 0; i < std::min<size_t>(3, space.pruned.size()); ++i) {
        note += (i ? "; " : " ") + space.pruned[i].spec.name() + ": " + space.pruned[i].reason;
      }
    }
    notes->push_back(note);
  }
  if (request.max_candidates > 0 && specs.size() > request.max_candidates) {
    if (notes) {
      notes->push_back("space cut to " + std::to_string(request.max_candidates) + " of " +
                       std::to_string(specs.size()) + " configurations, spread over kernel families");
    }
    specs = spread_selection(specs, request.max_candidates,
                             [this](const KernelSpec& spec) { return source_.family(spec); });
  }
  return specs;
}

bool Tuner::deeper_than_stored(const TuningRecord& stored, const TuneRequest& request,
                               const KernelSpec& problem_class) {
  const size_t space = sweep_specs(request, problem_class, nullptr).size();
  return static_cast<size_t>(std::max(stored.candidates, 0)) < space;
}

size_t Tuner::prebuild(const std::vector<TuneRequest>& requests) {
  std::vector<BuildJob> jobs;
  std::set<std::string> keys;
  for (const TuneRequest& request : requests) {
    try {
      const KernelSpec problem_class = source_.problem_class(request.problem, request.precision);
      const TuningKey key = key_of(source_, request, problem_class);
      if (!request.force) {
        if (auto stored = db_.find_exact(key)) {
          if (!deeper_than_stored(*stored, request, problem_class)) continue;  // tune() reuses it
        } else if (request.reuse_bucket && db_.find_in_bucket(key)) {
          continue;  // tried before any sweep
        }
      }
      for (const KernelSpec& spec : sweep_specs(request, problem_class, nullptr)) {
        try {
          BuildJob job = source_.build_job(spec);
          if (keys.insert(job.key).second) jobs.push_back(std::move(job));
        } catch (const std::exception&) {
          // tune() renders it again and reports the reason
        }
      }
    } catch (const std::exception&) {
      // a problem the source cannot realize: tune() throws for it, the caller reports it
    }
  }
  if (!jobs.empty()) builder_.build(jobs);
  return jobs.size();
}

TuneResult Tuner::tune(const TuneRequest& request) {
  auto start = std::chrono::steady_clock::now();
  TuneResult result;
  result.problem = request.problem;
  result.precision = request.precision;
  KernelSpec problem_class = source_.problem_class(request.problem, request.precision);
  result.key = key_of(source_, request, problem_class);
  WorkDir work(request.work_dir);
  auto finish = [&]() -> TuneResult {
    result.record = db_.find_exact(result.key);
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(result);
  };
  auto adopt_device = [&](const RunResult& run) {
    if (run.device.is_object() && !run.device.empty()) result.device = run.device;
  };

  // Tries one known configuration (stored or from the bucket): builds it, runs it when asked
  // (or when `must_run`), and makes it the result when it is usable.
  auto try_known_choice = [&](const TuningRecord& record, const std::string& origin, bool must_run) -> bool {
    KernelSpec spec;
    BuildJob job;
    try {
      spec = KernelSpec::from_json(record.spec);
      job = source_.build_job(spec);
    } catch (const std::exception& e) {
      result.notes.push_back("stored choice " + record.config + " cannot be rendered any more (" + e.what() + ")");
      return false;
    }
    BuildOutcome built = builder_.build({job}).at(0);
    bool run_now = must_run || request.remeasure || !request.baselines.empty();
    CandidateOutcome outcome;
    if (!built.usable()) {
      result.notes.push_back("stored choice " + record.config + " no longer builds: " + built.reason);
      return false;
    }
    if (run_now) {
      RunResult run;
      outcome = run_candidate(spec, job, built, request, request.baselines, work.path(), &run);
      adopt_device(run);
      if (outcome.status != CandidateStatus::Ok) {
        result.notes.push_back("stored choice " + record.config + " failed on this problem (" +
                               std::string(candidate_status_name(outcome.status)) + ": " + outcome.reason + ")");
        return false;
      }
      result.baselines = run.baselines;
    } else {
      outcome.spec = spec;
      outcome.config = job.label.empty() ? spec.name() : job.label;
      outcome.key = job.key;
      outcome.status = CandidateStatus::Ok;
      outcome.library = built.library;
      outcome.compile_seconds = built.compile_seconds;
      outcome.ms = Timing{record.ms, record.ms, record.ms, record.ms, record.ms, 0};
      outcome.tflops = record.tflops;
      outcome.rel_err = record.rel_err;
      if (!record.device.empty()) result.device = json{{"name", record.device}};
      result.notes.push_back("stored choice of " + record.date + " reused without re-timing");
    }
    outcome.best = true;
    result.origin = origin;
    result.candidates = {outcome};
    result.best = outcome;
    return true;
  };

  if (!request.force) {
    if (auto stored = db_.find_exact(result.key)) {
      if (deeper_than_stored(*stored, request, problem_class)) {
        result.notes.push_back("the stored choice was tuned over " + std::to_string(stored->candidates) +
                               " configuration(s); tuning over more now, as asked");
      } else if (try_known_choice(*stored, "database", false)) {
        return finish();
      }
    } else if (request.reuse_bucket) {
      if (auto near = db_.find_in_bucket(result.key)) {
        std::string dims;
        for (size_t i = 0; i < near->key.dims.size(); ++i) dims += (i ? "x" : "") + std::to_string(near->key.dims[i]);
        result.notes.push_back("no choice stored for this shape; trying the one tuned for " + dims);
        if (try_known_choice(*near, "bucket", true)) return finish();
      }
    }
  }

  // Sweep.
  result.origin = "sweep";
  std::vector<KernelSpec> specs = sweep_specs(request, problem_class, &result.notes);
  if (specs.empty()) {
    result.notes.push_back("the pruned parameter space is empty for this problem");
    return finish();
  }

  std::vector<BuildJob> jobs;
  std::vector<std::optional<std::string>> render_errors(specs.size());
  std::vector<size_t> job_of_spec(specs.size(), SIZE_MAX);
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      jobs.push_back(source_.build_job(specs[i]));
      job_of_spec[i] = jobs.size() - 1;
    } catch (const std::exception& e) {
      render_errors[i] = std::string("cannot render: ") + e.what();
    }
  }
  std::vector<BuildOutcome> built = builder_.build(jobs);

  size_t runnable = std::count_if(built.begin(), built.end(), [](const BuildOutcome& b) { return b.usable(); });
  util::Console* console =
      request.show_progress && runnable > 0 ? (request.console ? request.console : &util::stderr_console()) : nullptr;
  util::ProgressBar progress("tune", runnable, console, {"configurations", "measured"});
  for (size_t i = 0; i < specs.size(); ++i) {
    if (render_errors[i]) {
      CandidateOutcome failed;
      failed.spec = specs[i];
      failed.config = specs[i].name();
      failed.status = CandidateStatus::BuildFailed;
      failed.reason = *render_errors[i];
      result.candidates.push_back(std::move(failed));
      continue;
    }
    const BuildJob& job = jobs[job_of_spec[i]];
    const BuildOutcome& outcome = built[job_of_spec[i]];
    RunResult run;
    CandidateOutcome candidate = run_candidate(specs[i], job, outcome, request, {}, work.path(), &run);
    if (outcome.usable()) {
      adopt_device(run);
      progress.advance(candidate.status != CandidateStatus::Ok, candidate.config);
    }
    result.candidates.push_back(std::move(candidate));
  }
  progress.finish();

  auto fastest = result.candidates.end();
  for (auto it = result.candidates.begin(); it != result.candidates.end(); ++it) {
    if (it->status != CandidateStatus::Ok || !it->ms) continue;
    if (fastest == result.candidates.end() || it->ms->median < fastest->ms->median) fastest = it;
  }
  if (fastest == result.candidates.end()) {
    result.notes.push_back("no configuration built, implemented and verified");
    return finish();
  }
  fastest->best = true;
  result.best = *fastest;
  int verified = static_cast<int>(std::count_if(result.candidates.begin(), result.candidates.end(),
                                                [](const CandidateOutcome& c) { return c.status == CandidateStatus::Ok; }));

  TuningRecord record;
  record.key = result.key;
  record.spec = fastest->spec.to_json();
  record.config = fastest->config;
  record.kernel_key = fastest->key;
  record.ms = fastest->ms->median;
  record.tflops = fastest->tflops.value_or(0.0);
  record.rel_err = fastest->rel_err.value_or(0.0);
  record.device = result.device.value("name", std::string());
  record.date = util::utc_timestamp();
  record.candidates = static_cast<int>(result.candidates.size());
  record.verified = verified;
  db_.store(record);

  if (!request.baselines.empty()) {
    BuildOutcome winner_build;
    winner_build.key = fastest->key;
    winner_build.status = BuildStatus::Cached;
    winner_build.library = fastest->library;
    winner_build.compile_seconds = fastest->compile_seconds;
    BuildJob winner_job;
    winner_job.key = fastest->key;
    winner_job.label = fastest->config;
    RunResult run;
    CandidateOutcome final_run =
        run_candidate(fastest->spec, winner_job, winner_build, request, request.baselines, work.path(), &run);
    if (final_run.status == CandidateStatus::Ok) {
      result.best->ms = final_run.ms;
      result.best->tflops = final_run.tflops;
      result.best->rel_err = final_run.rel_err;
      result.baselines = run.baselines;
    } else {
      result.notes.push_back("the winner's run with baselines failed (" +
                             std::string(candidate_status_name(final_run.status)) + ": " + final_run.reason +
                             "); its sweep timing is reported");
      result.baselines = run.baselines;
    }
  }
  return finish();
}

}  // namespace fact::realize
