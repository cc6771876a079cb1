// fact::engine::verify_call (fact_verify_call in the C API): the one verifier on a subgraph-ABI
// call given as data, on the host backend. A correct kernel passes every check and is timed; a
// wrong one, a lazy one and one that writes between a strided result's elements are caught; the
// reference is computed only after each call, from the operands as they are in memory then.
#include <gtest/gtest.h>

#include <cstring>

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
