// PreparedLaunches (include/fact/runtime/prepared_launches.h): the launches a kernel entry keeps
// so that a call equal to an earlier one skips its checks and preparation. A kept launch is
// found only for the same argument bytes, device and workspace; the oldest goes first.
#include <gtest/gtest.h>

#include <cstdint>

#include "fact/runtime/prepared_launches.h"

namespace {

struct Args {
  int64_t m, n, k;
  const void* a;
  float alpha;
  int32_t steps;
};

struct Prepared {
  int id;
};

using Launches = fact::runtime::PreparedLaunches<Args, Prepared, 2>;

Args args_with(int64_t m, const void* a = nullptr) { return Args{m, 64, 32, a, 1.0f, 0}; }

TEST(PreparedLaunches, FindsAKeptLaunchOnlyForTheSameBytesDeviceAndWorkspace) {
  Launches launches;
  int workspace = 0, other_workspace = 0, operand = 0;
  const Args call = args_with(128, &operand);
  EXPECT_EQ(launches.find(call, 0, &workspace), nullptr);
  launches.keep(call, 0, &workspace, Prepared{7});
  Prepared* kept = launches.find(call, 0, &workspace);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->id, 7);

  Args moved = call;
  moved.a = &workspace;  // another operand address
  EXPECT_EQ(launches.find(moved, 0, &workspace), nullptr);
  Args scaled = call;
  scaled.alpha = 2.0f;  // another constant
  EXPECT_EQ(launches.find(scaled, 0, &workspace), nullptr);
  EXPECT_EQ(launches.find(call, 1, &workspace), nullptr);          // another device
  EXPECT_EQ(launches.find(call, 0, &other_workspace), nullptr);    // another workspace
  EXPECT_EQ(launches.find(call, 0, nullptr), nullptr);
}

TEST(PreparedLaunches, KeepsTheLastWaysAndReplacesTheOldest) {
  Launches launches;
  launches.keep(args_with(1), 0, nullptr, Prepared{1});
  launches.keep(args_with(2), 0, nullptr, Prepared{2});
  ASSERT_NE(launches.find(args_with(1), 0, nullptr), nullptr);
  ASSERT_NE(launches.find(args_with(2), 0, nullptr), nullptr);
  launches.keep(args_with(3), 0, nullptr, Prepared{3});  // two ways: the first goes
  EXPECT_EQ(launches.find(args_with(1), 0, nullptr), nullptr);
  EXPECT_EQ(launches.find(args_with(2), 0, nullptr)->id, 2);
  EXPECT_EQ(launches.find(args_with(3), 0, nullptr)->id, 3);
  launches.keep(args_with(4), 0, nullptr, Prepared{4});  // then the second
  EXPECT_EQ(launches.find(args_with(2), 0, nullptr), nullptr);
  EXPECT_EQ(launches.find(args_with(3), 0, nullptr)->id, 3);
  EXPECT_EQ(launches.find(args_with(4), 0, nullptr)->id, 4);
}

}  // namespace
