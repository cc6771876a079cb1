// Host checks of rendered GEMM kernels' types (the compile tests of the steps that store D):
// each kernel's namespace from its rendered source (types only: nothing is instantiated for the
// device), then a check template that walks a kernel's partitions and a main() that runs it for
// every kernel, compiled with nvcc as one standalone program and run. One program for several
// kernels parses CUTLASS's headers once: most of a compile's minutes.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

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

// Builds the kernel types of every spec in `specs` into one program (the headers parsed once)
// with `check_template`, the definition of `template <class K> int check()` (0: the check
// passed; what it prints is its verdict), and a main() that prints each spec's name and runs
// check<Kernel>() for it; compiles the program in `dir` and runs it. `status` is 0 only when
// every kernel's check returned 0.
inline HostCheckResult run_host_checks(const std::vector<GemmSpec>& specs, const std::string& check_template,
                                       const std::filesystem::path& dir, const realize::CompileOptions& options) {
  HostCheckResult result;
  realize::RenderedKernel program;
  std::string kernels, calls;
  for (const GemmSpec& spec : specs) {
    const realize::RenderedKernel kernel = realize::render_kernel(spec.to_kernel_spec(), options);
    const std::string closing = "}  // namespace " + kernel.entry_symbol + "_kernel";
    const size_t begin = kernel.source.find("namespace " + kernel.entry_symbol + "_kernel {");
    const size_t end = kernel.source.find(closing);
    if (begin == std::string::npos || end == std::string::npos) {
      result.printed = "no kernel namespace in the rendered source:\n" + kernel.source;
      return result;
    }
    if (program.source.empty()) {
      program = kernel;
      program.source = kernel.source.substr(0, begin);  // the includes, once
    }
    kernels += kernel.source.substr(begin, end + closing.size() - begin) + "\n";
    calls += "  std::printf(\"" + spec.name() + ": \");\n  std::fflush(stdout);\n  failed |= check<" +
             kernel.entry_symbol + "_kernel::Kernel>();\n  std::fflush(stdout);\n";
  }
  program.source += kernels + "#include <cstdio>\n" + check_template +
                    "\nint main() {\n  int failed = 0;\n" + calls + "  return failed;\n}\n";
  realize::CompileOptions host = options;
  host.standalone_main = true;
  const realize::CompileResult built = realize::compile_kernel(program, dir, host);
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
