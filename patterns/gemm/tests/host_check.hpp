// Host checks of a rendered GEMM kernel's types (the compile tests of the steps that store D):
// the kernel's source up to its entry point (types only: nothing is instantiated for the device)
// followed by `check_main`, a host main() that walks the kernel's partitions through
// KERNEL_NAMESPACE::Kernel, compiled with nvcc as a standalone program and run.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/render.hpp"
#include "fact/util/atomic_file.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm::test {

struct HostCheckResult {
  bool built = false;  // false: `printed` is the build's reason and log
  int status = -1;     // the program's exit status (0: the check passed)
  std::string printed;  // what it printed (its verdict)
};

// Builds `spec`'s kernel types with `check_main` in `dir` and runs the program.
inline HostCheckResult run_host_check(const GemmSpec& spec, const std::string& check_main,
                                      const std::filesystem::path& dir, const realize::CompileOptions& options) {
  HostCheckResult result;
  realize::RenderedKernel kernel = realize::render_kernel(spec.to_kernel_spec(), options);
  const size_t end = kernel.source.find("}  // namespace " + kernel.entry_symbol + "_kernel");
  if (end == std::string::npos) {
    result.printed = "no kernel namespace in the rendered source:\n" + kernel.source;
    return result;
  }
  kernel.source = kernel.source.substr(0, end) + "}\n#define KERNEL_NAMESPACE " + kernel.entry_symbol +
                  "_kernel\n" + check_main;
  realize::CompileOptions host = options;
  host.standalone_main = true;
  const realize::CompileResult built = realize::compile_kernel(kernel, dir, host);
  if (!built.ok) {
    result.printed = built.reason + "\n" + built.log.substr(0, 20000);
    return result;
  }
  result.built = true;
  const std::string output = (built.output.parent_path() / "check.txt").string();
  result.status = std::system((built.output.string() + " > " + output + " 2>&1").c_str());
  result.printed = util::read_file(output);
  return result;
}

}  // namespace fact::gemm::test
