// realize_matches with a tuning database: a stored choice for a GEMM's exact key replaces the
// default configuration (and the manifest says so), the bucket's nearest choice only when asked,
// and a stored choice that no longer renders leaves the default with a note. No GPU needed.
#include <filesystem>

#include <gtest/gtest.h>

#include "fact/build_info.hpp"
#include "fact/realize/realize_matches.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/realize/realizer_source.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/util/atomic_file.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::realize {
namespace {

namespace fs = std::filesystem;
using discover::Match;
using discover::MatchStatus;
using gemm::GemmProblem;
using graph::DType;

constexpr core::PrecisionMode kPrecision = core::PrecisionMode::Native;

GemmProblem bf16_linear(int64_t m, int64_t n, int64_t k) {
  return gemm::make_gemm_problem({m, n, k, 1}, DType::BFloat16, "", "tn");
}

// The default configuration of the problem's realizer.
KernelSpec default_spec_of(const GemmProblem& problem) {
  return RealizerSource().problem_class(gemm::to_problem(problem), kPrecision);
}

std::vector<Match> one_gemm(const GemmProblem& problem) {
  Match m;
  m.rule = "gemm";
  m.pattern = "gemm";
  m.status = MatchStatus::Accepted;
  m.problems = {gemm::to_problem(problem)};
  return {m};
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("fact_realize_tuning_lookup_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A configuration of the problem's tuning space other than the default one.
KernelSpec another_configuration(const GemmProblem& problem) {
  RealizerSource source;
  const KernelSpec problem_class = source.problem_class(gemm::to_problem(problem), kPrecision);
  const ParamSpace space = source.candidates(problem_class, gemm::to_problem(problem), "default");
  for (const KernelSpec& candidate : space.candidates) {
    if (candidate.name() != problem_class.name()) return candidate;
  }
  ADD_FAILURE() << "the space of " << problem.shape_string() << " has one configuration only";
  return problem_class;
}

TuningRecord record_for(const GemmProblem& stored_shape, const KernelSpec& chosen) {
  const KernelSpec default_spec = default_spec_of(stored_shape);
  TuningRecord record;
  record.key = RealizerSource().tuning_key(default_spec, gemm::to_problem(stored_shape), kPrecision,
                                           build_info::kCutlassVersion);
  record.spec = chosen.to_json();
  record.config = chosen.name();
  record.ms = 0.125;
  record.rel_err = 2e-3;
  record.device = "test device";
  return record;
}

RealizeOptions options_in(const fs::path& dir, const fs::path& db) {
  RealizeOptions options;
  options.precision = kPrecision;
  options.out_dir = dir / "kernels";
  options.tuning_db = db;
  return options;
}

nlohmann::json manifest_of(const RealizeOptions& options) {
  return nlohmann::json::parse(util::read_file(options.out_dir / "manifest.json"));
}

TEST(RealizeTuningLookup, StoredChoiceForTheExactKeyReplacesTheDefault) {
  const fs::path dir = scratch("exact");
  const GemmProblem problem = bf16_linear(1024, 1024, 1024);
  const KernelSpec chosen = another_configuration(problem);
  TuningDb db(dir / "tuning_db.json");
  db.store(record_for(problem, chosen));

  const RealizeOptions options = options_in(dir, db.file());
  const RealizeResult result = realize_matches(one_gemm(problem), options);
  ASSERT_EQ(result.kernels.size(), 1u);
  EXPECT_EQ(result.kernels[0].kernel.spec.name(), chosen.name());
  const nlohmann::json manifest = manifest_of(options);
  const nlohmann::json& gemm = manifest.at("calls")[0];
  EXPECT_EQ(gemm.at("config"), chosen.name());
  EXPECT_EQ(gemm.at("config_source"), "database");
  EXPECT_EQ(gemm.at("tuning_key"), record_for(problem, chosen).key.id());
  EXPECT_DOUBLE_EQ(gemm.at("tuned").at("ms").get<double>(), 0.125);
  EXPECT_EQ(gemm.at("tuned").at("shape"), "1024x1024x1024x1");
  EXPECT_EQ(manifest.at("kernels")[0].at("name"), chosen.name());
  EXPECT_EQ(manifest.at("tuning_db"), db.file().string());
}

TEST(RealizeTuningLookup, WithoutADatabaseOrAStoredKeyTheDefaultIsUsedAndNamed) {
  const fs::path dir = scratch("default");
  const GemmProblem problem = bf16_linear(1024, 1024, 1024);
  const std::string default_name = default_spec_of(problem).name();
  TuningDb db(dir / "tuning_db.json");
  db.store(record_for(bf16_linear(2048, 1024, 1024), another_configuration(problem)));

  RealizeOptions options = options_in(dir, db.file());
  realize_matches(one_gemm(problem), options);
  nlohmann::json gemm = manifest_of(options).at("calls")[0];
  EXPECT_EQ(gemm.at("config"), default_name);
  EXPECT_EQ(gemm.at("config_source"), "default");
  EXPECT_FALSE(gemm.contains("tuned"));

  options.tuning_db.reset();
  realize_matches(one_gemm(problem), options);
  gemm = manifest_of(options).at("calls")[0];
  EXPECT_EQ(gemm.at("config_source"), "default");
  EXPECT_FALSE(gemm.contains("tuning_key"));
}

TEST(RealizeTuningLookup, BucketChoiceOnlyWhenAsked) {
  const fs::path dir = scratch("bucket");
  const GemmProblem problem = bf16_linear(1000, 1024, 1024);  // bucket 1024x1024x1024
  const KernelSpec chosen = another_configuration(bf16_linear(1024, 1024, 1024));
  TuningDb db(dir / "tuning_db.json");
  db.store(record_for(bf16_linear(1024, 1024, 1024), chosen));

  RealizeOptions options = options_in(dir, db.file());
  realize_matches(one_gemm(problem), options);
  EXPECT_EQ(manifest_of(options).at("calls")[0].at("config_source"), "default");

  options.tuning_db_bucket = true;
  realize_matches(one_gemm(problem), options);
  const nlohmann::json gemm = manifest_of(options).at("calls")[0];
  EXPECT_EQ(gemm.at("config_source"), "bucket");
  EXPECT_EQ(gemm.at("config"), chosen.name());
  EXPECT_EQ(gemm.at("tuned").at("shape"), "1024x1024x1024x1");
}

TEST(RealizeTuningLookup, StoredChoiceThatNoLongerRendersLeavesTheDefaultWithANote) {
  const fs::path dir = scratch("unrenderable");
  const GemmProblem problem = bf16_linear(1024, 1024, 1024);
  gemm::GemmSpec broken_gemm = gemm::GemmSpec::of(default_spec_of(problem));
  broken_gemm.tile = {7, 7, 7};
  const KernelSpec broken = broken_gemm.to_kernel_spec();
  TuningDb db(dir / "tuning_db.json");
  db.store(record_for(problem, broken));

  const RealizeOptions options = options_in(dir, db.file());
  realize_matches(one_gemm(problem), options);
  const nlohmann::json gemm = manifest_of(options).at("calls")[0];
  EXPECT_EQ(gemm.at("config_source"), "default");
  EXPECT_EQ(gemm.at("config"), default_spec_of(problem).name());
  ASSERT_TRUE(gemm.contains("tuning_note"));
  EXPECT_NE(gemm.at("tuning_note").get<std::string>().find("not used"), std::string::npos);
}

}  // namespace
}  // namespace fact::realize
