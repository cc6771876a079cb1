// Planning a declared dynamic range: samples, the same-replacement check, the fit of every size
// in each call, buckets, and the merged plan (docs/dynamic_shapes.md).
#include "fact/engine/dynamic_plan.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <cstring>
#include <set>
#include <stdexcept>

#include "fact/engine/size_fit.hpp"
#include "fact/realize/build_driver.hpp"
#include "fact/realize/compile_command.hpp"
#include "fact/realize/kernel_cache.hpp"
#include "fact/util/atomic_file.hpp"

namespace fact::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Assignment = core::SizeAssignment;

// One static plan of the graph at an assignment.
struct Sample {
  Assignment at;
  json plan;
};

// Removes the scratch folder however planning ends.
struct ScratchFolder {
  fs::path path;
  ~ScratchFolder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

std::vector<uint8_t> hex_bytes(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  auto digit = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  return out;
}

// The little-endian signed integer of `width` bytes at `offset`.
int64_t read_int(const std::vector<uint8_t>& bytes, size_t offset, size_t width) {
  uint64_t raw = 0;
  for (size_t i = 0; i < width; ++i) raw |= uint64_t(bytes.at(offset + i)) << (8 * i);
  if (width < 8 && (raw >> (8 * width - 1)) & 1) raw |= ~uint64_t(0) << (8 * width);
  return static_cast<int64_t>(raw);
}

const json* find_replacement(const json& plan, const json& nodes) {
  for (const auto& r : plan.at("replacements"))
    if (r.at("nodes") == nodes) return &r;
  return nullptr;
}

// Why a sample's replacement is not the hint's (empty when it is the same).
std::string difference(const json& hint, const json* sample) {
  if (sample == nullptr) return "the replaced nodes are not recognized as one replacement";
  const std::string status = sample->value("status", std::string());
  const std::string reason = sample->value("reason", std::string());
  if (status == "declined" && !reason.empty()) return reason;
  if (status != "planned") return status + (reason.empty() ? std::string() : ": " + reason);
  if (sample->at("rule") != hint.at("rule")) return "planned by rule " + sample->at("rule").get<std::string>();
  const json& a = hint.at("calls");
  const json& b = sample->at("calls");
  if (a.size() != b.size()) return "planned as " + std::to_string(b.size()) + " calls";
  for (size_t c = 0; c < a.size(); ++c) {
    if (a[c].at("kind") != b[c].at("kind")) return "call " + std::to_string(c) + " is a " + b[c].at("kind").get<std::string>() + " call";
    if (a[c].at("args").at("size") != b[c].at("args").at("size"))
      return "call " + std::to_string(c) + "'s argument image has " + b[c].at("args").at("size").dump() + " bytes";
    // A kernel serves every size of the range only when one kernel class covers them all (e.g.
    // a GEMM whose D rows are unaligned at odd sizes needs another class than at even ones).
    const std::string class_a = a[c].value("kernel_class", std::string());
    const std::string class_b = b[c].value("kernel_class", std::string());
    if (class_a != class_b)
      return "call " + std::to_string(c) + " needs kernels of class '" + class_b + "' there, '" + class_a +
             "' at the hint (declare a multiple that keeps one class)";
  }
  return {};
}

// The fit of one size over the samples: the factorial ones fit, every sample checks.
class SizeFitter {
 public:
  SizeFitter(std::vector<std::string> symbols, std::vector<std::array<int64_t, 2>> sizes,
             const std::vector<Sample>& samples, size_t factorial)
      : symbols_(std::move(symbols)), sizes_(std::move(sizes)), samples_(samples), factorial_(factorial) {}

  // `value_at(i)` is the size in samples_[i]. Throws std::runtime_error naming `what` and the
  // values seen when the size is no such polynomial.
  core::Poly fit(const std::string& what, const std::function<int64_t(size_t)>& value_at) const {
    std::vector<int64_t> values(factorial_);
    for (size_t i = 0; i < factorial_; ++i) values[i] = value_at(i);
    const std::optional<core::Poly> poly = core_fit(values);
    for (size_t i = 0; poly && i < samples_.size(); ++i) {
      if (poly->evaluate(samples_[i].at) != value_at(i)) return fail(what, value_at, poly);
    }
    if (!poly) return fail(what, value_at, poly);
    return *poly;
  }
  // "batch=65, seq=129": the sizes of samples_[i].
  std::string at_text(size_t i) const { return graph::assignment_text(samples_[i].at, symbols_); }

 private:
  std::optional<core::Poly> core_fit(const std::vector<int64_t>& values) const {
    return fit_multilinear(symbols_, sizes_, values);
  }

  [[noreturn]] core::Poly fail(const std::string& what, const std::function<int64_t(size_t)>& value_at,
                               const std::optional<core::Poly>& poly) const {
    std::string seen;
    for (size_t i = 0; i < samples_.size(); ++i)
      seen += (seen.empty() ? "" : "; ") + std::to_string(value_at(i)) + " at " +
              graph::assignment_text(samples_[i].at, symbols_);
    throw std::runtime_error(what + " is not a polynomial of degree <= 1 in each size" +
                             (poly ? " (fitted " + poly->to_expr() + ")" : std::string()) + ": " + seen);
  }

  std::vector<std::string> symbols_;
  std::vector<std::array<int64_t, 2>> sizes_;
  const std::vector<Sample>& samples_;
  size_t factorial_;
};

// An integer, or {"expr", "poly"} when the size varies.
json size_json(const core::Poly& poly) {
  if (poly.is_constant()) return poly.constant_value();
  return poly.to_json();
}

// Fits a list of sizes (a shape or stride) at `path` inside each sample's call.
json fit_list(const SizeFitter& fitter, const std::vector<const json*>& calls, const std::string& what,
              const std::function<const json*(const json&)>& list_of) {
  const json* first = list_of(*calls.front());
  if (first == nullptr) return json();
  for (const json* call : calls) {
    const json* list = list_of(*call);
    if (list == nullptr || list->size() != first->size())
      throw std::runtime_error(what + " has another rank at some sizes");
  }
  json out = json::array();
  for (size_t d = 0; d < first->size(); ++d) {
    out.push_back(size_json(fitter.fit(what + "[" + std::to_string(d) + "]", [&](size_t i) {
      return (*list_of(*calls[i]))[d].get<int64_t>();
    })));
  }
  return out;
}

// Makes `call` (the hint's) symbolic from the same call in every sample (calls[i] in samples[i]):
// shapes, strides, element offsets and int fields fitted; the other bytes must not change.
void fit_call(json& call, const std::vector<const json*>& calls, const SizeFitter& fitter) {
  const std::string label = "call " + call.value("label", std::string());
  for (const char* side : {"operands", "results"}) {
    for (size_t t = 0; t < call.at(side).size(); ++t) {
      for (const char* key : {"shape", "stride"}) {
        const std::string what = label + " " + side + "[" + std::to_string(t) + "]." + key;
        json fitted = fit_list(fitter, calls, what, [&](const json& c) -> const json* {
          const json& list = c.at(side);
          if (t >= list.size() || !list[t].contains(key)) return nullptr;
          return &list[t].at(key);
        });
        if (!fitted.is_null()) call[side][t][key] = std::move(fitted);
      }
    }
  }
  json& args = call.at("args");
  for (size_t p = 0; p < args.at("pointers").size(); ++p) {
    const std::string what = label + " pointer at offset " + args["pointers"][p].at("offset").dump() + " element_offset";
    for (const json* c : calls)
      if (c->at("args").at("pointers").size() != args["pointers"].size())
        throw std::runtime_error(label + ": another set of pointers at some sizes");
    args["pointers"][p]["element_offset"] = size_json(fitter.fit(what, [&](size_t i) {
      return calls[i]->at("args").at("pointers")[p].at("element_offset").get<int64_t>();
    }));
  }
  std::vector<std::vector<uint8_t>> bytes;
  for (const json* c : calls) {
    bytes.push_back(hex_bytes(c->at("args").at("hex").get<std::string>()));
    if (c->at("args").value("int_fields", json::array()) != args.value("int_fields", json::array()))
      throw std::runtime_error(label + ": the argument image has other int fields at some sizes");
  }
  const std::vector<uint8_t> hint = hex_bytes(args.at("hex").get<std::string>());
  std::vector<bool> covered(hint.size(), false);
  json patches = json::array();
  for (const auto& field : args.value("int_fields", json::array())) {
    const size_t offset = field[0].get<size_t>(), width = field[1].get<size_t>();
    for (size_t b = offset; b < offset + width && b < covered.size(); ++b) covered[b] = true;
    const core::Poly poly = fitter.fit(label + " int field at offset " + std::to_string(offset) + " (" +
                                           std::to_string(width) + " bytes)",
                                       [&](size_t i) { return read_int(bytes[i], offset, width); });
    if (poly.is_constant()) continue;
    json patch = poly.to_json();
    patch["offset"] = offset;
    patch["bytes"] = width;
    patches.push_back(std::move(patch));
  }
  for (const auto& p : args.at("pointers"))
    for (size_t b = p.at("offset").get<size_t>(); b < p.at("offset").get<size_t>() + 8 && b < covered.size(); ++b)
      covered[b] = true;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (size_t b = 0; b < hint.size(); ++b) {
      if (covered[b] || bytes[i][b] == hint[b]) continue;
      throw std::runtime_error(label + ": byte " + std::to_string(b) + " of the argument image (not an int field) is " +
                               std::to_string(bytes[i][b]) + " at " + fitter.at_text(i) + ", " + std::to_string(hint[b]) +
                               " at the hint");
    }
  }
  args["patches"] = std::move(patches);
}

// The request's input signature with each graph input's shape entries as `size_of` makes them
// from the graph's expressions (integers stay). Inputs the graph does not list stay as given.
json input_signature(const json& inputs, const json& document, const std::function<json(const std::string&)>& size_of) {
  json out = inputs;
  if (!out.is_array() || !document.contains("inputs")) return out;
  std::map<std::string, const json*> value_of;
  for (const auto& v : document.at("values")) value_of[v.at("id").get<std::string>()] = &v;
  const json& ids = document.at("inputs");
  for (size_t i = 0; i < out.size() && i < ids.size(); ++i) {
    auto it = value_of.find(ids[i].get<std::string>());
    if (it == value_of.end() || !out[i].is_object()) continue;
    json shape = json::array();
    for (const auto& entry : it->second->at("shape")) shape.push_back(entry.is_string() ? size_of(entry.get<std::string>()) : entry);
    out[i]["shape"] = std::move(shape);
  }
  return out;
}

// True when the bucket's image differs from the hint's outside the patched fields and the
// pointer slots.
bool differs_outside_patches(const json& hint_args, const json& bucket_args) {
  const std::vector<uint8_t> a = hex_bytes(hint_args.at("hex").get<std::string>());
  const std::vector<uint8_t> b = hex_bytes(bucket_args.at("hex").get<std::string>());
  if (a.size() != b.size()) return true;
  std::vector<bool> skip(a.size(), false);
  for (const auto& p : hint_args.value("patches", json::array()))
    for (size_t i = 0; i < p.at("bytes").get<size_t>(); ++i) skip.at(p.at("offset").get<size_t>() + i) = true;
  for (const auto& p : hint_args.at("pointers"))
    for (size_t i = 0; i < 8; ++i) skip.at(p.at("offset").get<size_t>() + i) = true;
  for (size_t i = 0; i < a.size(); ++i)
    if (!skip[i] && a[i] != b[i]) return true;
  return false;
}

// Adds a bucket plan's kernel to the merged plan's table, its library copied beside the plan.
void adopt_kernel(json& plan, const json& bucket_plan, const std::string& key, const fs::path& bucket_dir,
                  const fs::path& out_dir) {
  if (plan.at("kernels").contains(key) || !bucket_plan.at("kernels").contains(key)) return;
  json entry = bucket_plan.at("kernels").at(key);
  const std::string library = entry.value("library", std::string());
  if (!library.empty() && fs::path(library).is_relative() && fs::exists(bucket_dir / library)) {
    fs::create_directories((out_dir / library).parent_path());
    std::error_code ec;
    fs::copy_file(bucket_dir / library, out_dir / library, fs::copy_options::skip_existing, ec);
  }
  plan["kernels"][key] = std::move(entry);
}

std::string progress_text(const Assignment& at, const std::vector<std::string>& names) {
  return "(" + graph::assignment_text(at, names) + ")";
}

// The request for a static plan of the graph at `at` into `out_dir`; `inputs` get their sizes.
PlanRequest static_request(const PlanRequest& request, const json& document, const Assignment& at,
                           const fs::path& out_dir) {
  PlanRequest r = request;
  r.graph_document = graph::concretize(document, at);
  // A result with padded rows has a row length (N rounded up) that no polynomial fits: every
  // plan of a range keeps D as the graph has it.
  r.padded_results = false;
  r.out_dir = out_dir;
  r.inputs = input_signature(request.inputs, document, [&](const std::string& e) -> json {
    return core::evaluate_size_expr(e, at);
  });
  return r;
}

}  // namespace

std::vector<int64_t> sample_sizes(const graph::SymbolRange& s) {
  const int64_t m = s.multiple;
  const int64_t klo = round_up(s.min, m) / m, khi = s.max / m;
  const int64_t k0 = std::clamp(round_up(s.hint, m) / m, klo, khi);
  std::vector<int64_t> ks;
  auto take = [&](int64_t k) {
    if (k >= klo && k <= khi && ks.size() < 3 && std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
  };
  // Odd multiples from the hint up, then down; then the even ones likewise.
  for (int parity : {1, 0}) {
    int64_t start = k0 % 2 == parity ? k0 : k0 + 1;
    for (int64_t k = start; k <= khi && ks.size() < 3; k += 2) take(k);
    for (int64_t k = start - 2; k >= klo && ks.size() < 3; k -= 2) take(k);
  }
  std::vector<int64_t> sizes;
  for (int64_t k : ks) sizes.push_back(k * m);
  while (sizes.size() < 3) sizes.push_back(sizes.back());
  return sizes;
}

std::vector<int64_t> bucket_edges(const graph::SymbolRange& s) {
  const int64_t last = s.max / s.multiple * s.multiple;  // the largest size the multiple allows
  auto edge = [&](int64_t v) { return std::min(round_up(v, s.multiple), last); };
  std::set<int64_t> edges;
  for (int64_t p = 1; p <= s.max; p *= 2)
    if (p >= s.min) edges.insert(edge(p));
  for (int64_t t : s.typical) edges.insert(edge(t));
  edges.insert(edge(s.max));
  return {edges.begin(), edges.end()};
}

size_t bucket_index(const std::vector<std::vector<int64_t>>& edges, const std::vector<int64_t>& sizes) {
  if (edges.size() != sizes.size()) throw std::invalid_argument("bucket_index: one size per symbol");
  size_t index = 0;
  for (size_t i = 0; i < edges.size(); ++i) {
    auto it = std::lower_bound(edges[i].begin(), edges[i].end(), sizes[i]);
    if (it == edges[i].end())
      throw std::out_of_range("size " + std::to_string(sizes[i]) + " is above the last bucket edge " +
                              std::to_string(edges[i].empty() ? 0 : edges[i].back()));
    index = index * edges[i].size() + static_cast<size_t>(it - edges[i].begin());
  }
  return index;
}

namespace {

// The bucket tuples of the symbols' edges, in row-major order (the last symbol fastest).
std::vector<Assignment> edge_tuples(const std::vector<graph::SymbolRange>& symbols,
                                    const std::vector<std::vector<int64_t>>& edges) {
  size_t tuples = 1;
  for (const auto& e : edges) tuples *= e.size();
  std::vector<Assignment> made;
  for (size_t t = 0; t < tuples; ++t) {
    Assignment at;
    for (size_t i = symbols.size(), rest = t; i-- > 0;) {
      at[symbols[i].name] = edges[i][rest % edges[i].size()];
      rest /= edges[i].size();
    }
    made.push_back(std::move(at));
  }
  return made;
}

// Compiles, in one parallel build into the kernel cache, every kernel the hint's plan and the
// bucket tuples' plans will ask for: each static plan then finds its kernels cached, instead of
// each bucket compiling its own few kernels one build after another. The kernels are found by
// planning each assignment without compiling (discovery and rendering only). Nothing is done
// when the request does not compile, or tunes (tuning picks the configurations while it plans).
void prebuild_kernels(const PlanRequest& request, const json& document, const std::vector<Assignment>& at,
                      const fs::path& scratch, const std::function<void(const std::string&)>& say) {
  if (!request.compile || request.tune > 0) return;
  const realize::CompileOptions options = realize::default_compile_options();
  if (realize::compile_unavailable_reason(options)) return;
  PlanRequest render_only = request;
  render_only.compile = false;
  render_only.progress = false;
  std::vector<realize::BuildJob> jobs;
  std::set<std::string> keys;
  for (size_t k = 0; k < at.size(); ++k) {
    PlanResult r = make_plan(static_request(render_only, document, at[k], scratch / ("render_" + std::to_string(k))));
    for (const auto& kernel : r.realized.kernels) {
      // rendered templates only: a registry entry's source is built by the registry's path
      if (kernel.ok() && !kernel.kernel.source.empty() && keys.insert(kernel.kernel.key).second)
        jobs.push_back(realize::build_job(kernel.kernel, options));
    }
  }
  if (jobs.empty()) return;
  say("planning the range: compiling the " + std::to_string(jobs.size()) + " kernel(s) of the hint and " +
      std::to_string(at.size() - 1) + " bucket tuple(s) in one build");
  realize::KernelCache cache(realize::default_kernel_cache_dir());
  realize::BuildOptions build;
  build.jobs = request.jobs;
  build.show_progress = request.progress;
  build.console = request.console;
  build.title = "range";
  realize::BuildDriver(cache, build).build(jobs);  // failures are found again, and reported, by each plan
}

}  // namespace

PlanResult make_dynamic_plan(const PlanRequest& request, const json& document, const DiscoveredHook& on_discovered) {
  const std::vector<graph::SymbolRange> symbols = graph::graph_symbols(document);
  if (symbols.empty()) throw std::invalid_argument("make_dynamic_plan: the graph declares no symbols");
  std::vector<std::string> names;
  for (const auto& s : symbols) names.push_back(s.name);
  util::Console& console = request.console ? *request.console : util::stderr_console();
  auto say = [&](const std::string& line) {
    if (request.progress) console.line(line);
  };
  fs::create_directories(request.out_dir);
  ScratchFolder scratch{request.out_dir / ".range"};
  fs::remove_all(scratch.path);

  // 1. The hint's plan, with the request's settings: discovery.json, the hook, the report's.
  Assignment hint;
  for (const auto& s : symbols) hint[s.name] = s.hint;
  std::vector<std::vector<int64_t>> edges;
  for (const auto& s : symbols) edges.push_back(bucket_edges(s));
  const std::vector<Assignment> bucket_tuples = edge_tuples(symbols, edges);
  std::vector<Assignment> to_build{hint};
  to_build.insert(to_build.end(), bucket_tuples.begin(), bucket_tuples.end());
  prebuild_kernels(request, document, to_build, scratch.path, say);
  say("planning the range: the hint " + progress_text(hint, names));
  PlanResult result = make_plan(static_request(request, document, hint, request.out_dir), on_discovered);

  // 2. Samples: the factorial of two sizes per symbol (mask order: bit i picks symbol i's
  // second size), then the checks (every other point of three sizes per symbol), then the hint.
  std::vector<std::vector<int64_t>> sizes;
  std::vector<std::array<int64_t, 2>> fit_sizes;
  for (const auto& s : symbols) {
    sizes.push_back(sample_sizes(s));
    fit_sizes.push_back({sizes.back()[0], sizes.back()[1]});
  }
  std::vector<Assignment> points;
  const size_t factorial = size_t{1} << symbols.size();
  for (size_t mask = 0; mask < factorial; ++mask) {
    Assignment a;
    for (size_t i = 0; i < symbols.size(); ++i) a[names[i]] = sizes[i][(mask >> i) & 1];
    points.push_back(a);
  }
  // Checks: the third size of each symbol with the others at their first, and all at the third.
  for (size_t i = 0; i < symbols.size(); ++i) {
    Assignment a = points.front();
    a[names[i]] = sizes[i][2];
    points.push_back(a);
  }
  if (symbols.size() > 1) {
    Assignment a;
    for (size_t i = 0; i < symbols.size(); ++i) a[names[i]] = sizes[i][2];
    points.push_back(a);
  }
  std::vector<Sample> samples;
  PlanRequest sample_settings = request;
  sample_settings.compile = false;
  sample_settings.tune = 0;
  sample_settings.progress = false;
  for (size_t k = 0; k < points.size(); ++k) {
    say("planning the range: sample " + std::to_string(k + 1) + "/" + std::to_string(points.size()) + " " +
        progress_text(points[k], names));
    try {
      PlanResult r = make_plan(static_request(sample_settings, document, points[k],
                                              scratch.path / ("sample_" + std::to_string(k))));
      samples.push_back({points[k], std::move(r.plan)});
    } catch (const std::exception& e) {
      throw std::runtime_error("planning the range at " + graph::assignment_text(points[k], names) + ": " + e.what());
    }
  }
  samples.push_back({hint, result.plan});
  const SizeFitter fitter(names, fit_sizes, samples, factorial);

  // 3. Same replacement everywhere, then the fit of every size of its calls.
  json plan = result.plan;
  std::vector<size_t> dynamic;  // indices of replacements planned for the whole range
  for (size_t r = 0; r < plan.at("replacements").size(); ++r) {
    json& replacement = plan["replacements"][r];
    if (replacement.value("status", std::string()) != "planned") continue;
    std::string declined;
    std::vector<std::vector<const json*>> calls(replacement.at("calls").size());
    for (const Sample& sample : samples) {
      const json* other = find_replacement(sample.plan, replacement.at("nodes"));
      const std::string why = difference(replacement, other);
      if (!why.empty()) {
        declined = "declined at " + graph::assignment_text(sample.at, names) + ": " + why;
        break;
      }
      for (size_t c = 0; c < calls.size(); ++c) calls[c].push_back(&other->at("calls")[c]);
    }
    if (declined.empty()) {
      try {
        for (size_t c = 0; c < calls.size(); ++c) fit_call(replacement["calls"][c], calls[c], fitter);
      } catch (const std::exception& e) {
        declined = e.what();
      }
    }
    if (!declined.empty()) {
      replacement = result.plan["replacements"][r];  // the hint's static description, for reports
      replacement["status"] = "declined";
      replacement["reason"] = declined;
      continue;
    }
    dynamic.push_back(r);
  }

  // 4. Buckets: the graph at every edge tuple, with the request's settings.
  const size_t tuples = bucket_tuples.size();
  for (size_t r : dynamic)
    for (auto& call : plan["replacements"][r]["calls"]) call["buckets"] = json::array();
  for (size_t t = 0; t < tuples; ++t) {
    const Assignment& at = bucket_tuples[t];
    say("planning the range: bucket " + std::to_string(t + 1) + "/" + std::to_string(tuples) + " " +
        progress_text(at, names));
    const fs::path dir = scratch.path / ("bucket_" + std::to_string(t));
    PlanRequest bucket_request = request;
    bucket_request.progress = false;
    json bucket_plan;
    try {
      bucket_plan = make_plan(static_request(bucket_request, document, at, dir)).plan;
    } catch (const std::exception& e) {
      throw std::runtime_error("planning the range at " + graph::assignment_text(at, names) + ": " + e.what());
    }
    for (size_t r : dynamic) {
      json& replacement = plan["replacements"][r];
      const json* other = find_replacement(bucket_plan, replacement.at("nodes"));
      const bool same = difference(replacement, other).empty();
      for (size_t c = 0; c < replacement["calls"].size(); ++c) {
        json& call = replacement["calls"][c];
        json entry = {{"kernel", call.value("kernel", json())}, {"config", call.value("config", json())}};
        if (same && !other->at("calls")[c].value("kernel", json()).is_null()) {
          const json& theirs = other->at("calls")[c];
          entry = {{"kernel", theirs.at("kernel")}, {"config", theirs.value("config", json())}};
          if (differs_outside_patches(call.at("args"), theirs.at("args"))) entry["hex"] = theirs.at("args").at("hex");
          adopt_kernel(plan, bucket_plan, theirs.at("kernel").get<std::string>(), dir, request.out_dir);
        }
        call["buckets"].push_back(std::move(entry));
      }
    }
  }

  // 5. The merged plan.
  json symbol_list = json::array();
  for (size_t i = 0; i < symbols.size(); ++i) {
    const auto& s = symbols[i];
    symbol_list.push_back({{"name", s.name}, {"min", s.min}, {"max", s.max}, {"hint", s.hint},
                           {"multiple", s.multiple}, {"typical", s.typical}, {"edges", edges[i]}});
  }
  plan["symbols"] = std::move(symbol_list);
  plan["inputs"] = input_signature(request.inputs, document, [&](const std::string& e) -> json {
    return size_json(core::SizeExpr::parse(e).to_poly(names));
  });
  result.plan = std::move(plan);
  util::write_file_atomically(result.plan_path, result.plan.dump(2) + "\n");
  return result;
}

}  // namespace fact::engine
