#include "fact/realize/render.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "fact/build_info.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/sha256.hpp"

namespace fact::realize {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, TemplateRenderer> renderers;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

}  // namespace

void register_template(const std::string& pattern, TemplateRenderer renderer) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.renderers.emplace(pattern, renderer).second) {
    throw std::logic_error("a kernel template is already registered for pattern '" + pattern + "'");
  }
}

std::vector<std::string> registered_templates() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, renderer] : r.renderers) names.push_back(name);
  return names;
}

std::string generator_identity(const KernelTemplate& kernel_template) {
  return std::string("fact ") + build_info::kVersion + "; template " + kernel_template.generator;
}

RenderedKernel render_kernel(const KernelSpec& spec, const CompileOptions& options) {
  TemplateRenderer renderer = nullptr;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.renderers.find(spec.pattern);
    if (it != r.renderers.end()) renderer = it->second;
  }
  if (!renderer) {
    std::string known;
    for (const auto& name : registered_templates()) known += (known.empty() ? "" : ", ") + name;
    throw RenderError("no kernel template for pattern '" + spec.pattern + "' (registered: " +
                      known + ")");
  }
  const KernelTemplate rendered = renderer(spec);

  std::string material = "fact-kernel-key/1\n";
  material += "generator:" + generator_identity(rendered) + "\n";
  material += compile_fingerprint(options) + "\n";
  for (const auto& header : rendered.headers) {
    std::string contents;
    try {
      contents = util::read_file(options.fact_root / header);
    } catch (const std::exception& e) {
      throw RenderError("cannot read template header " + header + " under '" +
                        options.fact_root.string() + "': " + e.what());
    }
    material += "header:" + header + ":" + util::sha256_hex(contents) + "\n";
  }
  material += "source:\n" + rendered.source;

  RenderedKernel kernel;
  kernel.spec = spec;
  kernel.key = util::sha256_hex(material);
  kernel.entry_symbol = "fact_" + kernel.key.substr(0, 16);
  kernel.source = rendered.source;
  replace_all(kernel.source, kEntryPlaceholder, kernel.entry_symbol);
  replace_all(kernel.source, kKeyPlaceholder, kernel.key);
  return kernel;
}

}  // namespace fact::realize
