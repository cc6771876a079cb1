#include "fact/realize/realize_matches.hpp"

#include <map>
#include <stdexcept>

#include "fact/build_info.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/realize/tuning_db.hpp"
#include "fact/util/atomic_file.hpp"

namespace fact::realize {
namespace fs = std::filesystem;

namespace {

void compile_with_driver(std::vector<RealizedKernel>& kernels, const RealizeOptions& options) {
  KernelCache cache(options.cache_dir.empty() ? default_kernel_cache_dir() : options.cache_dir);
  BuildOptions build;
  build.jobs = options.jobs;
  build.show_progress = options.show_progress;
  build.console = options.console;
  build.title = "realize";
  std::vector<BuildJob> jobs;
  for (const auto& k : kernels) jobs.push_back(build_job(k.kernel, options.compile_options));
  BuildDriver driver(cache, build);
  const std::vector<BuildOutcome> outcomes = driver.build(jobs);
  for (size_t i = 0; i < kernels.size(); ++i) {
    kernels[i].status = std::string(build_status_name(outcomes[i].status));
    kernels[i].reason = outcomes[i].reason;
    kernels[i].library = outcomes[i].library;
    kernels[i].compile_seconds = outcomes[i].compile_seconds;
  }
}

void compile_serially(std::vector<RealizedKernel>& kernels, const RealizeOptions& options) {
  for (auto& k : kernels) {
    const CompileResult r = compile_kernel(k.kernel, options.out_dir, options.compile_options);
    k.status = r.ok ? "built" : "failed";
    k.reason = r.reason;
    k.library = r.ok ? r.output : fs::path();
    k.compile_seconds = r.seconds;
    k.registers = r.usage.registers;
  }
}

// The call's configuration: the tuning database's stored choice for its key (exact, then the
// bucket's nearest when allowed) when that still renders, else `default_spec`. Records where it
// came from in `call`.
KernelSpec choose_spec(const Problem& problem, const Realizer& realizer, const KernelSpec& default_spec,
                       const TuningDb* db, const RealizeOptions& options, RealizedCall& call) {
  const std::string cutlass_version =
      options.cutlass_version.empty() ? build_info::kCutlassVersion : options.cutlass_version;
  const TuningKey key = make_tuning_key(realizer, default_spec, problem, options.precision, cutlass_version);
  call.kernel_class = key.problem_class;
  if (db == nullptr) return default_spec;
  call.tuning_key = key.id();
  std::string source = "database";
  std::optional<TuningRecord> record = db->find_exact(key);
  if (!record && options.tuning_db_bucket) {
    record = db->find_in_bucket(key);
    source = "bucket";
  }
  if (!record) return default_spec;
  try {
    KernelSpec stored = KernelSpec::from_json(record->spec);
    (void)render_kernel(stored, options.compile_options);  // still renders with this CUTLASS
    call.config_source = source;
    std::string dims;
    for (size_t i = 0; i < record->key.dims.size(); ++i) {
      dims += (i ? "x" : "") + std::to_string(record->key.dims[i]);
    }
    call.tuned = {{"ms", record->ms},
                  {"rel_err", record->rel_err},
                  {"device", record->device},
                  {"date", record->date},
                  {"shape", dims}};
    return stored;
  } catch (const std::exception& e) {
    call.tuning_note = "stored choice " + record->config + " not used: " + e.what();
    return default_spec;
  }
}

nlohmann::json kernel_json(const RealizedKernel& k) {
  nlohmann::json j = {
      {"name", k.kernel.spec.name()},
      {"key", k.kernel.key},
      {"entry", k.kernel.entry_symbol},
      {"kind", k.kernel.spec.kind()},
      {"pattern", k.kernel.spec.pattern()},
      {"source", k.source_file.filename().string()},
      {"spec", k.kernel.spec.to_json()},
      {"status", k.status},
  };
  if (!k.reason.empty()) j["reason"] = k.reason;
  if (!k.library.empty()) j["library"] = k.library.string();
  if (k.status != "rendered") j["compile_seconds"] = k.compile_seconds;
  if (k.registers > 0) j["registers"] = k.registers;
  return j;
}

}  // namespace

size_t RealizeResult::failed_compiles() const {
  size_t failed = 0;
  for (const auto& k : kernels) failed += k.ok() ? 0 : 1;
  return failed;
}

RealizeResult realize_matches(const std::vector<discover::Match>& matches,
                              const RealizeOptions& options) {
  if (options.out_dir.empty()) throw std::invalid_argument("realize: no output folder given");
  fs::create_directories(options.out_dir);
  RealizeResult result;
  std::map<std::string, size_t> kernel_by_key;
  std::optional<TuningDb> db;
  if (options.tuning_db) db.emplace(*options.tuning_db);
  const RealizerRegistry& realizers = RealizerRegistry::global();
  for (size_t m = 0; m < matches.size(); ++m) {
    const discover::Match& match = matches[m];
    if (match.status != discover::MatchStatus::Accepted) continue;
    for (size_t c = 0; c < match.problems.size(); ++c) {
      const Problem& problem = match.problems[c];
      RealizedCall call;
      call.match = m;
      call.call = c;
      try {
        const Realizer& realizer = realizers.for_problem(problem, options.precision);
        const KernelSpec spec = choose_spec(problem, realizer,
                                            realizer.problem_class(problem, options.precision),
                                            db ? &*db : nullptr, options, call);
        RenderedKernel kernel = render_kernel(spec, options.compile_options);
        call.kernel_key = kernel.key;
        if (!kernel_by_key.count(kernel.key)) {
          RealizedKernel realized;
          realized.source_file = options.out_dir / (spec.name() + ".cu");
          util::write_file_atomically(realized.source_file, kernel.source);
          realized.kernel = std::move(kernel);
          kernel_by_key[realized.kernel.key] = result.kernels.size();
          result.kernels.push_back(std::move(realized));
        }
      } catch (const std::invalid_argument& e) {  // RenderError included
        call.error = e.what();
      }
      result.calls.push_back(std::move(call));
    }
  }

  if (options.compile && !result.kernels.empty()) {
    if (options.serial) {
      compile_serially(result.kernels, options);
    } else {
      compile_with_driver(result.kernels, options);
    }
  }

  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : result.kernels) kernels.push_back(kernel_json(k));
  nlohmann::json calls = nlohmann::json::array();
  for (const auto& c : result.calls) {
    const discover::Match& match = matches[c.match];
    const Problem& problem = match.problems[c.call];
    nlohmann::json j = {{"match", c.match},
                        {"rule", match.rule},
                        {"pattern", match.pattern},
                        {"call", c.call},
                        {"problem", problem_to_json(problem)}};
    if (!c.kernel_key.empty()) {
      const KernelSpec& spec = result.kernels[kernel_by_key.at(c.kernel_key)].kernel.spec;
      j["kernel"] = c.kernel_key;
      j["kernel_name"] = spec.name();
      j["config"] = spec.name();
      j["config_source"] = c.config_source;
      // The precision contract's bound for this call's output, for whoever verifies the kernel.
      j["tolerance"] = kind_of(problem).tolerance(problem.desc, options.precision);
      if (!c.tuned.is_null()) j["tuned"] = c.tuned;
    } else {
      j["error"] = c.error;
    }
    if (!c.tuning_key.empty()) j["tuning_key"] = c.tuning_key;
    if (!c.tuning_note.empty()) j["tuning_note"] = c.tuning_note;
    calls.push_back(std::move(j));
  }
  result.manifest = {
      {"schema", "fact.realize/2"},
      {"precision", options.precision},
      {"fact_version", build_info::kVersion},
      {"cutlass_version", cutlass_version_at(options.compile_options.cutlass_include)},
      {"arch", "sm_" + options.compile_options.arch},
      {"compiled", options.compile},
      {"tuning_db", options.tuning_db ? options.tuning_db->string() : std::string()},
      {"kernels", std::move(kernels)},
      {"calls", std::move(calls)},
  };
  util::write_file_atomically(options.out_dir / "manifest.json", result.manifest.dump(2) + "\n");
  return result;
}

const RealizedKernel* RealizeResult::kernel(const std::string& key) const {
  for (const auto& k : kernels) {
    if (k.kernel.key == key) return &k;
  }
  return nullptr;
}

}  // namespace fact::realize
