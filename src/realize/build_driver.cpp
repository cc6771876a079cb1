#include "fact/realize/build_driver.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "fact/util/atomic_file.hpp"
#include "fact/util/progress.hpp"
#include "fact/util/subprocess.hpp"

namespace fact::realize {
namespace fs = std::filesystem;

namespace {

constexpr const char* kExitStatusFile = "exit_status";

// One key this run compiles: the job, its staging folder, and the lock held until commit.
struct PendingBuild {
  const BuildJob* job = nullptr;
  fs::path staging;
  std::optional<util::FileLock> lock;
  int exit_code = -1;
  double seconds = 0.0;
  std::string runner_problem;  // set when the job runner itself failed for this job
};

// The exit status a compile wrote to its status file; nullopt when absent or garbled.
std::optional<int> parse_exit_status(const std::string& text) {
  try {
    return std::stoi(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string read_text_or_empty(const fs::path& path) {
  try {
    return util::read_file(path);
  } catch (const std::exception&) {
    return {};
  }
}

std::string first_line_containing(std::string_view log, std::string_view needle, bool ignore_case) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return s;
  };
  std::string wanted = ignore_case ? lower(std::string(needle)) : std::string(needle);
  std::istringstream lines{std::string(log)};
  std::string line;
  while (std::getline(lines, line)) {
    std::string probe = ignore_case ? lower(line) : line;
    if (probe.find(wanted) != std::string::npos) {
      auto begin = line.find_first_not_of(" \t");
      line = begin == std::string::npos ? std::string() : line.substr(begin);
      if (line.size() > 240) line = line.substr(0, 240) + "...";
      return line;
    }
  }
  return {};
}

std::string ninja_escape_value(std::string_view value) {
  std::string escaped;
  for (char c : value) {
    if (c == '$') escaped += "$$";
    else if (c == '\n') escaped += ' ';
    else escaped += c;
  }
  return escaped;
}

// .ninja_log (v5): "start_ms \t end_ms \t mtime \t output \t hash" per line.
std::map<std::string, double> read_ninja_timings(const fs::path& ninja_log) {
  std::map<std::string, double> seconds_by_output;
  std::istringstream lines(read_text_or_empty(ninja_log));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string start, end, mtime, output;
    if (!std::getline(fields, start, '\t') || !std::getline(fields, end, '\t') ||
        !std::getline(fields, mtime, '\t') || !std::getline(fields, output, '\t')) {
      continue;
    }
    try {
      seconds_by_output[output] = (std::stod(end) - std::stod(start)) / 1000.0;
    } catch (const std::exception&) {
    }
  }
  return seconds_by_output;
}

int parallel_jobs(int requested) {
  if (requested > 0) return requested;
  unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}

}  // namespace

std::string_view build_status_name(BuildStatus s) {
  switch (s) {
    case BuildStatus::Cached: return "cached";
    case BuildStatus::Built: return "built";
    case BuildStatus::Failed: return "failed";
    case BuildStatus::SkippedFailed: return "skipped_failed";
  }
  return "unknown";
}

std::optional<std::string> build_failure_reason(int exit_code, bool library_exists, std::string_view log) {
  if (exit_code != 0) {
    std::string reason = "compiler exit " + std::to_string(exit_code);
    std::string error_line = first_line_containing(log, "error", true);
    if (!error_line.empty()) reason += ": " + error_line;
    return reason;
  }
  if (std::string line = first_line_containing(log, "C7510", false); !line.empty()) {
    return "ptxas C7510 (wgmma serialized, treated as a failure): " + line;
  }
  if (std::string line = first_line_containing(log, "Potential Performance Loss", true); !line.empty()) {
    return "ptxas Potential Performance Loss (treated as a failure): " + line;
  }
  if (!library_exists) return std::string("compiler exited 0 but wrote no library");
  return std::nullopt;
}

std::vector<std::string> expand_command(const std::vector<std::string>& command, const fs::path& source,
                                        const fs::path& output) {
  std::vector<std::string> expanded;
  expanded.reserve(command.size());
  for (std::string word : command) {
    for (auto [placeholder, value] : {std::pair{kSourcePlaceholder, source.string()},
                                      std::pair{kOutputPlaceholder, output.string()}}) {
      for (size_t at = word.find(placeholder); at != std::string::npos;
           at = word.find(placeholder, at + value.size())) {
        word.replace(at, placeholder.size(), value);
      }
    }
    expanded.push_back(std::move(word));
  }
  return expanded;
}

std::string compiler_identity_of(const std::string& tool) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  {
    std::lock_guard lock(mutex);
    if (auto it = known.find(tool); it != known.end()) return it->second;
  }
  std::string identity = util::capture_output({tool, "--version"}, std::chrono::seconds(30), 4096).value_or("");
  std::lock_guard lock(mutex);
  known[tool] = identity;
  return identity;
}

std::string ninja_escape_path(std::string_view path) {
  std::string escaped;
  for (char c : path) {
    if (c == '$' || c == ' ' || c == ':') escaped += '$';
    escaped += c;
  }
  return escaped;
}

BuildDriver::BuildDriver(const KernelCache& cache, BuildOptions options)
    : cache_(cache), options_(std::move(options)) {}

std::vector<BuildOutcome> BuildDriver::build(const std::vector<BuildJob>& jobs) {
  std::vector<BuildOutcome> outcomes(jobs.size());
  std::map<std::string, std::vector<size_t>> positions_by_key;
  std::vector<std::string> key_order;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const BuildJob& job = jobs[i];
    cache_.entry_dir(job.key);  // throws for an invalid key
    if (job.command.empty()) throw std::invalid_argument("build job " + job.key + ": empty command");
    if (!positions_by_key.count(job.key)) key_order.push_back(job.key);
    positions_by_key[job.key].push_back(i);
  }

  auto identity_for = [&](const BuildJob& job) {
    return options_.compiler_identity ? *options_.compiler_identity : compiler_identity_of(job.command[0]);
  };
  auto set_outcome = [&](const std::string& key, BuildOutcome outcome) {
    for (size_t position : positions_by_key[key]) {
      outcomes[position] = outcome;
      outcomes[position].label = jobs[position].label;
    }
  };
  // Settles `key` from the cache when it can be: true when no build is needed.
  auto settle_from_cache = [&](const BuildJob& job) {
    EntryLookup found = cache_.lookup(job.key);
    BuildOutcome outcome;
    outcome.key = job.key;
    if (found.state == EntryState::Built) {
      outcome.status = BuildStatus::Cached;
      outcome.library = found.kernel->library;
      outcome.log = found.kernel->log;
      outcome.compile_seconds = found.kernel->meta.value("compile_seconds", 0.0);
      set_outcome(job.key, outcome);
      return true;
    }
    if (found.state == EntryState::Failed && !options_.retry_failed) {
      const FailedBuild& failure = *found.failure;
      bool same_command = failure.command == job.command;
      bool same_compiler = failure.compiler.empty() || failure.compiler == identity_for(job);
      if (same_command && same_compiler) {
        outcome.status = BuildStatus::SkippedFailed;
        outcome.reason = "failed in an earlier build (" + failure.reason + "); use --retry-failed to rebuild";
        outcome.log = cache_.entry_dir(job.key) / "build.log";
        set_outcome(job.key, outcome);
        return true;
      }
    }
    return false;
  };

  bool use_ninja = options_.use_ninja && util::find_executable("ninja").has_value();
  last_runner_ = use_ninja ? "ninja" : "threads";

  std::vector<std::string> remaining = key_order;
  bool first_round = true;
  while (!remaining.empty()) {
    std::vector<PendingBuild> pending;
    std::vector<std::string> deferred;
    size_t cached = 0, known_failures = 0;
    for (const std::string& key : remaining) {
      const BuildJob& job = jobs[positions_by_key[key].front()];
      if (first_round && settle_from_cache(job)) {
        (outcomes[positions_by_key[key].front()].status == BuildStatus::Cached ? cached : known_failures)++;
        continue;
      }
      std::optional<util::FileLock> lock;
      if (first_round) {
        lock = cache_.try_lock(key);
        if (!lock) {
          deferred.push_back(key);  // another run is building it: wait for it later
          continue;
        }
      } else {
        lock = cache_.lock(key);
      }
      if (settle_from_cache(job)) {
        (outcomes[positions_by_key[key].front()].status == BuildStatus::Cached ? cached : known_failures)++;
        continue;
      }
      PendingBuild build;
      build.job = &job;
      build.lock = std::move(lock);
      build.staging = cache_.make_staging_dir(key);
      util::write_file_atomically(build.staging / "source.cu", job.source);
      pending.push_back(std::move(build));
    }
    util::Console* console =
        options_.show_progress ? (options_.console ? options_.console : &util::stderr_console()) : nullptr;
    if (console && (first_round || !pending.empty())) {
      // What will be built, each kernel by its full name, before the first compiler starts.
      console->line(options_.title + ": " + std::to_string(remaining.size()) + " kernel(s): " +
                    std::to_string(cached) + " cached, " + std::to_string(known_failures) +
                    " known failure(s), " + std::to_string(pending.size()) + " to compile" +
                    (deferred.empty() ? "" : ", " + std::to_string(deferred.size()) + " being built by another run") +
                    " (" + last_runner_ + ", " + std::to_string(parallel_jobs(options_.jobs)) +
                    (parallel_jobs(options_.jobs) == 1 ? " job)" : " jobs)") +
                    (pending.empty() ? "" : ":"));
      for (const PendingBuild& build : pending)
        console->line("  " + (build.job->label.empty() ? build.job->key : build.job->label));
    }

    if (!pending.empty()) {
      util::ProgressBar progress(options_.title, pending.size(), console, {"kernels", "compiled"}, true);
      int jobs_in_parallel = parallel_jobs(options_.jobs);
      if (use_ninja) {
        fs::path workdir = cache_.root() / ".staging" / ("ninja." + util::unique_suffix());
        fs::create_directories(workdir);
        std::ostringstream ninja;
        ninja << "# Generated by fact's build driver: one edge per kernel.\n"
              << "ninja_required_version = 1.5\n"
              << "builddir = " << ninja_escape_path(workdir.string()) << "\n\n"
              << "rule compile\n"
              << "  command = cd $dir && ( $cmd ) > build.log 2>&1; echo $$? > " << kExitStatusFile
              << ".tmp && mv " << kExitStatusFile << ".tmp " << kExitStatusFile << "\n"
              << "  description = $label\n\n";
        for (const PendingBuild& build : pending) {
          auto command = expand_command(build.job->command, build.staging / "source.cu", build.staging / "lib.so");
          ninja << "build " << ninja_escape_path((build.staging / kExitStatusFile).string()) << ": compile\n"
                << "  dir = " << ninja_escape_value(util::shell_quote(build.staging.string())) << "\n"
                << "  cmd = " << ninja_escape_value(util::shell_join(command)) << "\n"
                << "  label = " << ninja_escape_value(build.job->key) << "\n";
        }
        util::write_file_atomically(workdir / "build.ninja", ninja.str());

        std::atomic<bool> ninja_done{false};
        util::ProcessResult ninja_result;
        std::thread ninja_thread([&] {
          util::ProcessOptions process;
          process.output_file = workdir / "ninja.out";
          ninja_result = util::run_process(
              {"ninja", "-C", workdir.string(), "-k", "0", "-j", std::to_string(jobs_in_parallel)}, process);
          ninja_done = true;
        });
        std::vector<bool> seen(pending.size(), false);
        auto poll = [&] {
          for (size_t i = 0; i < pending.size(); ++i) {
            fs::path status_file = pending[i].staging / kExitStatusFile;
            std::error_code error;
            if (seen[i] || !fs::exists(status_file, error)) continue;
            seen[i] = true;
            std::string text = read_text_or_empty(status_file);
            bool success = parse_exit_status(text) == 0 && fs::exists(pending[i].staging / "lib.so", error);
            progress.advance(!success, pending[i].job->label.empty() ? pending[i].job->key : pending[i].job->label);
          }
        };
        auto pause = std::chrono::milliseconds(10);
        while (!ninja_done) {
          std::this_thread::sleep_for(pause);
          pause = std::min(pause * 2, std::chrono::milliseconds(250));
          poll();
        }
        ninja_thread.join();
        poll();
        auto timings = read_ninja_timings(workdir / ".ninja_log");
        for (PendingBuild& build : pending) {
          fs::path status_file = build.staging / kExitStatusFile;
          std::string text = read_text_or_empty(status_file);
          std::optional<int> exit_status = parse_exit_status(text);
          if (!exit_status) {
            build.runner_problem = "the job graph did not run this compile (ninja " + ninja_result.describe() +
                                   "): " + util::tail_of_file(workdir / "ninja.out", 10);
          } else {
            build.exit_code = *exit_status;
          }
          if (auto it = timings.find(status_file.string()); it != timings.end()) build.seconds = it->second;
          std::error_code error;
          fs::remove(status_file, error);
        }
        std::error_code error;
        fs::remove_all(workdir, error);
      } else {
        std::atomic<size_t> next{0};
        std::vector<std::thread> workers;
        for (int w = 0; w < std::min<int>(jobs_in_parallel, static_cast<int>(pending.size())); ++w) {
          workers.emplace_back([&] {
            for (size_t i = next++; i < pending.size(); i = next++) {
              PendingBuild& build = pending[i];
              util::ProcessOptions process;
              process.working_directory = build.staging;
              process.output_file = build.staging / "build.log";
              auto result = util::run_process(
                  expand_command(build.job->command, build.staging / "source.cu", build.staging / "lib.so"),
                  process);
              build.seconds = result.seconds;
              if (result.spawn_failed) {
                build.runner_problem = result.describe();
              } else {
                build.exit_code = result.term_signal ? 128 + result.term_signal : result.exit_code;
              }
              std::error_code error;
              bool success = result.succeeded() && fs::exists(build.staging / "lib.so", error);
              progress.advance(!success, build.job->label.empty() ? build.job->key : build.job->label);
            }
          });
        }
        for (auto& worker : workers) worker.join();
      }
      progress.finish();

      for (PendingBuild& build : pending) {
        const BuildJob& job = *build.job;
        std::error_code error;
        std::string log = read_text_or_empty(build.staging / "build.log");
        if (!build.runner_problem.empty()) log += "\n[fact build driver] " + build.runner_problem + "\n";
        std::optional<std::string> problem =
            build.runner_problem.empty()
                ? build_failure_reason(build.exit_code, fs::exists(build.staging / "lib.so", error), log)
                : std::optional<std::string>(build.runner_problem);
        BuildOutcome outcome;
        outcome.key = job.key;
        outcome.compile_seconds = build.seconds;
        outcome.log = cache_.entry_dir(job.key) / "build.log";
        if (!problem) {
          nlohmann::json meta = {{"entry_symbol", job.entry_symbol}, {"spec", job.spec},
                                 {"label", job.label},               {"command", job.command},
                                 {"compiler", identity_for(job)},     {"compile_seconds", build.seconds},
                                 {"runner", last_runner_}};
          CachedKernel kernel = cache_.commit_built(job.key, build.staging, std::move(meta));
          outcome.status = BuildStatus::Built;
          outcome.library = kernel.library;
        } else {
          if (!build.runner_problem.empty()) util::write_file_atomically(build.staging / "build.log", log);
          FailedBuild failure;
          failure.key = job.key;
          failure.reason = *problem;
          failure.command = job.command;
          failure.compiler = identity_for(job);
          failure.log = log;
          failure.exit_code = build.exit_code;
          failure.spec = job.spec;
          cache_.commit_failed(job.key, build.staging, failure);
          outcome.status = BuildStatus::Failed;
          outcome.reason = *problem;
        }
        set_outcome(job.key, outcome);
        build.lock.reset();
      }
    }
    remaining = std::move(deferred);
    first_round = false;
  }
  return outcomes;
}

}  // namespace fact::realize
