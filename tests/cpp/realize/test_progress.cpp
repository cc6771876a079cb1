// The progress the build driver and the tuner show: the time-left estimate (never growing while
// the batch waits), the status line and the progress lines (names never cut), what goes to a
// terminal, a pipe and the log, and the build driver's list of kernels before the first compile.
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "build_test_support.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/util/console.hpp"
#include "fact/util/progress.hpp"

namespace fact::util {
namespace {

// Keeps what was emitted, by kind.
class RecordingConsole : public Console {
 public:
  explicit RecordingConsole(bool terminal, size_t width = 100) : terminal_(terminal), width_(width) {}
  bool is_terminal() const override { return terminal_; }
  size_t width() const override { return width_; }
  std::vector<std::string> of(Kind kind) const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> found;
    for (const auto& [k, text] : emitted_) if (k == kind) found.push_back(text);
    return found;
  }
  std::vector<std::pair<Kind, std::string>> all() const {
    std::lock_guard lock(mutex_);
    return emitted_;
  }

 protected:
  void emit(Kind kind, std::string_view text) override {
    std::lock_guard lock(mutex_);
    emitted_.emplace_back(kind, std::string(text));
  }

 private:
  bool terminal_;
  size_t width_;
  mutable std::mutex mutex_;
  std::vector<std::pair<Kind, std::string>> emitted_;
};

TEST(EtaEstimator, NoEstimateBeforeTheFirstItem) {
  EtaEstimator eta(8);
  EXPECT_FALSE(eta.remaining(0.0));
  EXPECT_FALSE(eta.remaining(300.0));
  eta.update(0, 5.0);
  EXPECT_FALSE(eta.remaining(6.0));
}

TEST(EtaEstimator, CountsDownWhileWaitingAndNeverGrows) {
  EtaEstimator eta(8);
  eta.update(2, 10.0);  // 5 s an item, 6 left
  ASSERT_TRUE(eta.remaining(10.0));
  EXPECT_DOUBLE_EQ(*eta.remaining(10.0), 30.0);
  EXPECT_DOUBLE_EQ(*eta.remaining(25.0), 15.0);
  // Waiting on a slow item: the estimate only goes down, then is gone (not an ETA growing
  // with the elapsed time, as elapsed / finished * left did).
  double previous = 1e9;
  for (double now = 10.0; now < 100.0; now += 0.5) {
    const std::optional<double> left = eta.remaining(now);
    if (!left) {
      EXPECT_GE(now, 40.0);
      continue;
    }
    EXPECT_LE(*left, previous) << "at " << now;
    previous = *left;
  }
  EXPECT_FALSE(eta.remaining(40.0));
  // The next item recomputes it from the work done.
  eta.update(3, 60.0);
  ASSERT_TRUE(eta.remaining(60.0));
  EXPECT_DOUBLE_EQ(*eta.remaining(60.0), 100.0);
}

TEST(EtaEstimator, OneItemLeftShowsNoEstimate) {
  EtaEstimator eta(4);
  eta.update(3, 30.0);
  EXPECT_FALSE(eta.remaining(30.0));
  EtaEstimator single(1);
  single.update(0, 0.0);
  EXPECT_FALSE(single.remaining(100.0));
}

TEST(ProgressLines, ReportLineKeepsTheWholeName) {
  const std::string name = "gemm_bf16_tn_" + std::string(300, 'x') + "_end";
  const ProgressBar::Words words{"kernels", "compiled"};
  const std::string line = ProgressBar::report_line("realize", words, 3, 0, 8, 72.0, 125.0, name, false);
  EXPECT_EQ(line, "realize: 3/8 kernels compiled (" + name + ") 1m12s elapsed, about 2m05s left");
  EXPECT_NE(ProgressBar::report_line("realize", words, 2, 1, 8, 40.0, std::nullopt, "k", true)
                .find("3/8 kernels done (2 compiled, 1 failed) (k: failed) 40s elapsed"),
            std::string::npos);
  EXPECT_NE(ProgressBar::report_line("realize", words, 7, 0, 8, 40.0, std::nullopt, "", false)
                .find("waiting on the last one"),
            std::string::npos);
  EXPECT_EQ(ProgressBar::format_duration(3725), "1h02m");
}

TEST(ProgressLines, StatusLineFitsAndNeverCutsAName) {
  const ProgressBar::Words words{"configurations", "measured"};
  const std::string fits = ProgressBar::status_line("tune", words, 3, 1, 8, 40.0, 40.0, "cfg_128x128", 200);
  EXPECT_NE(fits.find("4/8 configurations done (3 measured, 1 failed) 40s elapsed, about 40s left  cfg_128x128"),
            std::string::npos)
      << fits;
  const std::string name(500, 'x');
  const std::string narrow = ProgressBar::status_line("tune", words, 3, 1, 8, 40.0, 40.0, name, 80);
  EXPECT_LE(narrow.size(), 80u);
  EXPECT_EQ(narrow.find('x'), std::string::npos) << "a name that does not fit is left out, not cut: " << narrow;
  EXPECT_NE(ProgressBar::status_line("tune", words, 0, 0, 8, 75.0, std::nullopt, "", 200).find("1m15s elapsed"),
            std::string::npos);
}

TEST(ProgressBar, PipeGetsALinePerAnnouncedItemWithItsFullName) {
  RecordingConsole console(false);
  const std::string long_name = "gemm_bf16_" + std::string(120, 'n');
  {
    ProgressBar bar("realize", 3, &console, {"kernels", "compiled"}, true);
    bar.advance(false, long_name);
    bar.advance(true, "second");
    bar.advance(false, "third");
  }
  const auto lines = console.of(Console::Kind::Line);
  ASSERT_EQ(lines.size(), 4u) << lines.back();
  EXPECT_NE(lines[0].find("realize: 1/3 kernels compiled (" + long_name + ")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("(second: failed)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[3].find("realize: 3/3 kernels done (2 compiled, 1 failed) in "), std::string::npos) << lines[3];
  EXPECT_TRUE(console.of(Console::Kind::Live).empty() ||
              console.of(Console::Kind::Live) == std::vector<std::string>{""});
}

TEST(ProgressBar, PipeGetsFewLinesForManyQuickItems) {
  RecordingConsole console(false);
  {
    ProgressBar bar("tune", 100, &console, {"configurations", "measured"});
    for (int i = 0; i < 100; ++i) bar.advance(i % 10 == 0, "c" + std::to_string(i));
    EXPECT_EQ(bar.ok(), 90u);
    EXPECT_EQ(bar.failed(), 10u);
  }
  const auto lines = console.of(Console::Kind::Line);
  EXPECT_GE(lines.size(), 2u);
  EXPECT_LE(lines.size(), 11u);
  EXPECT_NE(lines.back().find("100/100 configurations done (90 measured, 10 failed) in"), std::string::npos)
      << lines.back();
}

TEST(ProgressBar, TerminalDrawsInPlaceAndLogsTheLines) {
  RecordingConsole console(true);
  {
    ProgressBar bar("tune", 20, &console, {"configurations", "measured"});
    for (int i = 0; i < 20; ++i) bar.advance(false, "c" + std::to_string(i));
  }
  const auto lines = console.of(Console::Kind::Line);
  ASSERT_EQ(lines.size(), 1u) << "a terminal keeps only the final line";
  EXPECT_NE(lines[0].find("20/20 configurations measured in"), std::string::npos);
  EXPECT_GE(console.of(Console::Kind::Live).size(), 20u);
  EXPECT_EQ(console.of(Console::Kind::Live).back(), "") << "the status line is cleared at the end";
  EXPECT_GE(console.of(Console::Kind::Log).size(), 5u) << "the log gets the lines a pipe would";
}

TEST(ProgressBar, WaitingIsNeverSilent) {
  RecordingConsole pipe(false);
  RecordingConsole terminal(true);
  {
    ProgressBar on_pipe("realize", 2, &pipe, {"kernels", "compiled"}, true);
    ProgressBar on_terminal("realize", 2, &terminal, {"kernels", "compiled"}, true);
    on_pipe.set_heartbeat_seconds(0.5);
    on_terminal.set_heartbeat_seconds(0.5);
    std::this_thread::sleep_for(std::chrono::milliseconds(2600));  // one long compile
  }
  const auto lines = pipe.of(Console::Kind::Line);
  ASSERT_GE(lines.size(), 2u) << "a line while waiting, then the final one";
  EXPECT_NE(lines[0].find("realize: 0/2 kernels compiled"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("elapsed"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("left"), std::string::npos) << "no estimate from nothing: " << lines[0];
  // On a terminal the status line is redrawn (its elapsed time moves) and the log gets lines.
  EXPECT_GE(terminal.of(Console::Kind::Live).size(), 3u);
  EXPECT_GE(terminal.of(Console::Kind::Log).size(), 1u);
}

TEST(BuildDriverProgress, ListsTheKernelsBeforeTheFirstCompileFinishes) {
  for (const bool use_ninja : {true, false}) {
    test::ScratchDir scratch;
    realize::KernelCache cache(scratch / "cache");
    RecordingConsole console(false);
    realize::BuildOptions options;
    options.jobs = 2;
    options.use_ninja = use_ninja;
    options.compiler_identity = "fake compiler 1.0";
    options.console = &console;
    options.title = "realize";
    std::vector<realize::BuildJob> jobs;
    for (const std::string key : {"k1", "k2", "k3"}) {
      realize::BuildJob job;
      job.key = key;
      job.source = "// " + key + "\n";
      job.command = test::fake_compiler(scratch / "count.txt", "", 0, 0.2);
      job.label = "gemm_bf16_tn_256x512x1024_" + std::string(60, 'q') + "_" + key;
      jobs.push_back(job);
    }
    realize::BuildDriver(cache, options).build(jobs);
    const auto lines = console.of(Console::Kind::Line);
    ASSERT_GE(lines.size(), 1u + 3u + 3u + 1u);
    EXPECT_NE(lines[0].find("realize: 3 kernel(s): 0 cached, 0 known failure(s), 3 to compile"), std::string::npos)
        << lines[0];
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(lines[1 + i], "  " + jobs[i].label);
    size_t progress_lines = 0;
    for (size_t i = 4; i < lines.size(); ++i) {
      if (lines[i].rfind("realize: ", 0) != 0) continue;
      ++progress_lines;
      if (i + 1 == lines.size()) {
        EXPECT_NE(lines[i].find("3/3 kernels compiled in"), std::string::npos) << lines[i];
        continue;
      }
      EXPECT_NE(lines[i].find(std::string(60, 'q')), std::string::npos) << "the name is whole: " << lines[i];
    }
    EXPECT_EQ(progress_lines, 4u) << (use_ninja ? "ninja" : "threads");
  }
}

}  // namespace
}  // namespace fact::util
