#include "fact/realize/render.hpp"

#include <algorithm>
#include <map>

#include "fact/build_info.hpp"
#include "fact/realize/realizer.hpp"
#include "fact/util/atomic_file.hpp"
#include "fact/util/sha256.hpp"

namespace fact::realize {
namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// Where the contents of a template header named `header` are read for the kernel key. The kernel
// ABI moved to include/fact/core/; kernels still include it by the old path, whose file now only
// forwards. The key keeps naming the header by the path kernels include and hashes what that path
// leads to, so keys (and built kernels, and tuning-database entries) stay what they were.
std::string_view header_contents_path(std::string_view header) {
  static const std::map<std::string_view, std::string_view> forwarded = {
      {"include/fact/runtime/fact_abi.h", "include/fact/core/fact_abi.h"},
      {"include/fact/runtime/fact_subgraph_abi.h", "include/fact/core/fact_subgraph_abi.h"},
  };
  const auto it = forwarded.find(header);
  return it == forwarded.end() ? header : it->second;
}

}  // namespace

std::string generator_identity(const KernelTemplate& kernel_template) {
  return std::string("fact ") + build_info::kVersion + "; template " + kernel_template.generator;
}

RenderedKernel render_kernel(const KernelSpec& spec, const CompileOptions& options) {
  const Realizer* realizer = RealizerRegistry::global().find(spec.pattern());
  if (realizer == nullptr) {
    std::string known;
    for (const auto& name : RealizerRegistry::global().patterns()) known += (known.empty() ? "" : ", ") + name;
    throw RenderError("no kernel template for pattern '" + spec.pattern() + "' (registered: " +
                      known + ")");
  }
  const KernelTemplate rendered = realizer->render(spec);

  std::string material = "fact-kernel-key/1\n";
  material += "generator:" + generator_identity(rendered) + "\n";
  material += compile_fingerprint(options) + "\n";
  for (const auto& header : rendered.headers) {
    std::string contents;
    try {
      contents = util::read_file(options.fact_root / header_contents_path(header));
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
