// The one verification sequence (verifier.hpp) on the host backend, with a fake kind
// (fake_kind.hpp): a correct kernel passes every check and is timed; each broken kernel is
// caught by the check meant for it.
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fact/runtime/host_backend.hpp"
#include "fact/runtime/verifier.hpp"
#include "tests/cpp/runtime/fake_kind.hpp"

namespace fact::runtime::test {
namespace {

using Body = std::function<int(const FakeArgs& args, void* workspace)>;

// A kernel of the FACT C ABI's shape running `body`; the size query answers `workspace` bytes.
CallFunction kernel(Body body, size_t workspace = 0) {
  return [body, workspace](const FactCallHeader* h, void* ws, size_t* size, void*) {
    if (h->kind != kFakeKindId || h->size != sizeof(FakeArgs)) return int(FACT_ERR_INVALID_ARGS);
    if (size) {
      *size = workspace;
      return int(FACT_OK);
    }
    return body(*reinterpret_cast<const FakeArgs*>(h), ws);
  };
}

int correct(const FakeArgs& a, void*) {
  for (int64_t i = 0; i < a.n; ++i) a.y[i * a.y_stride] = a.scale * a.x[i];
  return FACT_OK;
}

VerifyOptions quick_options() {
  VerifyOptions o;
  o.base_seed = 42;
  o.settle_ns = 20'000'000;
  o.timing.warmup_runs = 1;
  o.timing.min_runs = 10;
  o.timing.max_runs = 20;
  o.timing.min_time_s = 0.0;
  return o;
}

RunReport verify(const CallFunction& k, FakeCase verify_case = FakeCase(), VerifyOptions options = quick_options()) {
  HostBackend backend;
  RunReport report;
  verify_and_time(backend, verify_case, k, options, nullptr, report);
  return report;
}

// The name of the check that failed, and the report's status.
std::string failed_check(const RunReport& r) {
  for (const CheckResult& c : r.checks) {
    if (!c.passed) return c.name;
  }
  return "";
}

TEST(VerifierHost, CorrectKernelPassesEveryCheckAndIsTimed) {
  const RunReport r = verify(kernel(correct));
  EXPECT_EQ(r.status, RunStatus::Ok) << r.error;
  std::vector<std::string> names;
  for (const CheckResult& c : r.checks) {
    names.push_back(c.name);
    EXPECT_TRUE(c.passed) << c.name << ": " << c.failure;
    EXPECT_EQ(c.unwritten, 0);
    EXPECT_EQ(c.out_of_bounds, 0);
    EXPECT_EQ(c.elements, 64);
    ASSERT_TRUE(c.rel_err);
    EXPECT_LE(*c.rel_err, 1e-7);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"primary", "repoison", "fresh_inputs", "other_stream", "scale"}));
  EXPECT_EQ(r.checks[3].stream, "secondary");
  EXPECT_EQ(r.checks[0].seed, r.checks[1].seed);
  EXPECT_NE(r.checks[1].seed, r.checks[2].seed);  // fresh inputs
  EXPECT_EQ(r.checks[2].seed, r.checks[3].seed);
  EXPECT_NE(r.checks[3].seed, r.checks[4].seed);
  ASSERT_TRUE(r.ms);
  EXPECT_GE(r.ms->runs, 10);
  EXPECT_EQ(r.timing.at("base_seed"), 42u);
  EXPECT_EQ(r.timing.at("method"), "steady_clock");
}

TEST(VerifierHost, VerifyOnlySkipsTiming) {
  VerifyOptions o = quick_options();
  o.verify_only = true;
  const RunReport r = verify(kernel(correct), FakeCase(), o);
  EXPECT_EQ(r.status, RunStatus::Ok);
  EXPECT_FALSE(r.ms);
}

TEST(VerifierHost, WrongInOneElementIsCaught) {
  const RunReport r = verify(kernel([](const FakeArgs& a, void* w) {
    correct(a, w);
    a.y[3 * a.y_stride] += 0.5f;
    return int(FACT_OK);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_EQ(failed_check(r), "primary");
  EXPECT_NE(r.checks[0].failure.find("relative error"), std::string::npos) << r.checks[0].failure;
  EXPECT_NEAR(r.checks[0].max_abs_err, 0.5, 1e-6);
}

TEST(VerifierHost, UntouchedOutputIsCaught) {
  const RunReport r = verify(kernel([](const FakeArgs&, void*) { return int(FACT_OK); }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_EQ(r.checks[0].unwritten, 64);
  EXPECT_FALSE(r.checks[0].rel_err);
}

TEST(VerifierHost, OutOfBoundsWritesAreCaught) {
  // Past the end of y, before it, and into a gap between its elements.
  for (int64_t where : {int64_t{127}, int64_t{-1}, int64_t{1}}) {
    const RunReport r = verify(kernel([where](const FakeArgs& a, void* w) {
      correct(a, w);
      a.y[where] = 0.0f;
      return int(FACT_OK);
    }));
    EXPECT_EQ(r.status, RunStatus::Wrong) << where;
    EXPECT_EQ(r.checks[0].out_of_bounds, 1) << where;
  }
}

// An output whose gaps the call may write (BufferSpec::gaps_writable: a GEMM's D with padded
// rows) passes with its gaps written; writes past its allocation are still caught.
TEST(VerifierHost, WritableGapsAreNotOutOfBounds) {
  FakeCase padded;
  padded.gaps_writable = true;
  for (int64_t where : {int64_t{1}, int64_t{127}, int64_t{-1}}) {
    const RunReport r = verify(kernel([where](const FakeArgs& a, void* w) {
      correct(a, w);
      a.y[where] = 0.0f;
      return int(FACT_OK);
    }), padded);
    if (where == 1) {
      EXPECT_EQ(r.status, RunStatus::Ok) << where;
      EXPECT_EQ(r.checks[0].out_of_bounds, 0);
    } else {
      EXPECT_EQ(r.status, RunStatus::Wrong) << where;
      EXPECT_EQ(r.checks[0].out_of_bounds, 1) << where;
    }
  }
}

TEST(VerifierHost, WritesAroundAnInputAreCaught) {
  const RunReport r = verify(kernel([](const FakeArgs& a, void* w) {
    correct(a, w);
    const_cast<float*>(a.x)[a.n] = 1.0f;
    return int(FACT_OK);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_GT(r.checks[0].out_of_bounds, 0);
}

TEST(VerifierHost, ModifiedInputsAreCaught) {
  const RunReport r = verify(kernel([](const FakeArgs& a, void* w) {
    correct(a, w);
    const_cast<float*>(a.x)[0] = 7.0f;
    return int(FACT_OK);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_FALSE(r.checks[0].inputs_unchanged);
}

TEST(VerifierHost, NaNIsCaught) {
  const RunReport r = verify(kernel([](const FakeArgs& a, void* w) {
    correct(a, w);
    a.y[0] = std::nanf("");
    return int(FACT_OK);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_EQ(r.checks[0].nonfinite, 1);
}

TEST(VerifierHost, NondeterminismIsCaughtOnRepoison) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  const auto noisy = kernel([calls](const FakeArgs& a, void* w) {
    correct(a, w);
    if (++*calls % 2 == 0) a.y[0] = std::nextafter(a.y[0], 10.0f);  // within tolerance, not bit-equal
    return int(FACT_OK);
  });
  const RunReport r = verify(noisy);
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_EQ(failed_check(r), "repoison");
  // A kind that does not ask for determinism accepts it.
  calls->store(0);
  EXPECT_EQ(verify(noisy, FakeCase(64, false)).status, RunStatus::Ok);
}

TEST(VerifierHost, ReplayedResultIsCaughtByFreshInputs) {
  auto cache = std::make_shared<std::vector<float>>();
  const RunReport r = verify(kernel([cache](const FakeArgs& a, void* w) {
    if (cache->empty()) {
      correct(a, w);
      for (int64_t i = 0; i < a.n; ++i) cache->push_back(a.y[i * a.y_stride]);
    } else {
      for (int64_t i = 0; i < a.n; ++i) a.y[i * a.y_stride] = (*cache)[size_t(i)];
    }
    return int(FACT_OK);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_EQ(failed_check(r), "fresh_inputs");
}

TEST(VerifierHost, SkippedWorkOnRepoisonIsCaught) {
  auto calls = std::make_shared<int>(0);
  const RunReport r = verify(kernel([calls](const FakeArgs& a, void* w) {
    if (++*calls == 2) return int(FACT_OK);  // the repoison call does nothing
    return correct(a, w);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_EQ(failed_check(r), "repoison");
}

TEST(VerifierHost, IgnoredConstantIsCaught) {
  const RunReport r = verify(kernel([](const FakeArgs& a, void* w) {
    FakeArgs fixed = a;
    fixed.scale = 1.5f;
    return correct(fixed, w);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_EQ(failed_check(r), "scale");
}

TEST(VerifierHost, ThreadBoundKernelIsCaughtOnTheOtherStream) {
  const std::thread::id main_thread = std::this_thread::get_id();
  const RunReport r = verify(kernel([main_thread](const FakeArgs& a, void* w) {
    if (std::this_thread::get_id() != main_thread) return int(FACT_OK);  // state only on one thread
    return correct(a, w);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_EQ(failed_check(r), "other_stream");
}

TEST(VerifierHost, WorkLeftRunningAfterReturnIsCaught) {
  const RunReport r = verify(kernel([](const FakeArgs& a, void* w) {
    correct(a, w);
    float* last = a.y + (a.n - 1) * a.y_stride;
    const float value = *last;
    *last = 0.0f;  // "not done yet": finished by a thread of its own after the call returned
    std::thread([last, value] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      *last = value;
    }).detach();
    return int(FACT_OK);
  }));
  EXPECT_EQ(r.status, RunStatus::Wrong);
  EXPECT_NE(r.checks[0].failure.find("after the stream was synchronized"), std::string::npos) << r.checks[0].failure;
}

TEST(VerifierHost, ZeroedWorkspaceIsNotGiven) {
  const RunReport r = verify(kernel([](const FakeArgs& a, void* w) {
    const auto* ws = static_cast<const unsigned char*>(w);
    for (int i = 0; i < 256; ++i) {
      if (ws[i] != 0) return int(FACT_ERR_INTERNAL);  // relies on a zeroed workspace
    }
    return correct(a, w);
  }, 256));
  EXPECT_EQ(r.status, RunStatus::Error);
  EXPECT_EQ(r.workspace_bytes, 256);
}

TEST(VerifierHost, StatusesOfRefusals) {
  const RunReport refused = verify(kernel([](const FakeArgs&, void*) { return int(FACT_ERR_CANNOT_IMPLEMENT); }));
  EXPECT_EQ(refused.status, RunStatus::CannotImplement);
  auto calls = std::make_shared<int>(0);
  const RunReport later = verify(kernel([calls](const FakeArgs& a, void* w) {
    return ++*calls == 3 ? int(FACT_ERR_CANNOT_IMPLEMENT) : correct(a, w);
  }));
  EXPECT_EQ(later.status, RunStatus::Error);  // a refusal after the first call is an error
  EXPECT_NE(later.error.find("fresh_inputs"), std::string::npos) << later.error;
  const CallFunction no_size = [](const FactCallHeader*, void*, size_t* size, void*) {
    return size ? int(FACT_ERR_CANNOT_IMPLEMENT) : int(FACT_OK);
  };
  EXPECT_EQ(verify(no_size).status, RunStatus::CannotImplement);
}

// A kind with a baseline: verified on the same inputs and timed with the kernel.
class FakeCaseWithBaseline : public VerifyCase {
 public:
  std::vector<BufferSpec> buffers() const override { return inner_.buffers(); }
  void fill_inputs(VerifyBackend& b, const BufferSet& s, uint64_t seed, int i) override { inner_.fill_inputs(b, s, seed, i); }
  std::shared_ptr<const Computation> computation() const override { return inner_.computation(); }
  double tolerance() const override { return inner_.tolerance(); }
  double flops() const override { return inner_.flops(); }
  Baseline make_baseline(const std::string& name, VerifyBackend&, const BufferSet&) override {
    Baseline b;
    b.name = name;
    b.computes = name == "half" ? "scale_by_half" : "scale";
    b.computation = name == "half" ? std::make_shared<FakeComputation>(64, 0.5f) : inner_.computation();
    // "wrong" computes the right thing badly; "half" computes what it says.
    b.call = kernel([name](const FakeArgs& a, void* w) {
      correct(a, w);
      if (name == "wrong") a.y[0] += 1.0f;
      return int(FACT_OK);
    });
    b.fused = name != "half";
    return b;
  }
  std::optional<AccuracyPeer> accuracy_peer(VerifyBackend& backend, const BufferSet& buffers) override {
    return AccuracyPeer{make_baseline("peer", backend, buffers), 20.0};
  }

 private:
  FakeCase inner_;
};

TEST(VerifierHost, BaselinesAreVerifiedAgainstWhatTheyComputeAndTimed) {
  HostBackend backend;
  FakeCaseWithBaseline c;
  VerifyOptions o = quick_options();
  o.baselines = {"half", "wrong"};
  RunReport r;
  verify_and_time(backend, c, kernel(correct), o, nullptr, r);
  EXPECT_EQ(r.status, RunStatus::Ok) << r.error;
  ASSERT_EQ(r.baselines.size(), 2u);
  EXPECT_EQ(r.baselines[0].status, "ok") << r.baselines[0].error;
  EXPECT_EQ(r.baselines[0].computes, "scale_by_half");
  EXPECT_TRUE(r.baselines[0].ms);
  EXPECT_EQ(r.baselines[1].status, "wrong");
  EXPECT_TRUE(r.baselines[1].ms);  // timed all the same, like the kernel's competitors always were
  ASSERT_TRUE(r.accuracy);
  EXPECT_EQ(r.accuracy->against, "peer");
  EXPECT_DOUBLE_EQ(r.accuracy->limit, 20.0);
  EXPECT_TRUE(r.ms);
  // Baselines alone (no kernel): no kernel checks, no kernel timing.
  RunReport alone;
  verify_and_time(backend, c, CallFunction{}, o, nullptr, alone);
  EXPECT_TRUE(alone.checks.empty());
  EXPECT_FALSE(alone.ms);
  EXPECT_EQ(alone.baselines.size(), 2u);
}

// A baseline whose verified call also copies its results into the outputs (here: a 20 ms
// "copy") and whose `timed` call is the same work without it: the verifier verifies `call` once
// and times `timed` only, so the copy is no part of the baseline's time.
class FakeCaseWithCopyingBaseline final : public FakeCaseWithBaseline {
 public:
  Baseline make_baseline(const std::string& name, VerifyBackend&, const BufferSet&) override {
    Baseline b;
    b.name = name;
    b.computes = "scale";
    b.fused = true;
    b.computation = computation();
    b.call = kernel([this](const FakeArgs& a, void* w) {
      ++verified_calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the copy into the outputs
      return correct(a, w);
    });
    b.timed = kernel([this](const FakeArgs&, void*) {
      ++timed_calls;  // the work, into memory of its own: the outputs untouched
      return int(FACT_OK);
    });
    return b;
  }
  std::optional<AccuracyPeer> accuracy_peer(VerifyBackend&, const BufferSet&) override { return std::nullopt; }
  int verified_calls = 0, timed_calls = 0;
};

TEST(VerifierHost, ABaselinesTimedCallIsTimedAndItsCallOnlyVerified) {
  HostBackend backend;
  FakeCaseWithCopyingBaseline c;
  VerifyOptions o = quick_options();
  o.timing.max_runs = 10;
  o.baselines = {"framework"};
  RunReport r;
  verify_and_time(backend, c, kernel(correct), o, nullptr, r);
  EXPECT_EQ(r.status, RunStatus::Ok) << r.error;
  ASSERT_EQ(r.baselines.size(), 1u);
  EXPECT_EQ(r.baselines[0].status, "ok") << r.baselines[0].error;  // `call` verified: it wrote the outputs
  EXPECT_EQ(c.verified_calls, 1);
  ASSERT_TRUE(r.baselines[0].ms);
  EXPECT_EQ(c.timed_calls, o.timing.warmup_runs + int(r.baselines[0].ms->runs));
  EXPECT_LT(r.baselines[0].ms->median, 5.0);  // no 20 ms copy in the baseline's time
}

}  // namespace
}  // namespace fact::runtime::test
