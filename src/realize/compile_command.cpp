#include "fact/realize/compile_command.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <system_error>

#include "fact/build_info.hpp"
#include "fact/realize/render.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/subprocess.hpp"

namespace fact::realize {
namespace fs = std::filesystem;

namespace {

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

std::string flag_with_path(const std::string& flag, const fs::path& path) {
  return flag + path.string();
}

}  // namespace

CompileOptions default_compile_options() {
  CompileOptions options;
  if (std::string nvcc = env_or_empty("FACT_NVCC"); !nvcc.empty()) {
    options.nvcc = nvcc;
  } else if (std::string(build_info::kNvcc).size() > 0) {
    options.nvcc = build_info::kNvcc;
  } else if (auto found = util::find_executable("nvcc")) {
    options.nvcc = *found;
  } else {
    options.nvcc = "nvcc";
  }
  if (std::string cutlass = env_or_empty("FACT_CUTLASS_DIR"); !cutlass.empty()) {
    options.cutlass_include = fs::path(cutlass) / "include";
    options.cutlass_util_include = fs::path(cutlass) / "tools" / "util" / "include";
  } else {
    options.cutlass_include = build_info::kCutlassInclude;
    options.cutlass_util_include = build_info::kCutlassUtilInclude;
  }
  const std::string source = env_or_empty("FACT_SOURCE_DIR");
  options.fact_root = source.empty() ? fs::path(build_info::kSourceDir) : fs::path(source);
  const std::string generated = env_or_empty("FACT_GENERATED_DIR");
  options.generated_include =
      generated.empty() ? fs::path(build_info::kGeneratedDir) : fs::path(generated);
  return options;
}

std::optional<std::string> compile_unavailable_reason(const CompileOptions& options) {
  std::error_code ec;
  const bool nvcc_ok = options.nvcc.has_parent_path()
                           ? fs::exists(options.nvcc, ec)
                           : util::find_executable(options.nvcc.string()).has_value();
  if (!nvcc_ok) return "nvcc not found (" + options.nvcc.string() + "); set FACT_NVCC";
  if (options.cutlass_include.empty() ||
      !fs::exists(options.cutlass_include / "cutlass" / "cutlass.h", ec)) {
    return "CUTLASS headers not found at '" + options.cutlass_include.string() +
           "' (pip install nvidia-cutlass, or set FACT_CUTLASS_DIR)";
  }
  if (!fs::exists(options.fact_root / "include" / "fact" / "core" / "fact_abi.h", ec)) {
    return "FACT headers not found under '" + options.fact_root.string() +
           "' (set FACT_SOURCE_DIR)";
  }
  if (!fs::exists(options.generated_include / "fact" / "gemm_epilogue_steps.def", ec)) {
    return "FACT's generated headers not found under '" + options.generated_include.string() +
           "' (configure the build, or set FACT_GENERATED_DIR)";
  }
  return std::nullopt;
}

std::vector<std::string> nvcc_command(const CompileOptions& o) {
  std::vector<std::string> argv = {
      o.nvcc.string(),
      "-std=" + o.cxx_standard,
      "-O3",
      "-DNDEBUG",  // CUTLASS device asserts would serialize wgmma (ptxas C7510)
      "-gencode=arch=compute_" + o.arch + ",code=sm_" + o.arch,
      "--expt-relaxed-constexpr",
      "-Xptxas=-v",  // register / spill report and the C7510 warning land in the log
      "--cudart=static",
      "-Xcompiler=-fPIC",
      "-Xcompiler=-fvisibility=hidden",  // only FACT_EXPORT symbols leave the library
      flag_with_path("-I", o.fact_root),
      flag_with_path("-I", o.fact_root / "include"),
      flag_with_path("-I", o.cutlass_include),
  };
  if (!o.generated_include.empty()) argv.push_back(flag_with_path("-I", o.generated_include));
  if (!o.cutlass_util_include.empty()) argv.push_back(flag_with_path("-I", o.cutlass_util_include));
  if (o.standalone_main) {
    argv.push_back("-DFACT_STANDALONE_MAIN");
  } else {
    argv.push_back("-shared");
  }
  argv.insert(argv.end(), o.extra_flags.begin(), o.extra_flags.end());
  argv.push_back("-o");
  argv.push_back(std::string(kOutputPlaceholder));
  argv.push_back(std::string(kSourcePlaceholder));
  // The standalone checker compares against cuBLAS (patterns/*/standalone_check.cuh); the
  // library after the source so the linker resolves it.
  if (o.standalone_main) argv.push_back("-lcublas");
  return argv;
}

std::string cutlass_version_at(const fs::path& cutlass_include) {
  std::ifstream in(cutlass_include / "cutlass" / "version.h");
  if (!in) return {};
  std::string major, minor, patch, line;
  const std::regex define(R"(#define\s+CUTLASS_(MAJOR|MINOR|PATCH)\s+(\d+))");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, define)) {
      if (m[1] == "MAJOR") major = m[2];
      if (m[1] == "MINOR") minor = m[2];
      if (m[1] == "PATCH") patch = m[2];
    }
  }
  if (major.empty() || minor.empty() || patch.empty()) return {};
  return major + "." + minor + "." + patch;
}

std::string compile_fingerprint(const CompileOptions& o) {
  const std::vector<std::pair<std::string, std::string>> roles = {
      {o.nvcc.string(), "<nvcc>"},
      {o.cutlass_util_include.string(), "<cutlass-util>"},
      {o.cutlass_include.string(), "<cutlass>"},
      {(o.fact_root / "include").string(), "<fact>/include"},
      {o.fact_root.string(), "<fact>"},
      {o.generated_include.string(), "<fact-generated>"},
  };
  std::string out = "flags:";
  for (std::string word : nvcc_command(o)) {
    for (const auto& [path, role] : roles) {
      if (path.empty()) continue;
      if (word == path) {
        word = role;
        break;
      }
      if (word.size() > 2 && word.compare(2, std::string::npos, path) == 0) {
        word = word.substr(0, 2) + role;
        break;
      }
    }
    out += " " + word;
  }
  out += "\ncompiler:" + compiler_identity_of(o.nvcc.string());
  out += "\ncutlass:" + cutlass_version_at(o.cutlass_include);
  out += "\narch:sm_" + o.arch;
  return out;
}

BuildJob build_job(const RenderedKernel& kernel, const CompileOptions& options) {
  BuildJob job;
  job.key = kernel.key;
  job.source = kernel.source;
  job.entry_symbol = kernel.entry_symbol;
  job.spec = kernel.spec.to_json();
  job.command = nvcc_command(options);
  job.label = kernel.spec.name();
  return job;
}

PtxasUsage parse_ptxas_usage(const std::string& log) {
  PtxasUsage usage;
  const std::regex registers(R"(Used (\d+) registers)");
  const std::regex spills(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, registers)) {
      usage.registers = std::max(usage.registers, std::stoi(m[1]));
    }
    if (std::regex_search(line, m, spills)) {
      usage.stack_frame_bytes = std::max(usage.stack_frame_bytes, std::stoi(m[1]));
      usage.spill_store_bytes = std::max(usage.spill_store_bytes, std::stoi(m[2]));
      usage.spill_load_bytes = std::max(usage.spill_load_bytes, std::stoi(m[3]));
    }
  }
  return usage;
}

CompileResult compile_kernel(const RenderedKernel& kernel, const fs::path& out_dir,
                             const CompileOptions& options) {
  fs::create_directories(out_dir);
  CompileResult result;
  const std::string stem = kernel.entry_symbol;
  result.source = out_dir / (stem + ".cu");
  result.output = out_dir / (options.standalone_main ? stem : stem + ".so");
  result.log_file = out_dir / (stem + ".log");
  util::write_file_atomically(result.source, kernel.source);
  std::error_code ec;
  fs::remove(result.output, ec);

  result.command = expand_command(nvcc_command(options), result.source, result.output);
  util::ProcessOptions process;
  process.output_file = result.log_file;
  process.timeout = options.timeout;
  const util::ProcessResult run = util::run_process(result.command, process);
  result.seconds = run.seconds;
  try {
    result.log = util::read_file(result.log_file);
  } catch (const std::exception&) {
    result.log.clear();
  }
  result.usage = parse_ptxas_usage(result.log);

  if (run.spawn_failed) {
    result.reason = "could not start " + result.command.front() + ": " + run.spawn_error;
  } else if (run.timed_out || run.term_signal != 0) {
    result.reason = "nvcc " + run.describe();
  } else if (auto problem = build_failure_reason(run.exit_code, fs::exists(result.output, ec),
                                                 result.log)) {
    result.reason = *problem;
  }
  result.ok = result.reason.empty();
  return result;
}

}  // namespace fact::realize
