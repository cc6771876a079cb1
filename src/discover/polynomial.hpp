// Elementwise arithmetic regions of the graph read as polynomials over "atom" values, so that
// one formula written many ways (x*x*x or pow(x, 3), the constant first or last) compares
// equal to one reference form.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "fact/graph/graph.hpp"

namespace fact::discover::detail {

using Monomial = std::map<graph::ValueId, int>;  // atom -> power; empty = the constant term
using Polynomial = std::map<Monomial, double>;

struct Expansion {
  Polynomial poly;
  std::vector<graph::NodeId> nodes;  // the arithmetic nodes expanded (root's producer first)
  std::set<graph::ValueId> atoms;
};

// Expands `root` through add, sub, rsub, mul, div by a number, pow by an integer 0..4, neg and
// square. A node is expanded when its output is `root` or is read by no other node (and is not
// a graph output); every other value, and every value in `stop_at`, is an atom. nullopt when
// the expansion grows too large (more than 32 terms, degree 8, or 48 nodes).
std::optional<Expansion> expand_polynomial(const graph::Graph& g, const graph::ValueId& root,
                                           const std::set<graph::ValueId>& stop_at = {});

// Same monomials, coefficients equal to `rel_tol` relative (terms below 1e-12 ignored).
bool polynomials_match(const Polynomial& a, const Polynomial& b, double rel_tol);

// True for the ops expand_polynomial reads through.
bool is_arithmetic(const graph::Node& node);

}  // namespace fact::discover::detail
