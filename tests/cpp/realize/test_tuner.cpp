// The tuner's orchestration without a GPU: a fake candidate source whose "compiler" is a shell
// one-liner, and fake runners (in-process, and a shell script standing in for `fact
// run-kernel` as a real child process) that crash, hang, compute wrong numbers, refuse the
// problem or time fine, as each candidate's source says.
#include <atomic>
#include <chrono>
#include <map>

#include <gtest/gtest.h>

#include "build_test_support.hpp"
#include "fact/realize/candidate_runner.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/realize/tuner.hpp"
#include "fact/util/atomic_file.hpp"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::realize {
namespace {

using test::count_lines;
using test::fake_compiler;
using test::ScratchDir;

// What each fake configuration does, keyed by its tile N.
struct Behaviour {
  std::string outcome;  // "ok", "wrong", "cannot_implement", "crash", "hang", "error", "build_error", "c7510"
  double ms = 1.0;
};

// The tuner knows no kind: a GEMM problem stands in for any, the fake source's specs hold only
// the one parameter it decides by.
Problem square_problem(int64_t size) {
  gemm::GemmProblem p;
  p.m = p.n = p.k = size;
  p.a.dtype = p.b.dtype = p.d.dtype = graph::DType::BFloat16;
  p.b.layout = gemm::Layout::ColumnMajor;
  return gemm::to_problem(p);
}

KernelSpec fake_spec(int tile_n) {
  return KernelSpec("gemm", "fake", "tile_n" + std::to_string(tile_n), {{"tile_n", tile_n}});
}

int tile_n_of(const KernelSpec& spec) { return spec.params().at("tile_n").get<int>(); }

class FakeSource : public CandidateSource {
 public:
  FakeSource(std::map<int, Behaviour> behaviours, std::filesystem::path counter)
      : behaviours_(std::move(behaviours)), counter_(std::move(counter)) {}

  KernelSpec problem_class(const Problem&, core::PrecisionMode precision) override {
    if (precision == core::PrecisionMode::Tf32) throw std::invalid_argument("fake source: unsupported precision");
    return KernelSpec("gemm", "fake", "fake_class", nlohmann::json::object());
  }
  ParamSpace candidates(const KernelSpec&, const Problem&, const std::string&) override {
    ParamSpace space;
    for (const auto& [tile_n, behaviour] : behaviours_) space.candidates.push_back(fake_spec(tile_n));
    space.pruned.push_back({fake_spec(512), "needs more shared memory than the SM has"});
    return space;
  }
  TuningKey tuning_key(const KernelSpec& problem_class, const Problem& problem, core::PrecisionMode precision,
                       const std::string& cutlass_version) override {
    TuningKey key;
    key.kind = problem.kind;
    key.pattern = problem_class.pattern();
    key.dims = kind_of(problem).tuning_dims(problem.desc);
    key.problem_class = "fake";
    key.cutlass_version = cutlass_version;
    key.precision = precision;
    return key;
  }
  std::string family(const KernelSpec&) override { return "one"; }
  BuildJob build_job(const KernelSpec& spec) override {
    const Behaviour& b = behaviours_.at(tile_n_of(spec));
    BuildJob job;
    job.key = "cand_" + std::to_string(tile_n_of(spec)) + "_" + salt;
    job.label = "tile_n" + std::to_string(tile_n_of(spec));
    job.source = b.outcome + " " + std::to_string(b.ms) + "\n";
    job.entry_symbol = "fact_" + job.key;
    job.spec = spec.to_json();
    if (b.outcome == "build_error") {
      job.command = fake_compiler(counter_, "kernel.cu(3): error: no instance of CollectiveBuilder", 1);
    } else if (b.outcome == "c7510") {
      job.command = fake_compiler(counter_, "ptxas warning : (C7510) Potential Performance Loss: wgmma serialized");
    } else {
      job.command = fake_compiler(counter_);
    }
    return job;
  }
  void set(int tile_n, Behaviour b) { behaviours_[tile_n] = b; }
  std::string salt = "v1";

 private:
  std::map<int, Behaviour> behaviours_;
  std::filesystem::path counter_;
};

// Reads the "library" (the fake compiler copied the source there) to decide what to report.
class FakeRunner : public CandidateRunner {
 public:
  RunResult run(const RunRequest& request) override {
    ++runs;
    last_baselines = request.baselines;
    std::istringstream library(util::read_file(request.library));
    std::string outcome;
    double ms = 0;
    library >> outcome >> ms;
    if (!overrides.empty() && overrides.count(outcome)) outcome = overrides[outcome];
    nlohmann::json report = {{"schema", "fact.run/1"}, {"device", {{"name", "Fake H100"}}}};
    if (outcome == "crash") return interpret_run(-1, 11, false, 1.0, std::nullopt, "Segmentation fault\n");
    if (outcome == "hang") return interpret_run(-1, 9, true, 1.0, std::nullopt, "");
    report["status"] = outcome;
    if (outcome == "ok") {
      report["rel_err"] = 1e-3;
      report["ms"] = {{"median", ms}, {"min", ms * 0.9}, {"p10", ms * 0.95}, {"p90", ms * 1.05}, {"max", ms * 1.2}, {"runs", 50}};
      report["tflops"] = 2.0 * 4096.0 * 4096.0 * 4096.0 / (ms * 1e9);
    } else if (outcome == "wrong") {
      report["rel_err"] = 0.7;
      report["checks"] = {{"primary", {{"passed", false}, {"failure", "rel_err 0.7 > tolerance 0.02"}}}};
    } else if (outcome == "cannot_implement") {
      report["error"] = "can_implement: alignment of A";
    } else {
      report["error"] = "CUDA error: an illegal memory access was encountered";
    }
    if (!request.baselines.empty()) {
      report["baselines"] = {{"cublas", {{"status", "ok"}, {"ms", {{"median", 0.4}}}, {"rel_err", 2e-3}, {"fused", false}}},
                             {"cublaslt", {{"status", "ok"}, {"ms", {{"median", 0.36}}}, {"rel_err", 2e-3}, {"fused", true}}}};
    }
    int code = outcome == "ok" ? 0 : outcome == "wrong" ? 2 : outcome == "cannot_implement" ? 3 : 4;
    return interpret_run(code, 0, false, 1.0, report, "");
  }
  std::atomic<int> runs{0};
  std::vector<std::string> last_baselines;
  std::map<std::string, std::string> overrides;  // outcome -> replacement, to change behaviour between runs
};

class TunerTest : public ::testing::Test {
 protected:
  TunerTest() {
    options.jobs = 2;
    options.show_progress = false;
    options.compiler_identity = "fake";
  }
  TuneRequest request(int64_t size = 4096) {
    TuneRequest r;
    r.problem = square_problem(size);
    r.precision = core::PrecisionMode::Native;
    r.show_progress = false;
    r.cutlass_version = "4.2.0";
    r.work_dir = scratch / "runs";
    return r;
  }
  ScratchDir scratch;
  std::filesystem::path counter = scratch / "compiles.txt";
  KernelCache cache{scratch / "cache"};
  TuningDb db{scratch / "tuning_db.json"};
  BuildOptions options;
  FakeRunner runner;
};

const std::map<int, Behaviour> kEveryOutcome = {
    {16, {"ok", 0.50}},   {32, {"ok", 0.30}},         {48, {"wrong", 0.05}}, {64, {"cannot_implement"}},
    {80, {"crash"}},      {96, {"hang"}},             {112, {"error"}},      {128, {"build_error"}},
    {144, {"c7510"}},     {160, {"ok", 0.45}},
};

const CandidateOutcome& outcome_for(const TuneResult& result, const std::string& config) {
  for (const auto& c : result.candidates) {
    if (c.config == config) return c;
  }
  throw std::runtime_error("no candidate " + config);
}

TEST_F(TunerTest, ExcludesEveryFailureAndPicksTheFastestVerified) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  TuneResult result = tuner.tune(request());

  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result.origin, "sweep");
  EXPECT_EQ(result.best->config, "tile_n32");
  EXPECT_TRUE(outcome_for(result, "tile_n32").best);
  EXPECT_DOUBLE_EQ(result.best->ms->median, 0.30);
  ASSERT_EQ(result.candidates.size(), kEveryOutcome.size());
  EXPECT_EQ(outcome_for(result, "tile_n48").status, CandidateStatus::Wrong) << "fast but wrong never wins";
  EXPECT_NE(outcome_for(result, "tile_n48").reason.find("tolerance"), std::string::npos);
  EXPECT_EQ(outcome_for(result, "tile_n64").status, CandidateStatus::CannotImplement);
  EXPECT_EQ(outcome_for(result, "tile_n80").status, CandidateStatus::Crashed);
  EXPECT_NE(outcome_for(result, "tile_n80").reason.find("signal 11"), std::string::npos);
  EXPECT_EQ(outcome_for(result, "tile_n96").status, CandidateStatus::Hung);
  EXPECT_EQ(outcome_for(result, "tile_n112").status, CandidateStatus::Error);
  EXPECT_NE(outcome_for(result, "tile_n112").reason.find("illegal memory access"), std::string::npos);
  EXPECT_EQ(outcome_for(result, "tile_n128").status, CandidateStatus::BuildFailed);
  EXPECT_NE(outcome_for(result, "tile_n128").reason.find("CollectiveBuilder"), std::string::npos);
  EXPECT_EQ(outcome_for(result, "tile_n144").status, CandidateStatus::BuildFailed);
  EXPECT_NE(outcome_for(result, "tile_n144").reason.find("C7510"), std::string::npos);
  EXPECT_EQ(runner.runs.load(), 8) << "only built candidates are run";
  EXPECT_EQ(result.device.value("name", ""), "Fake H100");

  auto stored = db.find_exact(result.key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->config, "tile_n32");
  EXPECT_DOUBLE_EQ(stored->ms, 0.30);
  EXPECT_EQ(stored->candidates, 10);
  EXPECT_EQ(stored->verified, 3);
  EXPECT_EQ(stored->device, "Fake H100");
  EXPECT_EQ(tile_n_of(KernelSpec::from_json(stored->spec)), 32);
}

TEST_F(TunerTest, SecondRunReusesTheStoredChoiceAndTheCachedBinary) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  tuner.tune(request());
  int compiles = count_lines(counter), runs = runner.runs.load();

  auto start = std::chrono::steady_clock::now();
  TuneResult warm = tuner.tune(request());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(warm.ok());
  EXPECT_EQ(warm.origin, "database");
  EXPECT_EQ(warm.best->config, "tile_n32");
  EXPECT_DOUBLE_EQ(warm.best->ms->median, 0.30);
  EXPECT_EQ(warm.candidates.size(), 1u);
  EXPECT_EQ(count_lines(counter), compiles) << "the stored choice's binary comes from the kernel cache";
  EXPECT_EQ(runner.runs.load(), runs) << "without baselines or --remeasure nothing is run";
  EXPECT_LT(seconds, 1.0);
}

// A choice stored by a shallow tune (3 of 10 configurations) is tuned again when a deeper one
// is asked for (all 10), and the deeper choice is then reused.
TEST_F(TunerTest, ADeeperTuneThanTheStoredChoiceSweepsAgain) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  TuneRequest shallow = request();
  shallow.max_candidates = 3;
  TuneResult first = tuner.tune(shallow);
  ASSERT_TRUE(db.find_exact(first.key).has_value());
  EXPECT_EQ(db.find_exact(first.key)->candidates, 3);
  EXPECT_EQ(tuner.tune(shallow).origin, "database") << "the same depth reuses the stored choice";

  TuneResult deeper = tuner.tune(request());
  EXPECT_EQ(deeper.origin, "sweep");
  ASSERT_TRUE(deeper.ok());
  EXPECT_EQ(deeper.best->config, "tile_n32");
  EXPECT_EQ(db.find_exact(deeper.key)->candidates, 10);
  EXPECT_EQ(tuner.tune(request()).origin, "database");
  EXPECT_EQ(tuner.tune(shallow).origin, "database") << "a shallower ask reuses the deeper choice";
}

// A model's problems: prebuild compiles every sweep's candidates in one build (a configuration
// shared by two problems once), then each tune() finds them built and only runs them; problems
// with a stored choice, or one the source cannot realize, add nothing to build.
TEST_F(TunerTest, PrebuildCompilesEverySweepInOneBuildAndTuneOnlyRuns) {
  FakeSource source({{16, {"ok", 0.50}}, {32, {"ok", 0.30}}, {128, {"build_error"}}}, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  TuneRequest unsupported = request(1024);
  unsupported.precision = core::PrecisionMode::Tf32;  // the fake source refuses it
  EXPECT_EQ(tuner.prebuild({request(4096), request(2048), unsupported}), 3u)
      << "three configurations, shared by both problems";
  const int compiles = count_lines(counter);
  EXPECT_EQ(compiles, 3);
  EXPECT_EQ(runner.runs.load(), 0) << "prebuild runs nothing";

  for (int64_t size : {4096, 2048}) {
    TuneResult result = tuner.tune(request(size));
    ASSERT_TRUE(result.ok()) << size;
    EXPECT_EQ(result.origin, "sweep");
    EXPECT_EQ(result.best->config, "tile_n32");
    EXPECT_EQ(outcome_for(result, "tile_n128").status, CandidateStatus::BuildFailed);
  }
  EXPECT_EQ(count_lines(counter), compiles) << "tune() found every candidate (and the failure) built";
  EXPECT_EQ(runner.runs.load(), 4) << "two built candidates run per problem";

  EXPECT_EQ(tuner.prebuild({request(4096), request(2048)}), 0u) << "both stored: nothing to sweep";
  TuneRequest forced = request(4096);
  forced.force = true;
  EXPECT_EQ(tuner.prebuild({forced}), 3u) << "force sweeps again";
  EXPECT_EQ(count_lines(counter), compiles) << "from the kernel cache";
  TuneRequest near = request(3000);  // in 4096's bucket (BucketReuseTriesTheNearestTunedShapeFirst)
  near.reuse_bucket = true;
  EXPECT_EQ(tuner.prebuild({near}), 0u) << "a bucket's choice is tried before any sweep";
  near.reuse_bucket = false;
  EXPECT_EQ(tuner.prebuild({near}), 3u) << "without bucket reuse the new shape sweeps";
}

TEST_F(TunerTest, StoredChoiceIsRebuiltWhenItsBinaryWasEvicted) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  TuneResult first = tuner.tune(request());
  cache.remove(first.best->key);
  int compiles = count_lines(counter);
  TuneResult warm = tuner.tune(request());
  EXPECT_EQ(warm.origin, "database");
  EXPECT_EQ(count_lines(counter), compiles + 1);
  EXPECT_TRUE(std::filesystem::exists(warm.best->library));
}

TEST_F(TunerTest, StoredChoiceThatNoLongerVerifiesIsSweptAgain) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  tuner.tune(request());
  // The stored winner (tile_n32) now computes wrong numbers; the old runner-up should win.
  source.set(32, {"wrong", 0.30});
  source.salt = "v2";  // new source text: new keys, as a changed template would give
  TuneRequest again = request();
  again.remeasure = true;
  TuneResult result = tuner.tune(again);
  // The stored spec rebuilds under the new salt and is remeasured: it is wrong now.
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result.origin, "sweep");
  EXPECT_EQ(result.best->config, "tile_n160");
  ASSERT_FALSE(result.notes.empty());
  EXPECT_NE(result.notes.front().find("failed on this problem"), std::string::npos) << result.notes.front();
  EXPECT_EQ(db.find_exact(result.key)->config, "tile_n160");
}

TEST_F(TunerTest, ForceSweepsAgain) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  tuner.tune(request());
  int runs = runner.runs.load();
  TuneRequest forced = request();
  forced.force = true;
  TuneResult result = tuner.tune(forced);
  EXPECT_EQ(result.origin, "sweep");
  EXPECT_EQ(runner.runs.load(), runs + 8);
}

TEST_F(TunerTest, BaselinesAreMeasuredWithTheWinnerInOneRun) {
  FakeSource source({{16, {"ok", 0.5}}, {32, {"ok", 0.3}}}, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  TuneRequest with_baselines = request();
  with_baselines.baselines = {"cublas", "cublaslt"};
  TuneResult result = tuner.tune(with_baselines);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(runner.runs.load(), 3) << "two candidates, then the winner once more with the baselines";
  EXPECT_EQ(runner.last_baselines, (std::vector<std::string>{"cublas", "cublaslt"}));
  ASSERT_EQ(result.baselines.size(), 2u);
  const BaselineMeasurement* reference = reference_baseline(result);
  ASSERT_NE(reference, nullptr);
  EXPECT_EQ(reference->name, "cublaslt") << "the fused baseline is the one to beat";
  EXPECT_NE(format_tune_table(result).find("1.20x"), std::string::npos) << format_tune_table(result);

  // The warm run with baselines runs the stored winner once, with the baselines.
  TuneResult warm = tuner.tune(with_baselines);
  EXPECT_EQ(warm.origin, "database");
  EXPECT_EQ(runner.runs.load(), 4);
  EXPECT_EQ(warm.baselines.size(), 2u);

  // Only the baselines the problem's kind registered reach the runner (ProblemKind::baselines).
  TuneRequest foreign = request();
  foreign.baselines = {"cudnn", "cublas"};
  tuner.tune(foreign);
  EXPECT_EQ(runner.runs.load(), 5);
  EXPECT_EQ(runner.last_baselines, (std::vector<std::string>{"cublas"}));
}

TEST_F(TunerTest, NothingVerifiedStoresNothing) {
  FakeSource source({{16, {"wrong"}}, {32, {"build_error"}}, {48, {"crash"}}}, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  TuneResult result = tuner.tune(request());
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(db.find_exact(result.key).has_value());
  EXPECT_FALSE(result.record.has_value());
  EXPECT_FALSE(result.notes.empty());
}

TEST_F(TunerTest, UnsupportedProblemThrows) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  TuneRequest bad = request();
  bad.precision = core::PrecisionMode::Tf32;  // the fake source takes no tf32 problem
  EXPECT_THROW(tuner.tune(bad), std::invalid_argument);
}

TEST_F(TunerTest, BucketReuseTriesTheNearestTunedShapeFirst) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  tuner.tune(request(4096));
  int runs = runner.runs.load();
  TuneRequest unseen = request(3000);
  unseen.reuse_bucket = true;
  TuneResult result = tuner.tune(unseen);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result.origin, "bucket");
  EXPECT_EQ(result.best->config, "tile_n32");
  EXPECT_EQ(runner.runs.load(), runs + 1) << "a borrowed choice is verified on the new shape";
}

TEST_F(TunerTest, ReportHasEveryConfigurationAndNamesThePlotCommand) {
  FakeSource source(kEveryOutcome, counter);
  BuildDriver builder(cache, options);
  Tuner tuner(source, builder, runner, db);
  TuneResult result = tuner.tune(request());
  TuneReportFiles files = write_tune_report(result, scratch / "report");
  std::string md = util::read_file(files.markdown);
  EXPECT_NE(md.find("**tile_n32** ★"), std::string::npos) << md;
  EXPECT_NE(md.find("cannot_implement"), std::string::npos);
  EXPECT_NE(md.find("C7510"), std::string::npos);
  EXPECT_EQ(count_lines(files.csv), 1 + static_cast<int>(kEveryOutcome.size()));
  auto doc = nlohmann::json::parse(util::read_file(files.json));
  EXPECT_EQ(doc["candidates"].size(), kEveryOutcome.size());
  EXPECT_EQ(doc["best"]["config"], "tile_n32");
  // The engine draws nothing: the report names the Python command that draws the scatter.
  EXPECT_EQ(files.plot_command, "python -m fact.plots " + files.json.string());
  EXPECT_NE(md.find("Plot: `" + files.plot_command + "`"), std::string::npos) << md;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(files.json).replace_extension(".png")));
}

// `fact run-kernel` stood in for by a shell script: it reads the library's first word and
// behaves accordingly, so the real child-process path (spawn, time limit, kill, report file)
// is exercised.
class SubprocessRunnerTest : public ::testing::Test {
 protected:
  SubprocessRunnerTest() {
    script = scratch / "fake-fact";
    util::write_file_atomically(script, R"(#!/bin/sh
# argv: run-kernel --lib L --problem P --precision X [--baselines B] --json OUT
lib=""; out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) lib="$2"; shift ;;
    --json) out="$2"; shift ;;
  esac
  shift
done
what=$(cut -d' ' -f1 "$lib")
case "$what" in
  ok) printf '{"schema":"fact.run/1","status":"ok","rel_err":1e-6,"ms":{"median":0.25,"min":0.2,"p10":0.22,"p90":0.3,"max":0.4,"runs":20},"tflops":550.0,"device":{"name":"Script GPU"},"baselines":{}}' > "$out" ;;
  wrong) printf '{"schema":"fact.run/1","status":"wrong","error":"rel_err 0.5 > 0.02","rel_err":0.5}' > "$out"; exit 2 ;;
  crash) echo "about to crash"; kill -SEGV $$ ;;
  hang) sleep 30 ;;
  garbage) printf 'not json' > "$out"; exit 4 ;;
esac
)");
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  }
  RunResult run_with(const std::string& library_text, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto library = scratch / ("lib-" + library_text + ".so");
    util::write_file_atomically(library, library_text + " 0\n");
    RunRequest request;
    request.library = library;
    request.problem = square_problem(256);
    request.precision = core::PrecisionMode::Native;
    request.timeout = timeout;
    request.scratch_dir = scratch / ("run-" + library_text);
    return SubprocessRunner(script).run(request);
  }
  ScratchDir scratch;
  std::filesystem::path script;
};

TEST_F(SubprocessRunnerTest, OkReportIsParsed) {
  RunResult result = run_with("ok");
  EXPECT_EQ(result.status, CandidateStatus::Ok) << result.reason;
  ASSERT_TRUE(result.ms.has_value());
  EXPECT_DOUBLE_EQ(result.ms->median, 0.25);
  EXPECT_EQ(result.ms->runs, 20);
  EXPECT_DOUBLE_EQ(*result.tflops, 550.0);
  EXPECT_EQ(result.device["name"], "Script GPU");
}

TEST_F(SubprocessRunnerTest, WrongCrashHangAndGarbage) {
  RunResult wrong = run_with("wrong");
  EXPECT_EQ(wrong.status, CandidateStatus::Wrong);
  EXPECT_NE(wrong.reason.find("0.02"), std::string::npos);

  RunResult crashed = run_with("crash");
  EXPECT_EQ(crashed.status, CandidateStatus::Crashed);
  EXPECT_NE(crashed.reason.find("signal 11"), std::string::npos) << crashed.reason;
  EXPECT_NE(crashed.reason.find("about to crash"), std::string::npos) << crashed.reason;

  auto start = std::chrono::steady_clock::now();
  RunResult hung = run_with("hang", std::chrono::milliseconds(500));
  EXPECT_EQ(hung.status, CandidateStatus::Hung);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);

  RunResult garbage = run_with("garbage");
  EXPECT_EQ(garbage.status, CandidateStatus::Error);
  EXPECT_NE(garbage.reason.find("exit 4"), std::string::npos) << garbage.reason;
}

TEST_F(SubprocessRunnerTest, CommandLine) {
  RunRequest request;
  request.library = "/cache/k/lib.so";
  request.problem = square_problem(256);
  request.precision = core::PrecisionMode::Native;
  request.baselines = {"cublas", "cublaslt"};
  request.scratch_dir = "/tmp/x";
  request.timeout = std::chrono::seconds(120);
  auto argv = SubprocessRunner("/opt/fact").command_for(request);
  EXPECT_EQ(argv, (std::vector<std::string>{"/opt/fact", "run-kernel", "--lib", "/cache/k/lib.so", "--problem-json",
                                            "/tmp/x/problem.json", "--precision", "native", "--baselines",
                                            "cublas,cublaslt", "--timeout-s", "110", "--json", "/tmp/x/report.json"}));
}

TEST(InterpretRun, RunnerTimeoutAndMissingTiming) {
  nlohmann::json timed_out = {{"schema", "fact.run/1"}, {"status", "error"}, {"timed_out", true}, {"error", "kernel timed out after 10 s"}};
  EXPECT_EQ(interpret_run(5, 0, false, 60, timed_out, "").status, CandidateStatus::Hung);
  nlohmann::json no_timing = {{"schema", "fact.run/1"}, {"status", "ok"}};
  EXPECT_EQ(interpret_run(0, 0, false, 60, no_timing, "").status, CandidateStatus::Error);
  EXPECT_EQ(interpret_run(5, 0, false, 60, std::nullopt, "").status, CandidateStatus::Hung);
  nlohmann::json crashed = {{"schema", "fact.run/1"}, {"status", "crashed"}, {"error", "SIGSEGV in kernel launch"}};
  EXPECT_EQ(interpret_run(139, 0, false, 60, crashed, "").status, CandidateStatus::Crashed);
}

}  // namespace
}  // namespace fact::realize

namespace fact::realize {
namespace {

TEST(TunerSpreadSelection, KeepsEveryKernelFamilyInACutSpace) {
  // Six configurations of one family (data-parallel persistent), then a stream-K and a split-K.
  std::vector<KernelSpec> specs;
  for (int i = 0; i < 6; ++i) {
    specs.push_back(KernelSpec("gemm", "fake", "dp" + std::to_string(i), {{"family", "persistent"}, {"n", 64 * (i + 1)}}));
  }
  specs.push_back(KernelSpec("gemm", "fake", "streamk", {{"family", "streamk"}, {"n", 0}}));
  specs.push_back(KernelSpec("gemm", "fake", "split4", {{"family", "split"}, {"n", 0}}));
  auto family = [](const KernelSpec& s) { return s.params().at("family").get<std::string>(); };

  auto cut = spread_selection(specs, 4, family);
  ASSERT_EQ(cut.size(), 4u);
  EXPECT_EQ(cut[0].name(), "dp0");
  EXPECT_EQ(cut[1].name(), "dp1");
  EXPECT_EQ(cut[2].name(), "streamk");
  EXPECT_EQ(cut[3].name(), "split4");
  EXPECT_EQ(spread_selection(specs, 100, family).size(), specs.size());
  EXPECT_EQ(spread_selection(specs, 1, family).front().name(), "dp0");
}

}  // namespace
}  // namespace fact::realize
