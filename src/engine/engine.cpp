#include "fact/engine/engine.hpp"

#include <dlfcn.h>

#include <fstream>
#include <iostream>
#include <stdexcept>

#ifdef FACT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "fact/build_info.hpp"
#include "fact/compose/plan_writer.hpp"
#include "fact/discover/report.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/candidate_runner.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/realize/realizer_source.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/runtime/precision.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/subprocess.hpp"

namespace fact::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<TunedCall> tune_calls(const discover::Discovery& discovery, const PlanRequest& request,
                                  const std::string& precision, const realize::CompileOptions& compile) {
  realize::RealizerSource source(compile);
  realize::KernelCache cache;
  realize::BuildOptions build_options;
  build_options.jobs = request.jobs;
  build_options.show_progress = request.progress;
  build_options.title = "tune build";
  realize::BuildDriver driver(cache, build_options);
  realize::SubprocessRunner runner(engine_executable());
  realize::TuningDb db(request.tuning_db.value_or(realize::default_tuning_db_path()));
  realize::Tuner tuner(source, driver, runner, db);
  std::vector<TunedCall> tuned;
  for (size_t m = 0; m < discovery.matches.size(); ++m) {
    const discover::Match& match = discovery.matches[m];
    if (match.status != discover::MatchStatus::Accepted || !compose::selected(match, request.patterns)) continue;
    for (size_t c = 0; c < match.problems.size(); ++c) {
      TunedCall entry;
      entry.match = m;
      entry.call = c;
      entry.label = std::to_string(m + 1) +
                    (match.problems.size() > 1 ? std::string(1, static_cast<char>('a' + c)) : "") + " " +
                    problem_summary(match.problems[c]);
      if (request.progress) std::cerr << "\n== tune " << entry.label << "\n" << std::flush;
      try {
        realize::TuneRequest tune;
        tune.problem = match.problems[c];
        tune.precision = precision;
        tune.space = request.space;
        tune.max_candidates = request.tune;
        tune.baselines = request.baselines;
        tune.reuse_bucket = request.reuse_bucket;
        tune.show_progress = request.progress;
        tune.work_dir = request.out_dir / "tune" / (std::to_string(m + 1) + "_" + std::to_string(c));
        entry.result = tuner.tune(tune);
        realize::write_tune_report(*entry.result, request.out_dir / "tune");
      } catch (const std::exception& e) {
        entry.error = e.what();
      }
      tuned.push_back(std::move(entry));
    }
  }
  return tuned;
}

}  // namespace

discover::DiscoverOptions discover_options(const DiscoverSettings& request, const graph::Graph& captured) {
  discover::DiscoverOptions options;
  options.precision = request.precision.empty() ? discover::default_precision(captured) : request.precision;
  (void)runtime::parse_precision(options.precision);  // throws for an unknown mode
  options.device = request.device_profile ? load_device_profile(*request.device_profile)
                                          : default_device_profile();
  if (request.use_tuning_db) {
    realize::TuningDb db(request.tuning_db.value_or(realize::default_tuning_db_path()));
    for (const auto& record : db.all()) options.tuned_keys.insert(record.key.id());
    options.key_of = [](const Problem& problem, const std::string& precision) -> std::string {
      try {
        const realize::Realizer& realizer = realize::RealizerRegistry::global().for_problem(problem, precision);
        return realize::make_tuning_key(realizer, realizer.problem_class(problem, precision), problem,
                                        precision, build_info::kCutlassVersion)
            .id();
      } catch (const std::exception&) {
        return {};
      }
    };
  }
  return options;
}

std::string insufficient_driver_reason(bool driver_loads, int driver_version, int runtime_version) {
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  if (!driver_loads) return "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)";
  if (driver_version <= 0) return "the NVIDIA driver on this machine does not work (it reports no CUDA version)";
  return "the NVIDIA driver on this machine supports CUDA " + version(driver_version) +
         ", older than this engine's CUDA runtime " + version(runtime_version) + " (update the driver)";
}

bool cuda_driver_loads() {
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return false;
  ::dlclose(driver);
  return true;
}

std::optional<std::string> gpu_unavailable_reason() {
#ifdef FACT_HAVE_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) return "no CUDA GPU on this machine";
  if (err == cudaErrorInsufficientDriver) {
    // The runtime says "insufficient" also when there is no driver at all: tell the two apart.
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    return insufficient_driver_reason(cuda_driver_loads(), driver, runtime);
  }
  if (err != cudaSuccess) return std::string("no CUDA GPU usable (") + cudaGetErrorString(err) + ")";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cannot read device 0's properties";
  if (prop.major != 9) {
    return std::string("device 0 (") + prop.name + ") is not a Hopper GPU (sm_" +
           std::to_string(prop.major) + std::to_string(prop.minor) + "); kernels target sm_90a";
  }
  return std::nullopt;
#else
  return "this FACT engine was built without the CUDA runtime";
#endif
}

fs::path engine_executable() {
  if (const char* explicit_path = std::getenv("FACT_ENGINE"); explicit_path && *explicit_path) {
    return explicit_path;
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&engine_executable), &info) != 0 && info.dli_fname) {
    const fs::path here = fs::absolute(info.dli_fname);
    const fs::path beside = here.parent_path() / "fact";
    std::error_code ec;
    if (here.filename() == "fact" || fs::exists(beside, ec)) return here.filename() == "fact" ? here : beside;
  }
  return util::current_executable();
}

PlanResult make_plan(const PlanRequest& request) {
  if (request.graph.empty() || !fs::exists(request.graph)) {
    throw std::invalid_argument("no captured graph at '" + request.graph.string() + "'");
  }
  if (request.out_dir.empty()) throw std::invalid_argument("no output folder for the plan");
  if (request.space != "default" && request.space != "exhaustive") {
    throw std::invalid_argument("unknown tuning space '" + request.space + "' (default, exhaustive)");
  }
  fs::create_directories(request.out_dir);
  PlanResult result;
  result.captured = graph::load_graph(request.graph);
  result.options = discover_options({request.precision, request.device_profile, request.use_tuning_db,
                                     request.tuning_db},
                                    result.captured);
  const std::string& precision = result.options.precision;
  result.discovery = discover::discover(result.captured, result.options);
  util::write_file_atomically(
      request.out_dir / "discovery.json",
      discover::discovery_to_json(result.discovery, result.captured, result.options).dump(2) + "\n");

  const realize::CompileOptions compile_options = realize::default_compile_options();
  std::optional<std::string> cannot_compile;
  if (request.compile) cannot_compile = realize::compile_unavailable_reason(compile_options);
  if (!request.compile) result.skipped.push_back("compilation: not asked for");
  if (cannot_compile) result.skipped.push_back("compilation: " + *cannot_compile);

  if (request.tune > 0) {
    const std::optional<std::string> no_gpu = gpu_unavailable_reason();
    if (no_gpu) {
      result.skipped.push_back("tuning: " + *no_gpu);
    } else if (cannot_compile || !request.compile) {
      result.skipped.push_back("tuning: kernels cannot be compiled here");
    } else {
      result.tuning = tune_calls(result.discovery, request, precision, compile_options);
    }
  }

  // The accepted, selected matches are realized (tuned choices from the database).
  std::vector<discover::Match> to_realize = result.discovery.matches;
  for (auto& m : to_realize) {
    if (m.status == discover::MatchStatus::Accepted && !compose::selected(m, request.patterns)) {
      m.status = discover::MatchStatus::Declined;
    }
  }
  realize::RealizeOptions realize_options;
  realize_options.precision = precision;
  realize_options.out_dir = request.out_dir / "kernels";
  realize_options.compile = request.compile && !cannot_compile;
  realize_options.jobs = request.jobs;
  realize_options.show_progress = request.progress;
  realize_options.compile_options = compile_options;
  if (request.use_tuning_db) {
    realize_options.tuning_db = request.tuning_db.value_or(realize::default_tuning_db_path());
    realize_options.tuning_db_bucket = request.reuse_bucket;
  }
  result.realized = realize::realize_matches(to_realize, realize_options);

  compose::PlanContext context;
  context.precision = precision;
  context.device = request.device;
  context.inputs = request.inputs;
  context.capture = result.captured.source.value("capture", std::string());
  context.patterns = request.patterns;
  context.plan_dir = request.out_dir;
  context.notes = result.skipped;
  result.plan = compose::make_plan(result.captured, result.discovery, result.realized, context);
  result.plan_path = request.out_dir / "plan.json";
  util::write_file_atomically(result.plan_path, result.plan.dump(2) + "\n");
  return result;
}

}  // namespace fact::engine
