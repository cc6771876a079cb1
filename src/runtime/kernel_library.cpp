#include "fact/runtime/kernel_library.hpp"

#include <dlfcn.h>

#include <stdexcept>
#include <utility>

#include "fact/core/status_names.hpp"

namespace fact::runtime {

namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dynamic-loader error";
}

}  // namespace

KernelLibrary::KernelLibrary(const std::string& path) : path_(path) {
  dlerror();
  // A bare file name means the file in the working directory, not a search of the library path.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle_) throw std::runtime_error("cannot load kernel library: " + dl_error());
  try {
    dlerror();
    auto info_fn = reinterpret_cast<FactKernelInfo>(dlsym(handle_, "fact_kernel_info"));
    if (!info_fn) {
      throw std::runtime_error("kernel library " + path + " exports no fact_kernel_info: " +
                               dl_error());
    }
    const char* info_text = info_fn();
    if (!info_text) throw std::runtime_error("fact_kernel_info() of " + path + " returned NULL");
    try {
      info_ = nlohmann::json::parse(info_text);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("fact_kernel_info() of " + path + " is not JSON: " + e.what());
    }
    if (!info_.is_object()) {
      throw std::runtime_error("fact_kernel_info() of " + path + " is not a JSON object");
    }
    if (!info_.contains("entry") || !info_.at("entry").is_string() ||
        info_.at("entry").get<std::string>().empty()) {
      throw std::runtime_error("fact_kernel_info() of " + path + " names no \"entry\" symbol");
    }
    entry_name_ = info_.at("entry").get<std::string>();
    if (info_.value("abi_version", 0) != FACT_ABI_VERSION) {
      throw std::runtime_error("kernel library " + path + " speaks ABI version " +
                               std::to_string(info_.value("abi_version", 0)) + ", this FACT " +
                               std::to_string(FACT_ABI_VERSION) + " (rebuild it)");
    }
    if (!info_.contains("spec") || !info_.at("spec").is_object()) {
      throw std::runtime_error("fact_kernel_info() of " + path + " has no \"spec\" object");
    }
    const nlohmann::json& spec_json = info_.at("spec");
    try {
      spec_ = KernelSpec::from_json(spec_json);
    } catch (const std::exception& e) {
      throw std::runtime_error("kernel spec in " + path + " is not readable: " + e.what());
    }
    dlerror();
    entry_ = reinterpret_cast<FactEntry>(dlsym(handle_, entry_name_.c_str()));
    if (!entry_) {
      throw std::runtime_error("kernel library " + path + " does not export its entry '" +
                               entry_name_ + "': " + dl_error());
    }
  } catch (...) {
    close();
    throw;
  }
}

KernelLibrary::~KernelLibrary() { close(); }

KernelLibrary::KernelLibrary(KernelLibrary&& other) noexcept
    : path_(std::move(other.path_)),
      handle_(std::exchange(other.handle_, nullptr)),
      info_(std::move(other.info_)),
      entry_name_(std::move(other.entry_name_)),
      spec_(std::move(other.spec_)),
      entry_(std::exchange(other.entry_, nullptr)) {}

KernelLibrary& KernelLibrary::operator=(KernelLibrary&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    handle_ = std::exchange(other.handle_, nullptr);
    info_ = std::move(other.info_);
    entry_name_ = std::move(other.entry_name_);
    spec_ = std::move(other.spec_);
    entry_ = std::exchange(other.entry_, nullptr);
  }
  return *this;
}

void KernelLibrary::close() noexcept {
  if (handle_) dlclose(handle_);
  handle_ = nullptr;
  entry_ = nullptr;
}

std::string fact_status_name(int status) { return core::status_name(status); }

}  // namespace fact::runtime
