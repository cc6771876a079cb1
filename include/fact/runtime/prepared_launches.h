// Launches prepared once per argument set: the host side of a kernel entry's launch path.
//
// Preparing a launch costs host time on every call: an entry checks its arguments and builds
// the kernel's parameters, for a TMA kernel one tensor-map descriptor per operand
// (cuTensorMapEncodeTiled). A composed module calls each kernel with the same arguments call
// after call (the caching allocator hands the same addresses back), so an entry keeps the last
// few launches it prepared, per host thread, keyed by the call's whole argument struct (every
// size, stride, pointer and constant), the device and the workspace address. A call whose key
// equals a kept one byte for byte launches that preparation as it is; any other call is checked
// and prepared as before and takes the place of the oldest. Equal bytes are equal inputs to
// every check and to every parameter, so a kept launch is the launch preparing again would make.
// An entry keeps only launches that passed every check.
#pragma once
#include <cstring>
#include <type_traits>

namespace fact::runtime {

// The last kWays launches one kernel's entry prepared on this thread (an entry declares it
// `static thread_local`). Args: the kind's argument struct (FactGemmArgs, FactAttentionArgs),
// compared as bytes. Prepared: what the entry launches from; trivially destructible, so a
// thread's copy needs no destructor when the kernel library is unloaded.
template <class Args, class Prepared, int kWays = 4>
class PreparedLaunches {
  static_assert(std::is_trivially_copyable_v<Args>, "arguments are compared as bytes");
  static_assert(std::is_trivially_destructible_v<Prepared>,
                "a prepared launch must hold plain values (it lives in thread storage)");

 public:
  // The launch prepared for exactly this call, or nullptr.
  Prepared* find(const Args& args, int device, const void* workspace) {
    for (int i = 0; i < count_; ++i) {
      Entry& entry = entries_[i];
      if (entry.device == device && entry.workspace == workspace &&
          std::memcmp(&entry.args, &args, sizeof(Args)) == 0) {
        return &entry.prepared;
      }
    }
    return nullptr;
  }

  // Keeps `prepared` as this call's launch, in place of the oldest once every way is used.
  void keep(const Args& args, int device, const void* workspace, const Prepared& prepared) {
    Entry& entry = entries_[next_];
    std::memcpy(&entry.args, &args, sizeof(Args));
    entry.device = device;
    entry.workspace = workspace;
    entry.prepared = prepared;
    next_ = (next_ + 1) % kWays;
    if (count_ < kWays) ++count_;
  }

 private:
  struct Entry {
    Args args;
    int device;
    const void* workspace;
    Prepared prepared;
  };
  Entry entries_[kWays];
  int count_ = 0;
  int next_ = 0;
};

}  // namespace fact::runtime
