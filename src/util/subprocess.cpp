#include "fact/util/subprocess.hpp"

#include "fact/build_info.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace fact::util {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> merged_environment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::string, std::string> variables;
  std::vector<std::string> order;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string text(*entry);
    auto equals = text.find('=');
    if (equals == std::string::npos) continue;
    std::string name = text.substr(0, equals);
    if (!variables.count(name)) order.push_back(name);
    variables[name] = text.substr(equals + 1);
  }
  for (const auto& [name, value] : extra) {
    if (!variables.count(name)) order.push_back(name);
    variables[name] = value;
  }
  std::vector<std::string> result;
  result.reserve(order.size());
  for (const auto& name : order) result.push_back(name + "=" + variables[name]);
  return result;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (auto& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

void fill_status(int status, ProcessResult& result) {
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
}

}  // namespace

std::string ProcessResult::describe() const {
  std::ostringstream text;
  if (spawn_failed) {
    text << "could not start: " << spawn_error;
  } else if (timed_out) {
    text.precision(1);
    text << std::fixed << "timed out after " << seconds << "s (killed)";
  } else if (term_signal != 0) {
    text << "killed by signal " << term_signal << " (" << ::strsignal(term_signal) << ")";
  } else {
    text << "exit " << exit_code;
  }
  return text.str();
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  if (argv.empty()) throw std::invalid_argument("run_process: empty argv");
  ProcessResult result;
  auto start = Clock::now();

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);

  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::string output_path = options.output_file.string();
  if (!output_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  std::string directory = options.working_directory.string();
  if (!directory.empty()) posix_spawn_file_actions_addchdir_np(&actions, directory.c_str());
  // With a time limit the child leads its own process group, so that a kill reaches its
  // children too; without one it stays in ours and receives the terminal's Ctrl-C with us.
  if (options.timeout) {
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
  }

  std::vector<std::string> arguments = argv;
  std::vector<char*> argument_pointers = pointers_to(arguments);
  std::vector<std::string> environment = merged_environment(options.extra_environment);
  std::vector<char*> environment_pointers = pointers_to(environment);

  pid_t pid = -1;
  int spawn_error = ::posix_spawnp(&pid, arguments[0].c_str(), &actions, &attributes,
                                   argument_pointers.data(), environment_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawn_error != 0) {
    result.spawn_failed = true;
    result.spawn_error = argv[0] + ": " + std::strerror(spawn_error);
    return result;
  }

  int status = 0;
  if (!options.timeout) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    fill_status(status, result);
  } else {
    auto deadline = start + *options.timeout;
    auto pause = std::chrono::microseconds(500);
    while (true) {
      pid_t finished = ::waitpid(pid, &status, WNOHANG);
      if (finished == pid) {
        fill_status(status, result);
        break;
      }
      if (finished < 0 && errno != EINTR) break;
      if (Clock::now() >= deadline) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        fill_status(status, result);
        result.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
    // Whatever the child left behind in its group (a stuck grandchild) goes with it.
    ::kill(-pid, SIGKILL);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

std::optional<std::string> capture_output(const std::vector<std::string>& argv,
                                          std::chrono::milliseconds timeout, size_t max_bytes) {
  char path_template[] = "/tmp/fact-capture-XXXXXX";
  int descriptor = ::mkstemp(path_template);
  if (descriptor < 0) return std::nullopt;
  ::close(descriptor);
  std::filesystem::path output(path_template);
  ProcessOptions options;
  options.output_file = output;
  options.timeout = timeout;
  ProcessResult result = run_process(argv, options);
  std::optional<std::string> text;
  if (result.succeeded()) {
    std::ifstream in(output, std::ios::binary);
    std::string content(max_bytes, '\0');
    in.read(content.data(), static_cast<std::streamsize>(max_bytes));
    content.resize(static_cast<size_t>(in.gcount()));
    text = std::move(content);
  }
  std::error_code ignored;
  std::filesystem::remove(output, ignored);
  return text;
}

std::string shell_quote(std::string_view word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-+=./:,@%") == std::string_view::npos) {
    return std::string(word);
  }
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += "'";
  return quoted;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string joined;
  for (const auto& word : argv) {
    if (!joined.empty()) joined += ' ';
    joined += shell_quote(word);
  }
  return joined;
}

std::optional<std::filesystem::path> find_executable(std::string_view name) {
  auto executable = [](const std::filesystem::path& p) {
    return ::access(p.c_str(), X_OK) == 0 && !std::filesystem::is_directory(p);
  };
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) {
    std::filesystem::path p(name);
    if (executable(p)) return p;
    return std::nullopt;
  }
  const char* path_variable = std::getenv("PATH");
  std::string search = path_variable ? path_variable : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream directories(search);
  std::string directory;
  while (std::getline(directories, directory, ':')) {
    if (directory.empty()) directory = ".";
    std::filesystem::path candidate = std::filesystem::path(directory) / name;
    if (executable(candidate)) return candidate;
  }
  return std::nullopt;
}

std::filesystem::path current_executable() {
  std::error_code error;
  auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "/proc/self/exe";
  return path;
}

std::string python_interpreter() {
  if (const char* chosen = std::getenv("FACT_PYTHON"); chosen && *chosen) return chosen;
  for (const char* name : {"python3", "python"}) {
    const std::filesystem::path beside = current_executable().parent_path() / name;
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  const std::string configured = build_info::kPythonExecutable;
  if (!configured.empty() && ::access(configured.c_str(), X_OK) == 0) return configured;
  if (auto found = find_executable("python3")) return found->string();
  return "python3";
}

std::string tail_of_file(const std::filesystem::path& path, size_t max_lines) {
  std::ifstream in(path);
  if (!in) return {};
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > max_lines) lines.pop_front();
  }
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  return text;
}

}  // namespace fact::util
