// Splitting a space-separated list ("aten.tanh aten.tanh_", "beta=1 threshold=20").
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace fact::util {

// Every whole word of `text`, in order; runs of spaces separate, none is empty.
std::vector<std::string> split_words(std::string_view text);

}  // namespace fact::util
