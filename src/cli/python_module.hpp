// Python steps of CLI commands (`fact optimize`, `fact bench conformance`): `python -m <module>`
// with FACT_ENGINE naming this executable (so the Python side's engine calls come back to this
// build) and, for a `fact` run from its build folder, the source tree's python/ first on
// PYTHONPATH (an installed `fact` uses the installed package).
#pragma once
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "fact/util/subprocess.hpp"

namespace fact::cli {

// The interpreter the engine was built with (util::python_interpreter: $FACT_PYTHON first).
std::string python_executable();

struct PythonStep {
  std::filesystem::path logs_dir;  // FACT_LOG_DIR for the child's fact.console (empty: unset)
  bool verbose = false;            // FACT_VERBOSE=1, and the command line printed
  std::ostream* command_log = nullptr;  // where the command line goes (null: stdout with verbose)
};

// Prints "== <stage>" (unless `stage` is empty; and the command line: to step.command_log, or with step.verbose), then runs
// `python -m <module> <module_args>`; its output goes to this process's stdout/stderr.
util::ProcessResult run_python_module(const std::string& stage, const std::string& module,
                                      const std::vector<std::string>& module_args,
                                      const PythonStep& step = {});

}  // namespace fact::cli
