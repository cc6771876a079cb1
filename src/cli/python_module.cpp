#include "src/cli/python_module.hpp"

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "fact/build_info.hpp"

namespace fact::cli {

std::string python_executable() {
  if (const char* p = std::getenv("FACT_PYTHON"); p && *p) return p;
  // A pip install puts `fact` into the environment's bin/, beside its interpreter.
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path beside = self.parent_path() / "python3";
    if (std::filesystem::exists(beside, error)) return beside.string();
  }
  return "python3";
}

util::ProcessResult run_python_module(const std::string& stage, const std::string& module,
                                      const std::vector<std::string>& module_args) {
  namespace fs = std::filesystem;
  std::vector<std::string> argv = {python_executable(), "-m", module};
  argv.insert(argv.end(), module_args.begin(), module_args.end());
  util::ProcessOptions options;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) options.extra_environment.emplace_back("FACT_ENGINE", self.string());
  std::string pythonpath = std::string(build_info::kSourceDir) + "/python";
  if (const char* existing = std::getenv("PYTHONPATH"); existing && *existing)
    pythonpath += std::string(":") + existing;
  options.extra_environment.emplace_back("PYTHONPATH", pythonpath);
  if (!stage.empty()) std::cout << "\n== " << stage << ": " << util::shell_join(argv) << "\n" << std::flush;
  return util::run_process(argv, options);
}

}  // namespace fact::cli
