#include <gtest/gtest.h>

#include "fact/runtime/run_report.hpp"

namespace fact::runtime {
namespace {

CheckResult check(const std::string& name, bool passed, std::optional<double> rel_err) {
  CheckResult c;
  c.name = name;
  c.passed = passed;
  c.rel_err = rel_err;
  c.max_abs_err = 0.25;
  c.ref_norm = 12.5;
  c.tolerance = 1e-5;
  c.elements = 4096;
  c.unwritten = passed ? 0 : 17;
  c.seed = 0xFFFFFFFFFFFFFFF1ull;
  c.stream = "secondary";
  if (!passed) c.failure = "17 of 4096 output elements not written";
  return c;
}

RunReport sample_report() {
  RunReport r;
  r.status = RunStatus::Ok;
  r.lib = "/tmp/k.so";
  r.entry = "fact_abc";
  r.kernel_name = "gemm_bf16_tn";
  r.problem = {{"fusion", "gemm_bias"}, {"shape", "64x64x64"}, {"m", 64}};
  r.precision = "native";
  r.tolerance = 2e-2;
  r.rel_err = 3e-3;
  r.checks = {check("primary", true, 3e-3), check("fresh_inputs", true, 2e-3)};
  r.accuracy = AccuracyComparison{"cublas", 1e-7, 3.0, 20.0, true};
  r.workspace_bytes = 1024;
  r.ms = summarize({1.0, 1.1, 0.9});
  r.tflops = 12.5;
  BaselineResult b;
  b.name = "cublaslt";
  b.status = "ok";
  b.computes = "gemm_bias";
  b.fused = true;
  b.config = "cublasLtMatmul";
  b.check = check("primary", true, 1e-3);
  b.ms = summarize({1.2});
  b.tflops = 10.0;
  r.baselines.push_back(b);
  BaselineResult e;
  e.name = "cublas";
  e.status = "error";
  e.error = "no algorithm";
  r.baselines.push_back(e);
  r.device = {{"name", "NVIDIA H100"}};
  r.timing = {{"method", "cuda_events"}};
  return r;
}

TEST(RunReport, StatusNamesAndExitCodes) {
  EXPECT_EQ(run_status_name(RunStatus::CannotImplement), "cannot_implement");
  for (RunStatus s : {RunStatus::Ok, RunStatus::Wrong, RunStatus::CannotImplement, RunStatus::Error}) {
    EXPECT_EQ(parse_run_status(run_status_name(s)), s);
  }
  EXPECT_THROW(parse_run_status("crashed"), std::invalid_argument);
  EXPECT_EQ(exit_code_for(RunStatus::Ok), 0);
  EXPECT_EQ(exit_code_for(RunStatus::Wrong), kExitWrong);
  EXPECT_EQ(exit_code_for(RunStatus::CannotImplement), kExitCannotImplement);
  EXPECT_EQ(exit_code_for(RunStatus::Error), kExitError);
  // Every outcome has its own code, and none is 1 (uncaught errors in main) or a CLI11 code.
  EXPECT_NE(kExitWrong, kExitError);
  EXPECT_NE(kExitTimeout, kExitError);
  EXPECT_NE(kExitTimeout, 1);
}

TEST(RunReport, JsonHasTheDocumentedShape) {
  const nlohmann::json j = to_json(sample_report());
  EXPECT_EQ(j.at("schema"), "fact.run/1");
  EXPECT_EQ(j.at("status"), "ok");
  EXPECT_EQ(j.at("kernel").at("entry"), "fact_abc");
  EXPECT_DOUBLE_EQ(j.at("rel_err").get<double>(), 3e-3);
  EXPECT_TRUE(j.at("checks").at("primary").at("passed").get<bool>());
  EXPECT_EQ(j.at("checks").at("fresh_inputs").at("stream"), "secondary");
  for (const char* key : {"median", "min", "p10", "p90", "max", "runs"}) {
    EXPECT_TRUE(j.at("ms").contains(key)) << key;
  }
  EXPECT_DOUBLE_EQ(j.at("tflops").get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(j.at("baselines").at("cublaslt").at("rel_err").get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(j.at("baselines").at("cublaslt").at("ms").at("median").get<double>(), 1.2);
  EXPECT_EQ(j.at("baselines").at("cublas").at("status"), "error");
  EXPECT_TRUE(j.at("baselines").at("cublas").at("ms").is_null());
  EXPECT_TRUE(j.at("accuracy").at("within_limit").get<bool>());
  EXPECT_EQ(j.at("accuracy").at("against"), "cublas");
}

TEST(RunReport, JsonRoundTrip) {
  const RunReport r = sample_report();
  const RunReport back = run_report_from_json(to_json(r));
  EXPECT_EQ(to_json(back), to_json(r));
  EXPECT_EQ(back.checks.size(), 2u);
  EXPECT_EQ(back.checks[0].seed, 0xFFFFFFFFFFFFFFF1ull);
  ASSERT_EQ(back.baselines.size(), 2u);
}

TEST(RunReport, UnmeasurableErrorIsNull) {
  RunReport r = sample_report();
  r.status = RunStatus::Wrong;
  r.rel_err.reset();
  r.checks = {check("primary", false, std::nullopt)};
  r.ms.reset();
  r.tflops.reset();
  const nlohmann::json j = to_json(r);
  EXPECT_TRUE(j.at("rel_err").is_null());
  EXPECT_TRUE(j.at("ms").is_null());
  EXPECT_TRUE(j.at("checks").at("primary").at("rel_err").is_null());
  EXPECT_EQ(j.at("checks").at("primary").at("failure"), "17 of 4096 output elements not written");
  const RunReport back = run_report_from_json(j);
  EXPECT_FALSE(back.rel_err.has_value());
  EXPECT_FALSE(back.checks[0].passed);
}

TEST(RunReport, RejectsOtherSchemas) {
  nlohmann::json j = to_json(sample_report());
  j["schema"] = "fact.tune/1";
  EXPECT_THROW(run_report_from_json(j), std::invalid_argument);
}

TEST(RunReport, SummaryLineNamesTheEssentials) {
  RunReport r = sample_report();
  r.error = "";
  const std::string line = summary_line(r);
  EXPECT_EQ(line.rfind("ok", 0), 0u) << line;
  EXPECT_NE(line.find("gemm_bf16_tn"), std::string::npos) << line;
  EXPECT_NE(line.find("rel_err 3.00e-03"), std::string::npos) << line;
  EXPECT_NE(line.find("1.0000 ms"), std::string::npos) << line;
  EXPECT_NE(line.find("| cublaslt 1.2000 ms"), std::string::npos) << line;
  EXPECT_NE(line.find("| cublas error"), std::string::npos) << line;
  r.status = RunStatus::Error;
  r.error = "timed out";
  EXPECT_NE(summary_line(r).find(": timed out"), std::string::npos);
}

}  // namespace
}  // namespace fact::runtime
