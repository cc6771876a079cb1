// Python steps of CLI commands (`fact optimize`, `fact bench conformance`): `python -m <module>`
// with this source tree's python/ first on PYTHONPATH and FACT_ENGINE naming this executable,
// so the Python side's engine calls come back to this build.
#pragma once
#include <string>
#include <vector>

#include "fact/util/subprocess.hpp"

namespace fact::cli {

// $FACT_PYTHON, else the python3 beside the `fact` executable (a virtual environment's bin/),
// else python3 on PATH.
std::string python_executable();

// Runs `python -m <module> <module_args>` after printing "== <stage>: <command line>" (nothing
// when `stage` is empty); its output goes to this process's stdout/stderr.
util::ProcessResult run_python_module(const std::string& stage, const std::string& module,
                                      const std::vector<std::string>& module_args);

}  // namespace fact::cli
