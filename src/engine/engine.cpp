#include "fact/engine/engine.hpp"

#include <dlfcn.h>

#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>

#ifdef FACT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "fact/build_info.hpp"
#include "fact/compose/plan_writer.hpp"
#include "fact/discover/report.hpp"
#include "fact/engine/dynamic_plan.hpp"
#include "fact/graph/concretize.hpp"
#include "fact/graph/graph_json.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/candidate_runner.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/realize/realizer_source.hpp"
#include "fact/realize/tune_report.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/registry/registry.hpp"
#include "fact/registry/semantics.hpp"
#include "fact/engine/agent.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/sha256.hpp"
#include "fact/util/subprocess.hpp"

namespace fact::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<TunedCall> tune_calls(const discover::Discovery& discovery, const PlanRequest& request,
                                  core::PrecisionMode precision, const realize::CompileOptions& compile) {
  realize::RealizerSource source(compile);
  realize::KernelCache cache;
  realize::BuildOptions build_options;
  build_options.jobs = request.jobs;
  build_options.show_progress = request.progress;
  build_options.console = request.console;
  build_options.title = "tune build";
  realize::BuildDriver driver(cache, build_options);
  realize::SubprocessRunner runner(engine_executable());
  realize::TuningDb db(request.tuning_db.value_or(realize::default_tuning_db_path()));
  realize::Tuner tuner(source, driver, runner, db);
  std::vector<TunedCall> tuned;
  std::vector<realize::TuneRequest> tunes;
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
      realize::TuneRequest tune;
      tune.problem = match.problems[c];
      tune.precision = precision;
      tune.space = request.space;
      tune.max_candidates = request.tune;
      tune.baselines = request.baselines;
      tune.reuse_bucket = request.reuse_bucket;
      tune.show_progress = request.progress;
      tune.console = request.console;
      tune.work_dir = request.out_dir / "tune" / (std::to_string(m + 1) + "_" + std::to_string(c));
      tuned.push_back(std::move(entry));
      tunes.push_back(std::move(tune));
    }
  }
  // Every problem's candidates compiled side by side first (one parallel build), then each
  // problem timed in turn: the per-problem loop below then only runs kernels.
  try {
    tuner.prebuild(tunes);
  } catch (const std::exception& e) {
    if (request.progress) {
      util::Console& console = request.console ? *request.console : util::stderr_console();
      console.line(std::string("tune: building all candidates at once failed (") + e.what() +
                   "); each problem builds its own");
    }
  }
  for (size_t i = 0; i < tuned.size(); ++i) {
    TunedCall& entry = tuned[i];
    if (request.progress) {
      util::Console& console = request.console ? *request.console : util::stderr_console();
      console.line("== tune " + entry.label);
    }
    try {
      entry.result = tuner.tune(tunes[i]);
      realize::write_tune_report(*entry.result, request.out_dir / "tune");
    } catch (const std::exception& e) {
      entry.error = e.what();
    }
  }
  return tuned;
}


// The matches a verified registry source realizes on `arch` (the registry classified them
// against that entry): each becomes one "subgraph" call of the entry's kernel, built here
// (host sources always: the CPU path needs them; CUDA sources when compiling). `planned` gets
// the rewritten matches; `realized` the kernels and calls.
struct SourcedMatch {
  size_t match = 0;
  registry::Entry entry;
  json build;
};

std::vector<SourcedMatch> realize_from_registry(discover::Discovery& planned, const graph::Graph& captured,
                                                const PlanRequest& request, const std::string& arch,
                                                realize::RealizeResult& realized, std::vector<std::string>& notes) {
  std::vector<SourcedMatch> sourced;
  if (!request.use_registry) return sourced;
  const registry::Registry reg(request.registry_dir.value_or(registry::default_registry_dir()));
  for (size_t i = 0; i < planned.matches.size(); ++i) {
    discover::Match& m = planned.matches[i];
    // Declined and pending matches too: a verified kernel realizes what no template takes (a
    // match that overlaps another is left to PyTorch by the executor, with the reason).
    if (!compose::selected(m, request.patterns) || m.nodes.empty() || m.outputs.empty()) continue;
    const std::optional<registry::Entry> entry = registry::plannable_source(m, reg, arch);
    if (!entry) continue;
    const std::string override_reason = registry::speed_override_reason(entry->doc);
    if (!override_reason.empty())
      notes.push_back("registry entry " + entry->id() + " realizes #" + std::to_string(i + 1) +
                      " under a speed override (not timed faster than PyTorch): " + override_reason);
    const json& source = entry->doc.at("source");
    const std::string device = source.value("device", std::string("host"));
    SourcedMatch s{i, *entry, json::object()};
    registry::Semantics semantics;
    try {
      semantics = registry::semantics_of(captured, m.nodes, m.outputs);
    } catch (const std::exception& e) {
      notes.push_back("registry entry " + entry->id() + " not used for #" + std::to_string(i + 1) + ": " + e.what());
      continue;
    }
    double bytes = 0.0;
    for (const auto& id : semantics.fragment.at("inputs")) {
      const auto& d = captured.value(id.get<std::string>()).desc;
      bytes += double(d.numel()) * graph::dtype_bytes(d.dtype);
    }
    m.problems = {Problem{"subgraph", {{"operands", semantics.fragment.at("inputs")},
                                       {"results", m.outputs},
                                       {"dtype", graph::dtype_name(m.dtype)},
                                       {"rule", m.rule},
                                       {"min_bytes", bytes}}}};
    m.status = discover::MatchStatus::Accepted;
    m.reason.clear();
    realize::RealizedCall call;
    call.match = i;
    call.call = 0;
    call.config_source = "registry";
    const bool build = device == "host" || request.compile;
    if (build) {
      SourceBuild job;
      job.source = source.at("text").get<std::string>();
      job.device = device;
      job.kind = source.value("abi", std::string("subgraph"));
      job.name = "registry_" + m.rule;
      s.build = build_source(job);
    } else {
      s.build = {{"status", "rendered"}, {"reason", "not compiled (compilation not asked for)"}};
    }
    const std::string status = s.build.value("status", std::string("failed"));
    if (status == "unavailable") {
      call.error = "registry entry " + entry->id() + ": " + s.build.value("reason", std::string());
    } else {
      realize::RealizedKernel kernel;
      const std::string key = s.build.value("key", "registry-" + util::sha256_hex(entry->id()));
      kernel.kernel.spec = realize::KernelSpec("subgraph", m.pattern, "registry_" + m.rule,
                                               {{"registry_entry", entry->id()}, {"device", device}});
      kernel.kernel.key = key;
      kernel.kernel.entry_symbol = s.build.value("entry", std::string());
      kernel.status = status;
      kernel.reason = s.build.value("reason", std::string());
      kernel.library = s.build.value("library", std::string());
      if (!realized.kernel(key)) realized.kernels.push_back(kernel);
      call.kernel_key = key;
      call.tuned = entry->doc.value("tuned", json::array()).empty() ? json() : entry->doc.at("tuned").back();
    }
    realized.calls.push_back(call);
    sourced.push_back(std::move(s));
  }
  return sourced;
}

// The request's graph document when it declares symbols, else nullopt (a file that is not
// valid JSON is left to the loader, which reports it).
std::optional<json> symbolic_document(const PlanRequest& request) {
  if (request.graph_document) {
    if (graph::is_symbolic(*request.graph_document)) return request.graph_document;
    return std::nullopt;
  }
  std::ifstream in(request.graph);
  json document = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !graph::is_symbolic(document)) return std::nullopt;
  return document;
}

}  // namespace

discover::DiscoverOptions discover_options(const DiscoverSettings& request, const graph::Graph& captured) {
  discover::DiscoverOptions options;
  options.precision = request.precision.value_or(discover::default_precision(captured));
  options.device = request.device_profile ? load_device_profile(*request.device_profile)
                                          : default_device_profile();
  if (request.use_tuning_db) {
    realize::TuningDb db(request.tuning_db.value_or(realize::default_tuning_db_path()));
    for (const auto& record : db.all()) options.tuned_keys.insert(record.key.id());
    options.key_of = [](const Problem& problem, core::PrecisionMode precision) -> std::string {
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
  options.arch = request.arch.empty() ? registry::kHopperArch : request.arch;
  if (request.use_registry) {
    const registry::Registry reg(request.registry_dir.value_or(registry::default_registry_dir()));
    auto entries = std::make_shared<const std::vector<registry::Entry>>(reg.entries(true));
    options.registry = reg.dir().string() + " (version " + std::to_string(reg.version()) + ", " +
                       std::to_string(entries->size()) + " entries)";
    options.classify_match = [entries](const discover::Match& m, const graph::Graph& captured,
                                       const discover::DiscoverOptions& o) {
      return registry::classify(m, captured,
                                registry::covering(*entries, m.rule, m.pattern, std::string(graph::dtype_name(m.dtype)), o.arch),
                                o);
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

PlanResult make_plan(const PlanRequest& request, const DiscoveredHook& on_discovered) {
  if (!request.graph_document && (request.graph.empty() || !fs::exists(request.graph))) {
    throw std::invalid_argument("no captured graph at '" + request.graph.string() + "'");
  }
  if (request.out_dir.empty()) throw std::invalid_argument("no output folder for the plan");
  if (request.space != "default" && request.space != "exhaustive") {
    throw std::invalid_argument("unknown tuning space '" + request.space + "' (default, exhaustive)");
  }
  // A graph that declares ranges is planned for the whole range (dynamic_plan.hpp), through
  // static plans of it at chosen sizes.
  if (std::optional<json> symbolic = symbolic_document(request)) {
    return make_dynamic_plan(request, *symbolic, on_discovered);
  }
  fs::create_directories(request.out_dir);
  PlanResult result;
  result.captured = request.graph_document ? graph::graph_from_json(*request.graph_document)
                                          : graph::load_graph(request.graph);
  const std::string arch = request.device == "cpu" ? registry::kHostArch : registry::kHopperArch;
  result.options = discover_options({request.precision, request.device_profile, request.use_tuning_db,
                                     request.tuning_db, request.use_registry, request.registry_dir, arch},
                                    result.captured);
  result.options.padded_results = request.padded_results;
  // Opt-in rules (rule.hpp's Rule::opt_in) accept only what the selection names.
  if (request.patterns) result.options.opt_in.insert(request.patterns->begin(), request.patterns->end());
  const core::PrecisionMode precision = result.options.precision;
  result.discovery = discover::discover(result.captured, result.options);
  util::write_file_atomically(
      request.out_dir / "discovery.json",
      discover::discovery_to_json(result.discovery, result.captured, result.options).dump(2) + "\n");
  if (on_discovered) on_discovered(result);

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

  // Matches a verified registry source covers are realized by it; the other accepted,
  // selected matches by the templates (tuned choices from the database).
  discover::Discovery planned = result.discovery;
  realize::RealizeResult from_registry;
  const std::vector<SourcedMatch> sourced =
      realize_from_registry(planned, result.captured, request, arch, from_registry, result.skipped);
  std::vector<discover::Match> to_realize = result.discovery.matches;
  for (auto& m : to_realize) {
    if (m.status == discover::MatchStatus::Accepted && !compose::selected(m, request.patterns)) {
      m.status = discover::MatchStatus::Declined;
    }
  }
  for (const auto& s : sourced) to_realize[s.match].status = discover::MatchStatus::Declined;
  realize::RealizeOptions realize_options;
  realize_options.precision = precision;
  realize_options.out_dir = request.out_dir / "kernels";
  realize_options.compile = request.compile && !cannot_compile;
  realize_options.jobs = request.jobs;
  realize_options.show_progress = request.progress;
  realize_options.console = request.console;
  realize_options.compile_options = compile_options;
  if (request.use_tuning_db) {
    realize_options.tuning_db = request.tuning_db.value_or(realize::default_tuning_db_path());
    realize_options.tuning_db_bucket = request.reuse_bucket;
  }
  result.realized = realize::realize_matches(to_realize, realize_options);
  for (auto& kernel : from_registry.kernels) result.realized.kernels.push_back(std::move(kernel));
  for (auto& call : from_registry.calls) result.realized.calls.push_back(std::move(call));

  compose::PlanContext context;
  context.precision = precision;
  context.device = request.device;
  context.inputs = request.inputs;
  context.capture = result.captured.source.value("capture", std::string());
  context.patterns = request.patterns;
  context.plan_dir = request.out_dir;
  context.notes = result.skipped;
  result.plan = compose::make_plan(result.captured, planned, result.realized, context);
  // What the registry said about each replacement; kernels built for the host say so (the CPU
  // path runs them instead of the host reference).
  for (auto& r : result.plan["replacements"]) {
    const size_t id = r.value("id", size_t{0});
    if (id >= result.discovery.matches.size()) continue;
    r["classification_reason"] = result.discovery.matches[id].classification_reason;
    r["registry_entry"] = result.discovery.matches[id].registry_entry;
    for (const auto& s : sourced) {
      if (s.match != id) continue;
      r["realized_by"] = "registry entry " + s.entry.id();
      // Its speed as measured when it entered (the latest timing record), and the override it
      // is used under, if any: the executor refuses one recorded slower without an override.
      const json tuned = s.entry.doc.value("tuned", json::array());
      const std::string override_reason = registry::speed_override_reason(s.entry.doc);
      r["registry_speed"] = {{"measured", tuned.is_array() && !tuned.empty() ? tuned.back() : json()},
                             {"speed_override", override_reason.empty() ? json() : json(override_reason)}};
    }
  }
  for (const auto& s : sourced) {
    const std::string key = s.build.value("key", std::string());
    if (!key.empty() && result.plan["kernels"].contains(key)) {
      result.plan["kernels"][key]["device"] = s.entry.doc.at("source").value("device", std::string("host"));
      result.plan["kernels"][key]["registry_entry"] = s.entry.id();
    }
  }
  result.plan_path = request.out_dir / "plan.json";
  util::write_file_atomically(result.plan_path, result.plan.dump(2) + "\n");
  return result;
}

}  // namespace fact::engine
