#include "fact/realize/tuning_db.hpp"

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

#include "fact/realize/kernel_cache.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/file_lock.hpp"

namespace fact::realize {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string dims_text(const std::vector<int64_t>& dims) {
  std::ostringstream text;
  for (size_t i = 0; i < dims.size(); ++i) text << (i ? "x" : "") << dims[i];
  return text.str();
}

std::string join_key(const TuningKey& key, const std::string& shape) {
  std::ostringstream text;
  text << key.pattern << "|" << shape << "|" << key.problem_class << "|" << key.arch << "|cutlass"
       << key.cutlass_version << "|" << core::precision_name(key.precision);
  return text.str();
}

double shape_distance(const TuningKey& a, const TuningKey& b) {
  if (a.dims.size() != b.dims.size()) return std::numeric_limits<double>::infinity();
  double distance = 0.0;
  for (size_t i = 0; i < a.dims.size(); ++i) {
    distance += std::fabs(std::log2(double(std::max<int64_t>(a.dims[i], 1)) /
                                    double(std::max<int64_t>(b.dims[i], 1))));
  }
  return distance;
}

fs::path lock_file_for(const fs::path& file) { return fs::path(file.string() + ".lock"); }

}  // namespace

int64_t round_up_to_power_of_two(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

std::string TuningKey::id() const { return join_key(*this, dims_text(dims)); }

std::string TuningKey::bucket_id() const {
  std::vector<int64_t> rounded;
  for (int64_t d : dims) rounded.push_back(round_up_to_power_of_two(d));
  return join_key(*this, "b" + dims_text(rounded));
}

json TuningKey::to_json() const {
  return {{"kind", kind},   {"pattern", pattern}, {"dims", dims},
          {"class", problem_class}, {"arch", arch}, {"cutlass", cutlass_version},
          {"precision", precision}};
}

TuningKey TuningKey::from_json(const json& j) {
  TuningKey key;
  key.kind = j.at("kind").get<std::string>();
  key.pattern = j.at("pattern").get<std::string>();
  key.dims = j.at("dims").get<std::vector<int64_t>>();
  key.problem_class = j.at("class").get<std::string>();
  key.arch = j.at("arch").get<std::string>();
  key.cutlass_version = j.at("cutlass").get<std::string>();
  key.precision = core::parse_precision(j.at("precision").get<std::string>());
  return key;
}

TuningKey make_tuning_key(const Realizer& realizer, const KernelSpec& problem_class,
                          const Problem& problem, core::PrecisionMode precision,
                          const std::string& cutlass_version) {
  TuningKey key;
  key.kind = problem.kind;
  key.pattern = problem_class.pattern();
  key.dims = kind_of(problem).tuning_dims(problem.desc);
  key.problem_class = realizer.class_token(problem_class);
  key.arch = kTargetArch;
  key.cutlass_version = cutlass_version;
  key.precision = precision;
  return key;
}

json TuningRecord::to_json() const {
  return {{"key", key.to_json()},     {"bucket", key.bucket_id()}, {"spec", spec},
          {"config", config},         {"kernel_key", kernel_key},  {"ms", ms},
          {"tflops", tflops},         {"rel_err", rel_err},        {"device", device},
          {"date", date},             {"candidates", candidates},  {"verified", verified}};
}

TuningRecord TuningRecord::from_json(const json& j) {
  TuningRecord r;
  r.key = TuningKey::from_json(j.at("key"));
  r.spec = j.at("spec");
  r.config = j.value("config", std::string());
  r.kernel_key = j.value("kernel_key", std::string());
  r.ms = j.value("ms", 0.0);
  r.tflops = j.value("tflops", 0.0);
  r.rel_err = j.value("rel_err", 0.0);
  r.device = j.value("device", std::string());
  r.date = j.value("date", std::string());
  r.candidates = j.value("candidates", 0);
  r.verified = j.value("verified", 0);
  return r;
}

fs::path default_tuning_db_path() { return fact_cache_root() / "tuning_db.json"; }

TuningDb::TuningDb(fs::path file) : file_(std::move(file)) {}

json TuningDb::load_entries(bool* malformed) const {
  if (malformed) *malformed = false;
  std::error_code error;
  if (!fs::exists(file_, error)) return json::object();
  try {
    json doc = json::parse(util::read_file(file_));
    if (doc.value("schema", "") != kTuningDbSchema || !doc.contains("entries") || !doc["entries"].is_object()) {
      throw std::runtime_error("not a " + std::string(kTuningDbSchema) + " file");
    }
    return doc["entries"];
  } catch (const std::exception&) {
    if (malformed) *malformed = true;
    return json::object();
  }
}

std::optional<TuningRecord> TuningDb::find_exact(const TuningKey& key) const {
  json entries = load_entries();
  auto it = entries.find(key.id());
  if (it == entries.end()) return std::nullopt;
  try {
    return TuningRecord::from_json(*it);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<TuningRecord> TuningDb::find_in_bucket(const TuningKey& key) const {
  std::string bucket = key.bucket_id();
  std::optional<TuningRecord> best;
  double best_distance = std::numeric_limits<double>::infinity();
  json entries = load_entries();
  for (const auto& [id, entry] : entries.items()) {
    if (!entry.is_object() || entry.value("bucket", "") != bucket) continue;
    try {
      TuningRecord record = TuningRecord::from_json(entry);
      if (record.key.bucket_id() != bucket) continue;
      double distance = shape_distance(record.key, key);
      if (distance < best_distance) {
        best_distance = distance;
        best = std::move(record);
      }
    } catch (const std::exception&) {
    }
  }
  return best;
}

void TuningDb::store(const TuningRecord& record) {
  auto lock = util::FileLock::acquire(lock_file_for(file_));
  bool malformed = false;
  json entries = load_entries(&malformed);
  if (malformed) {
    fs::path aside = file_.string() + ".corrupt-" + util::unique_suffix();
    std::error_code error;
    fs::rename(file_, aside, error);
    std::cerr << "fact: tuning database " << file_ << " was unreadable; moved to " << aside << "\n";
  }
  TuningRecord stored = record;
  if (stored.date.empty()) stored.date = util::utc_timestamp();
  entries[stored.key.id()] = stored.to_json();
  json doc = {{"schema", kTuningDbSchema}, {"entries", entries}};
  util::write_file_atomically(file_, doc.dump(2) + "\n");
}

bool TuningDb::erase(const TuningKey& key) {
  auto lock = util::FileLock::acquire(lock_file_for(file_));
  json entries = load_entries();
  if (entries.erase(key.id()) == 0) return false;
  json doc = {{"schema", kTuningDbSchema}, {"entries", entries}};
  util::write_file_atomically(file_, doc.dump(2) + "\n");
  return true;
}

std::vector<TuningRecord> TuningDb::all() const {
  std::vector<TuningRecord> records;
  json entries = load_entries();
  for (const auto& [id, entry] : entries.items()) {
    try {
      records.push_back(TuningRecord::from_json(entry));
    } catch (const std::exception&) {
    }
  }
  return records;
}

}  // namespace fact::realize
