// Rendering: KernelSpec -> CUTLASS source with a content-addressed key (docs/architecture.md).
//
// Each pattern's realizer (realizer.hpp) renders the type choices of one kernel (type aliases,
// CollectiveBuilder calls, the C entry point); the logic lives in headers the source includes,
// in the pattern's folder. render_kernel() then computes
//
//   key = SHA-256(source, compile_fingerprint(options), generator identity, contents of the
//                 FACT headers the source includes, CUTLASS version, arch)
//
// and names the entry point fact_<first 16 hex digits of key>. The key is computed over the
// source with placeholders in place of the entry symbol and key, which are substituted after.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fact/realize/compile_command.hpp"
#include "fact/realize/kernel_spec.hpp"

namespace fact::realize {

struct RenderedKernel {
  KernelSpec spec;
  std::string source;        // complete .cu text
  std::string entry_symbol;  // "fact_<first 16 hex of key>"
  std::string key;           // 64 hex digits
};

// A spec that cannot be rendered: an invalid combination, an unsupported math mode or dtype,
// an unknown pattern. what() says which and why.
class RenderError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Placeholders a template writes where the entry symbol and the key go.
inline constexpr std::string_view kEntryPlaceholder = "FACT_ENTRY_SYMBOL";
inline constexpr std::string_view kKeyPlaceholder = "FACT_KERNEL_KEY";

// What a pattern's template produces for one spec.
struct KernelTemplate {
  std::string source;                // with kEntryPlaceholder / kKeyPlaceholder
  std::vector<std::string> headers;  // FACT headers it includes, relative to the FACT root
  std::string generator;             // template identity and revision, e.g. "gemm-sm90/1"
};

// Renders `spec` with its pattern's realizer and keys it. Throws RenderError when no realizer
// is registered for spec.pattern() or it refuses the spec, and when a header the source
// includes cannot be read under options.fact_root.
RenderedKernel render_kernel(const KernelSpec& spec,
                             const CompileOptions& options = default_compile_options());

// The generator identity that enters every key: FACT's version and the template's.
std::string generator_identity(const KernelTemplate& kernel_template);

}  // namespace fact::realize
