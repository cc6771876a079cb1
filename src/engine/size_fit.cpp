#include "fact/engine/size_fit.hpp"

#include <stdexcept>

namespace fact::engine {

// Along each symbol in turn, the pair (value at a, value at b) becomes (intercept, slope) of the
// line through them. The steps commute, so after every symbol entry `mask` holds the coefficient
// of prod_{i in mask} symbol_i. With integer coefficients every intermediate is an integer, so
// an inexact division means there is no integer fit.
std::optional<core::Poly> fit_multilinear(const std::vector<std::string>& symbols,
                                          const std::vector<std::array<int64_t, 2>>& sizes,
                                          const std::vector<int64_t>& values) {
  const size_t n = symbols.size();
  if (sizes.size() != n || values.size() != (size_t{1} << n))
    throw std::invalid_argument("fit_multilinear: " + std::to_string(values.size()) + " values for " +
                                std::to_string(n) + " symbols");
  std::vector<__int128> c(values.begin(), values.end());
  for (size_t i = 0; i < n; ++i) {
    const size_t bit = size_t{1} << i;
    const __int128 a = sizes[i][0], b = sizes[i][1];
    for (size_t mask = 0; mask < c.size(); ++mask) {
      if (mask & bit) continue;
      const __int128 fa = c[mask], fb = c[mask | bit];
      if (a == b) {
        if (fa != fb) return std::nullopt;
        c[mask | bit] = 0;
        continue;
      }
      const __int128 rise = fb - fa, run = b - a;
      if (rise % run != 0) return std::nullopt;
      const __int128 slope = rise / run;
      c[mask] = fa - slope * a;
      c[mask | bit] = slope;
    }
  }
  core::Poly poly(symbols);
  for (size_t mask = 0; mask < c.size(); ++mask) {
    if (c[mask] == 0) continue;
    if (c[mask] > INT64_MAX || c[mask] < INT64_MIN) return std::nullopt;
    std::vector<int> exponents(n, 0);
    for (size_t i = 0; i < n; ++i) exponents[i] = (mask >> i) & 1 ? 1 : 0;
    poly.add_term(static_cast<int64_t>(c[mask]), exponents);
  }
  return poly;
}

}  // namespace fact::engine
