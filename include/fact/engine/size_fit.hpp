// Fitting a size the engine computed at sample assignments as a polynomial of the symbols
// (docs/dynamic_shapes.md, "How the engine plans a range", step 3).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fact/core/size_expr.hpp"

namespace fact::engine {

// The polynomial of degree at most one in each symbol (sum over subsets S of the symbols of
// c_S * prod_{i in S} symbol_i, integer c_S) that takes `values` on the full factorial grid:
// sizes[i] holds symbol i's two sizes, and values[mask] is the value where symbol i has
// sizes[i][bit i of mask]. A symbol whose two sizes are equal gets exponent 0 (its values must
// then agree). nullopt when no such polynomial with integer coefficients exists.
std::optional<core::Poly> fit_multilinear(const std::vector<std::string>& symbols,
                                          const std::vector<std::array<int64_t, 2>>& sizes,
                                          const std::vector<int64_t>& values);

}  // namespace fact::engine
