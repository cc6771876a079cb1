#include "src/cli/python_module.hpp"

#include <cstdlib>
#include <iostream>

#include "fact/build_info.hpp"

namespace fact::cli {

namespace fs = std::filesystem;

namespace {

// True for a `fact` run from its CMake build folder (build/fact), false for an installed one
// (`pip install .`: the environment's bin/), whose Python package is the installed one.
bool running_from_build_tree() {
  std::error_code error;
  return fs::exists(util::current_executable().parent_path() / "CMakeCache.txt", error);
}

}  // namespace

std::string python_executable() { return util::python_interpreter(); }

util::ProcessResult run_python_module(const std::string& stage, const std::string& module,
                                      const std::vector<std::string>& module_args, const PythonStep& step) {
  std::vector<std::string> argv = {python_executable(), "-m", module};
  argv.insert(argv.end(), module_args.begin(), module_args.end());
  util::ProcessOptions options;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) options.extra_environment.emplace_back("FACT_ENGINE", self.string());
  if (!step.logs_dir.empty()) {
    options.extra_environment.emplace_back("FACT_LOG_DIR", fs::absolute(step.logs_dir).string());
  }
  options.extra_environment.emplace_back("FACT_VERBOSE", step.verbose ? "1" : "0");
  if (running_from_build_tree()) {
    std::string pythonpath = std::string(build_info::kSourceDir) + "/python";
    if (const char* existing = std::getenv("PYTHONPATH"); existing && *existing)
      pythonpath += std::string(":") + existing;
    options.extra_environment.emplace_back("PYTHONPATH", pythonpath);
  }
  if (!stage.empty()) std::cout << "\n== " << stage << "\n";
  std::cout << std::flush;
  if (step.command_log) {
    *step.command_log << "$ " << util::shell_join(argv) << "\n" << std::flush;
  } else if (step.verbose) {
    std::cout << "$ " << util::shell_join(argv) << "\n" << std::flush;
  }
  return util::run_process(argv, options);
}

}  // namespace fact::cli
