// Exact assignment solvers used by the fit (docs/design.md §4.3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "eldr/status.hpp"

namespace eldr {

// Capacity-constrained assignment: each of n points goes to one of k columns,
// column j takes at most `cap` points, total cost sum cost[i*k + assign[i]] is
// minimal (exact). Requires k >= 1, cost.size() == n * k and n <= k * cap
// (cap * k may exceed SIZE_MAX), else Errc::invalid_argument. Costs must be
// finite (invalid_argument) and not near DBL_MAX, where sums would overflow
// (out_of_range); n and k must be below 2^32 - 1 (out_of_range). Ties between
// equal optima are broken deterministically.
// Successive shortest paths over the k column nodes with potentials; the best
// moves between two columns are kept per column pair, so one augmentation costs
// O(k^2) plus, typically, O(k) per column on the path, rather than O(n k).
// N = 1000, K = 16 takes well under a millisecond.
Result<std::vector<uint32_t>> assign_capacitated(std::span<const double> cost, size_t n, size_t k,
                                                 size_t cap);

// Rectangular min-cost assignment (Hungarian, O(n^2 m)): every row i < n gets a
// distinct column j < m, n <= m. Returns the column of each row. Same argument
// checks as assign_capacitated (n > m is invalid_argument).
Result<std::vector<uint32_t>> hungarian_min(std::span<const double> cost, size_t n, size_t m);

}  // namespace eldr
