// The tuning database: the chosen kernel parameters per problem, not
// binaries. One JSON file (default <fact cache root>/tuning_db.json, schema "fact.tuning/1"):
//
//   {"schema": "fact.tuning/1",
//    "entries": {"<TuningKey::id()>": {"key": {...}, "bucket": "<TuningKey::bucket_id()>",
//                                       "spec": {KernelSpec JSON}, "config": "<spec name>",
//                                       "kernel_key": "...", "ms": 0.41, "tflops": 335.2,
//                                       "rel_err": 1e-6, "device": "...", "date": "...",
//                                       "candidates": 24, "verified": 20}}}
//
// Keys: (kind, pattern, the problem's tuning dims, its class as the realizer spells it (dtypes,
// layouts, epilogue), arch, CUTLASS version, precision). The dims are exact; the bucket rounds
// every dimension UP to the next power of two (3000 -> 4096, 4096 -> 4096, 1 -> 1), so a
// lookup for an unseen shape can reuse the choice made for the nearest tuned shape in the same
// bucket (nearest = smallest sum over the dimensions of |log2(a / b)|). Updates are read-modify-write under an exclusive flock on
// "<file>.lock" with an atomic rename, so concurrent tuners never lose each other's entries.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/problem/problem.hpp"
#include "fact/realize/kernel_spec.hpp"
#include "fact/realize/realizer.hpp"

namespace fact::realize {

inline constexpr const char* kTuningDbSchema = "fact.tuning/1";
inline constexpr const char* kTargetArch = "sm_90a";

struct TuningKey {
  std::string kind;             // problem kind: "gemm"
  std::string pattern;          // the realizer's pattern: "gemm", "gemm_f32_strict"
  std::vector<int64_t> dims;    // the kind's tuning dims (gemm: m, n, k, batch)
  std::string problem_class;    // the realizer's class token: "bf16.bf16.bf16.f32|tnt|bias"
  std::string arch = kTargetArch;
  std::string cutlass_version;  // "4.2.0"
  // Spelled by its name in id() and JSON ("strict", "tf32", "native"), as database files hold it.
  core::PrecisionMode precision = core::PrecisionMode::Strict;

  // Exact identity: every field. "gemm|4096x4096x4096x1|bf16.bf16.bf16.f32|tnt|bias|sm_90a|cutlass4.2.0|native"
  std::string id() const;
  // The same with the dims replaced by their bucket: "gemm|b4096x4096x4096x1|...".
  std::string bucket_id() const;
  nlohmann::json to_json() const;
  static TuningKey from_json(const nlohmann::json& j);
  bool operator==(const TuningKey&) const = default;
};

// Smallest power of two >= v (v >= 1); 1 for v <= 1.
int64_t round_up_to_power_of_two(int64_t v);

// The key for tuning `problem` with `realizer`'s class `problem_class` in `precision`.
TuningKey make_tuning_key(const Realizer& realizer, const KernelSpec& problem_class,
                          const Problem& problem, core::PrecisionMode precision,
                          const std::string& cutlass_version);

struct TuningRecord {
  TuningKey key;
  nlohmann::json spec;      // the chosen KernelSpec (to_json)
  std::string config;       // its readable name
  std::string kernel_key;   // kernel cache key when chosen (informational: the key is recomputed)
  double ms = 0.0;          // median time of the chosen kernel
  double tflops = 0.0;
  double rel_err = 0.0;
  std::string device;       // device name it was measured on
  std::string date;         // UTC ISO 8601
  int candidates = 0;       // configurations considered
  int verified = 0;         // configurations that built, verified and timed

  nlohmann::json to_json() const;
  static TuningRecord from_json(const nlohmann::json& j);
};

// <fact cache root>/tuning_db.json
std::filesystem::path default_tuning_db_path();

class TuningDb {
 public:
  explicit TuningDb(std::filesystem::path file = default_tuning_db_path());
  const std::filesystem::path& file() const { return file_; }

  // The entry for exactly `key`.
  std::optional<TuningRecord> find_exact(const TuningKey& key) const;
  // The entry of the nearest tuned shape in key's bucket (another shape; the exact entry
  // included when present).
  std::optional<TuningRecord> find_in_bucket(const TuningKey& key) const;
  // Inserts or replaces the entry for record.key.
  void store(const TuningRecord& record);
  // Removes the entry for `key`; false when there was none.
  bool erase(const TuningKey& key);
  std::vector<TuningRecord> all() const;

 private:
  // Parsed entries; an unreadable or malformed file reads as empty (and is moved aside, with a
  // note on stderr, by the next store).
  nlohmann::json load_entries(bool* malformed = nullptr) const;
  std::filesystem::path file_;
};

}  // namespace fact::realize
