// fact::engine::verify_call (fact_verify_call in the C API): the one verifier on a subgraph-ABI
// call given as data, on the host backend. A correct kernel passes every check and is timed; a
// wrong one, a lazy one and one that writes between a strided result's elements are caught; the
// reference is computed only after each call, from the operands as they are in memory then. A
// caller's baseline reads the verifier's own input buffers, is verified once (writing the results),
// and is timed by the same timer interleaved with the kernel without copying into the results.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "fact/core/fact_subgraph_abi.h"
#include "fact/engine/call_verify.hpp"

namespace fact::engine {
namespace {

int mode = 0;   // 0 correct, 1 wrong element, 2 lazy (writes on the first call only), 3 into a gap
int calls = 0;

// y[i] = 2 · x[i] + 1 over float32 vectors; y strided by 2.
extern "C" int twice_plus_one(const FactCallHeader* h, void*, size_t* workspace_size, void*) {
  if (workspace_size) {
    *workspace_size = 0;
    return FACT_OK;
  }
  if (h->kind != fact_kind_id("subgraph") || h->size != sizeof(FactSubgraphArgs)) return FACT_ERR_INVALID_ARGS;
  const auto* a = reinterpret_cast<const FactSubgraphArgs*>(h);
  const FactTensor &x = a->operands[0], &y = a->results[0];
  ++calls;
  if (mode == 2 && calls > 1) return FACT_OK;
  for (int64_t i = 0; i < x.shape[0]; ++i) {
    static_cast<float*>(y.data)[i * y.stride[0]] = 2.0f * static_cast<const float*>(x.data)[i * x.stride[0]] + 1.0f;
  }
  if (mode == 1) static_cast<float*>(y.data)[0] += 1.0f;
  if (mode == 3) static_cast<float*>(y.data)[1] = 0.0f;
  return FACT_OK;
}

nlohmann::json request() {
  FactSubgraphArgs args{};
  args.header = {FACT_ABI_VERSION, fact_kind_id("subgraph"), uint32_t(sizeof args), 0};
  args.num_operands = 1;
  args.num_results = 1;
  args.operands[0] = {nullptr, FACT_DTYPE_F32, 1, {16}, {1}};
  args.results[0] = {nullptr, FACT_DTYPE_F32, 1, {16}, {2}};
  std::string hex;
  const auto* bytes = reinterpret_cast<const unsigned char*>(&args);
  for (size_t i = 0; i < sizeof args; ++i) {
    static const char digits[] = "0123456789abcdef";
    hex += digits[bytes[i] >> 4];
    hex += digits[bytes[i] & 15];
  }
  const size_t operand_data = offsetof(FactSubgraphArgs, operands) + offsetof(FactTensor, data);
  const size_t result_data = offsetof(FactSubgraphArgs, results) + offsetof(FactTensor, data);
  return {{"device", "host"},
          {"tolerance", 1e-6},
          {"seed", 5},
          {"settle_s", 0.0},
          {"timing", {{"warmup_runs", 1}, {"min_runs", 10}, {"max_runs", 10}, {"min_time_s", 0.0}}},
          {"call",
           {{"operands", {{{"value", "x"}, {"dtype", "float32"}, {"shape", {16}}, {"stride", {1}}}}},
            {"results", {{{"value", "y"}, {"dtype", "float32"}, {"shape", {16}}, {"stride", {2}}}}},
            {"args",
             {{"size", sizeof args},
              {"hex", hex},
              {"pointers",
               {{{"offset", operand_data}, {"from", "operand"}, {"index", 0}},
                {{"offset", result_data}, {"from", "result"}, {"index", 0}}}}}}}}};
}

struct Hooks {
  std::vector<int> filled;
  int references = 0;
  int calls_at_first_reference = -1;
  CallVerifyHooks hooks() {
    CallVerifyHooks h;
    h.fill = [this](int index, const std::vector<void*>& operands) {
      filled.push_back(index);
      for (int i = 0; i < 16; ++i) static_cast<float*>(operands[0])[i] = float(index * 100 + i) / 7.0f;
    };
    h.reference = [this](const std::vector<const void*>& operands, const std::vector<double*>& results) {
      if (references++ == 0) calls_at_first_reference = calls;
      for (int i = 0; i < 16; ++i) results[0][i] = 2.0 * double(static_cast<const float*>(operands[0])[i]) + 1.0;
    };
    return h;
  }
};

nlohmann::json run(int kernel_mode, Hooks& hooks) {
  mode = kernel_mode;
  calls = 0;
  return verify_call(request(), &twice_plus_one, hooks.hooks());
}

TEST(CallVerify, ACorrectKernelPassesAndIsTimed) {
  Hooks hooks;
  const nlohmann::json report = run(0, hooks);
  EXPECT_EQ(report.at("status"), "ok") << report.dump(1);
  EXPECT_EQ(report.at("checks").size(), 4u);
  EXPECT_EQ(report.at("ms").at("runs"), 10);
  EXPECT_EQ(hooks.filled, (std::vector<int>{0, 1}));
  EXPECT_EQ(hooks.calls_at_first_reference, 1);  // computed after the first call, not before
  EXPECT_EQ(hooks.references, 4);  // after every call: primary, repoison, fresh_inputs, other_stream
}

TEST(CallVerify, WrongLazyAndGapWritingKernelsAreCaught) {
  Hooks wrong, lazy, gap;
  nlohmann::json r = run(1, wrong);
  EXPECT_EQ(r.at("status"), "wrong");
  EXPECT_FALSE(r.at("checks").at("primary").at("passed").get<bool>());
  r = run(2, lazy);
  EXPECT_EQ(r.at("status"), "wrong");
  EXPECT_EQ(r.at("checks").at("repoison").at("unwritten"), 16);
  r = run(3, gap);
  EXPECT_EQ(r.at("status"), "wrong");
  EXPECT_EQ(r.at("checks").at("primary").at("out_of_bounds"), 1);
}

// A baseline that computes the call into memory of its own and sleeps `sleep_ms` (its work).
// Given the result buffers (the verifying call) it copies its results there, which takes
// `copy_ms` more; the timed runs are given none.
struct SleepingBaseline {
  double sleep_ms = 2.0;
  double copy_ms = 0.0;
  int calls = 0;
  int copies = 0;
  bool wrong = false;
  std::vector<void*> seen;  // the buffers the verifying call was given
  void operator()(const std::vector<void*>& operands, const std::vector<void*>& results, void* stream) {
    ++calls;
    if (stream != nullptr) throw std::runtime_error("the host has no streams");
    const float* x = static_cast<const float*>(operands.at(0));
    float own[16];
    for (int i = 0; i < 16; ++i) own[i] = 2.0f * x[i] + 1.0f + (wrong ? 1.0f : 0.0f);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms));
    if (results.empty()) return;  // a timed run: nothing of the verifier's is written
    ++copies;
    seen = operands;
    seen.insert(seen.end(), results.begin(), results.end());
    float* y = static_cast<float*>(results.at(0));
    for (int i = 0; i < 16; ++i) y[2 * i] = own[i];
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(copy_ms));
  }
};

TEST(CallVerify, ACallersBaselineIsVerifiedAndTimedBesideTheKernel) {
  Hooks hooks;
  SleepingBaseline baseline;
  baseline.copy_ms = 30.0;
  CallVerifyHooks h = hooks.hooks();
  h.baseline = [&baseline](const std::vector<void*>& o, const std::vector<void*>& r, void* s) { baseline(o, r, s); };
  mode = 0;
  calls = 0;
  const nlohmann::json report = verify_call(request(), &twice_plus_one, h);
  ASSERT_EQ(report.at("status"), "ok") << report.dump(1);
  const nlohmann::json& b = report.at("baselines").at("pytorch");  // the default name
  EXPECT_EQ(b.at("status"), "ok") << b.dump(1);
  EXPECT_TRUE(b.at("check").at("passed").get<bool>());  // its copy into the results was checked
  EXPECT_EQ(b.at("ms").at("runs"), 10);
  EXPECT_EQ(baseline.seen.size(), 2u);  // the operand's and the result's storage
  // One verifying call, one warmup run and the ten timed runs, like the kernel's; only the
  // verifying call was given the results to copy into.
  EXPECT_EQ(baseline.calls, 1 + 1 + 10);
  EXPECT_EQ(baseline.copies, 1);
  EXPECT_EQ(calls, 4 + 1 + 10);
  const double baseline_ms = b.at("ms").at("median").get<double>();
  const double kernel_ms = report.at("ms").at("median").get<double>();
  EXPECT_GE(baseline_ms, 2.0);      // the sleep, measured by the core's timer
  EXPECT_LT(baseline_ms, 2.0 + 25.0);  // without the 30 ms copy: the timed runs copy nothing
  EXPECT_LT(kernel_ms, 1.0);        // the kernel's time is its own, not the baseline's
  EXPECT_GT(baseline_ms / kernel_ms, 2.0);
}

TEST(CallVerify, AWrongOrFailingBaselineIsRecordedOnTheBaselineOnly) {
  Hooks hooks;
  SleepingBaseline wrong;
  wrong.sleep_ms = 0.0;
  wrong.wrong = true;
  CallVerifyHooks h = hooks.hooks();
  h.baseline_name = "slow_reference";
  h.baseline = [&wrong](const std::vector<void*>& o, const std::vector<void*>& r, void* s) { wrong(o, r, s); };
  mode = 0;
  calls = 0;
  nlohmann::json report = verify_call(request(), &twice_plus_one, h);
  EXPECT_EQ(report.at("status"), "ok") << report.dump(1);
  EXPECT_EQ(report.at("baselines").at("slow_reference").at("status"), "wrong");
  EXPECT_FALSE(report.at("ms").is_null());

  Hooks more;
  h = more.hooks();
  h.baseline = [](const std::vector<void*>&, const std::vector<void*>&, void*) {
    throw std::runtime_error("no torch");
  };
  calls = 0;
  report = verify_call(request(), &twice_plus_one, h);
  EXPECT_EQ(report.at("status"), "ok") << report.dump(1);
  EXPECT_EQ(report.at("baselines").at("pytorch").at("status"), "error");
  EXPECT_TRUE(report.at("baselines").at("pytorch").at("ms").is_null());
  EXPECT_FALSE(report.at("ms").is_null());
}

TEST(CallVerify, MalformedRequestsAreRefused) {
  Hooks hooks;
  nlohmann::json bad = request();
  bad["call"]["results"][0]["stride"] = nlohmann::json::array();
  EXPECT_THROW(verify_call(bad, &twice_plus_one, hooks.hooks()), std::invalid_argument);
  bad = request();
  bad["device"] = "tpu";
  EXPECT_THROW(verify_call(bad, &twice_plus_one, hooks.hooks()), std::invalid_argument);
}

}  // namespace
}  // namespace fact::engine
