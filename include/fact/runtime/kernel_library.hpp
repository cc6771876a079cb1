// A built kernel library (.so) opened through the FACT C ABI (fact_abi.h).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "fact/problem/kernel_spec.hpp"
#include "fact/core/fact_abi.h"

namespace fact::runtime {

class KernelLibrary {
 public:
  // dlopens `path` (a bare file name is taken in the working directory) (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE: the code stays mapped after the
  // object is destroyed, so handlers the library's CUDA runtime registered stay valid), calls its `fact_kernel_info()`, parses the JSON,
  // reads the "entry" symbol name, the ABI version (must be FACT_ABI_VERSION) and the
  // KernelSpec (its "spec" member), and resolves the entry. Throws std::runtime_error naming
  // the library and what failed: dlopen's message, a missing symbol, info that is NULL or not a
  // JSON object, no "entry", another ABI version, or a spec KernelSpec::from_json rejects.
  explicit KernelLibrary(const std::string& path);
  ~KernelLibrary();
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;
  KernelLibrary(KernelLibrary&& other) noexcept;
  KernelLibrary& operator=(KernelLibrary&& other) noexcept;

  const std::string& path() const { return path_; }
  const std::string& entry_name() const { return entry_name_; }
  const nlohmann::json& info() const { return info_; }
  const KernelSpec& spec() const { return spec_; }
  FactEntry entry() const { return entry_; }
  const std::string& kind() const { return spec_.kind(); }

 private:
  void close() noexcept;

  std::string path_;
  void* handle_ = nullptr;
  nlohmann::json info_;
  std::string entry_name_;
  KernelSpec spec_;
  FactEntry entry_ = nullptr;
};

// "FACT_OK", "FACT_ERR_CANNOT_IMPLEMENT", ... ("FACT_STATUS_<n>" for an unknown value): the
// table in fact/core/status_names.hpp.
std::string fact_status_name(int status);

}  // namespace fact::runtime
