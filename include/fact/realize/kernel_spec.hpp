// Realization speaks of the KernelSpec it renders (declared with the problem kinds,
// fact/problem/kernel_spec.hpp) as realize::KernelSpec.
#pragma once
#include "fact/problem/kernel_spec.hpp"

namespace fact::realize {

using ::fact::KernelSpec;

}  // namespace fact::realize
