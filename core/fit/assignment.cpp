// Exact assignment solvers (docs/design.md §4.3).
//
// assign_capacitated solves the transportation problem "n points, k columns of
// capacity cap" by successive shortest paths. The flow network is
//   source -> point (cap 1) -> column (cost c[p][j]) -> sink (cap `cap`),
// but point nodes are never materialised: a residual path through an assigned
// point q sitting in column j is a *move* j -> j' of cost c[q][j'] - c[q][j], so
// the residual graph collapses to the k column nodes plus the sink. Only the
// cheapest move per column pair can lie on a shortest path, so a k x k table of
// best moves (value and point) is all Dijkstra needs. Each entry is the head
// of a short sorted list of candidates, so moving the best point out rarely
// forces a rescan of the column. One insertion costs O(k^2) for dense Dijkstra
// plus, per column on the augmenting path, O(k) to update its lists and
// O(count) per list that runs empty. Extra memory: n * k doubles (a per-column
// copy of the members' cost rows) and k^2 shortlists.
//
// Points are inserted one at a time (the row-by-row argument of the Hungarian
// method): if the current assignment of points 0..p-1 is optimal, the cheapest
// path from p to the sink in the residual graph extends it to an optimal
// assignment of 0..p (the difference of the two decomposes into that path plus
// cycles, and no cycle is negative). Edges back into the source are left out on
// purpose: they would un-assign a point, and every point must end up assigned.
//
// Potentials (Johnson). pi[j] per column, pi_t for the sink; the reduced cost of
// a residual edge u -> v of cost w is w + pi[u] - pi[v]. Invariant between
// insertions: every residual edge has reduced cost >= 0, i.e.
//   (I1) move j -> j' via any q in j:  c[q][j'] - c[q][j] + pi[j] - pi[j'] >= 0
//   (I2) j -> sink when count[j] < cap:  pi[j] >= pi_t
//   (I3) sink -> j when count[j] > 0:    pi[j] <= pi_t
// It holds at the start (pi = 0, every column empty: only I2 edges exist).
// The new point's edges source -> j may have negative reduced cost; that is
// harmless because they are only the first hop and the source is never
// re-entered, so Dijkstra stays exact. Dijkstra stops once the smallest
// tentative distance reaches d_t, the sink's reduced distance (the best
// d[j] + pi[j] - pi_t over settled free columns); then
//   pi[j] += min(d[j], d_t),  pi_t += d_t.
// Old edges stay non-negative: d[v] <= d[u] + r implies
// min(d[v], d_t) <= min(d[u], d_t) + r, and open columns are >= d_t away.
// Edges on the augmenting path become tight (reduced 0), so their reversals,
// which appear after augmenting, are 0. The new edges an augmentation creates:
//   - p now sits in j0 (first hop, tight: pi'[j0] = c[p][j0]); its move to any
//     j' has reduced c[p][j'] - c[p][j0] + pi'[j0] - pi'[j'] = c[p][j'] - pi'[j']
//     >= 0 because pi'[j'] <= pi[j'] + (c[p][j'] - pi[j']) (direct edge bound).
//   - q moved j -> j' along a tight edge; its move j' -> j'' has reduced cost
//     equal to the (already >= 0) reduced cost of its old move j -> j''.
//   - only the terminal t changes count; a new sink -> t edge is the reversal
//     of the tight t -> sink edge.
// Consequences: pi[j] - pi_t never grows (its increment is min(d[j], d_t) -
// d_t <= 0), so with I2 every free column keeps pi[j] == pi_t, and the search
// ends at the first free column it settles. Potentials do not drift: the source
// sits at potential 0, so pi_t ends each insertion as the true marginal cost of
// that point and pi[j] as min(true distance to j, pi[j] + d_t) <= pi_t.
//
// Floating point: reduced costs may come out at -1e-16 or so; Dijkstra never
// reopens a settled node, so such noise only perturbs the optimum by rounding.
//
// Determinism: every choice breaks ties the same way (Dijkstra: distance, then
// free columns first, then lowest index; best moves: value, then lowest point
// index), so equal inputs give equal outputs.

#include "eldr/assignment.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace eldr {

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Shared shape and value checks: the solvers index cost[i * cols + j] without
// bounds checks, and a NaN would silently break every comparison.
Status check_matrix(std::span<const double> cost, size_t rows, size_t cols, const char* what) {
  // Results hold column indices as uint32_t; kNone is reserved as a sentinel.
  if (rows >= kNone || cols >= kNone)
    return {Errc::out_of_range, std::string(what) + ": dimensions must be below 2^32 - 1, got " +
                                    std::to_string(rows) + " x " + std::to_string(cols)};
  if (cols != 0 && rows > std::numeric_limits<size_t>::max() / cols)
    return {Errc::invalid_argument, std::string(what) + ": cost matrix size overflows"};
  if (cost.size() != rows * cols)
    return {Errc::invalid_argument, std::string(what) + ": cost has " +
                                        std::to_string(cost.size()) + " entries, expected " +
                                        std::to_string(rows) + " x " + std::to_string(cols)};
  double max_abs = 0.0;
  for (size_t i = 0; i < cost.size(); ++i) {
    if (!std::isfinite(cost[i]))
      return {Errc::invalid_argument,
              std::string(what) + ": cost[" + std::to_string(i) + "] is not finite"};
    max_abs = std::max(max_abs, std::fabs(cost[i]));
  }
  // Potentials and path lengths are sums of at most about rows + cols cost
  // differences; refuse magnitudes where those sums could overflow to inf
  // (and then NaN). Never binds for real inputs (n = 1e5 allows ~1e302).
  if (!std::isfinite(max_abs * 4.0 * static_cast<double>(rows + cols + 1)))
    return {Errc::out_of_range,
            std::string(what) + ": cost magnitudes near 1e308 would overflow sums of costs"};
  return Status::ok();
}

// Lexicographic (value, point) order: makes the best-move table a pure function
// of the column memberships, whatever order members are scanned in, so the whole
// solve is deterministic.
inline bool better_move(double val, uint32_t pt, double cur_val, uint32_t cur_pt) {
  return val < cur_val || (val == cur_val && pt < cur_pt);
}

// Shortlist length. Moving a column's best point out would otherwise force a
// scan of the whole column for that target; with a shortlist the next
// candidate is already known, and a scan happens at most once every
// kShortlist removals from the same list. 8 cut the scan work ~5x on skewed
// n = 100k, k = 64 instances; memory is k^2 lists of ~100 bytes.
constexpr uint32_t kShortlist = 8;

// The cheapest moves from one column to one target column, sorted by
// better_move. Invariant: the entries are a prefix of the column's members in
// that order, so every member not listed is no better than the last entry.
// An empty list while the column has members is "exhausted" and must be
// refilled by a scan before the entry is used.
struct Shortlist {
  double val[kShortlist];
  uint32_t pt[kShortlist];
  uint32_t size = 0;

  bool beats_last(double v, uint32_t q) const {
    return better_move(v, q, val[size - 1], pt[size - 1]);
  }
  // False only when (v, q) ranks after the last entry, so q cannot be listed.
  bool may_hold(double v, uint32_t q) const {
    return size > 0 && !better_move(val[size - 1], pt[size - 1], v, q);
  }
  // Inserts in order; when full, the last entry falls off (callers only
  // insert into a full list what beats its last entry).
  void insert(double v, uint32_t q) {
    uint32_t pos = size < kShortlist ? size++ : kShortlist - 1;
    for (; pos > 0 && better_move(v, q, val[pos - 1], pt[pos - 1]); --pos) {
      val[pos] = val[pos - 1];
      pt[pos] = pt[pos - 1];
    }
    val[pos] = v;
    pt[pos] = q;
  }
  // Finds q by id; a no-op when q is not listed.
  void erase(uint32_t q) {
    uint32_t i = 0;
    while (i < size && pt[i] != q) ++i;
    if (i == size) return;
    for (; i + 1 < size; ++i) {
      val[i] = val[i + 1];
      pt[i] = pt[i + 1];
    }
    --size;
  }
};

class CapacitatedSolver {
 public:
  CapacitatedSolver(std::span<const double> cost, size_t n, size_t k, size_t cap)
      : m_cost(cost.data()),
        m_n(n),
        m_k(k),
        m_cap(cap),
        m_col(n, kNone),
        m_pos(n, 0),
        m_columns(k),
        m_short(k * k),
        m_best_val(k * k, kInf),
        m_best_pt(k * k, kNone),
        m_count(k, 0),
        m_pi(k, 0.0),
        m_dist(k),
        m_prev(k),
        m_stale(k),
        // Balanced use (cap = ceil(n / k)) fills every column to about n / k,
        // so reserving that much means the move stores never reallocate there.
        m_initial_slots(std::max<size_t>(1, std::min(cap, (n + k - 1) / k))) {}

  Result<std::vector<uint32_t>> solve() {
    for (size_t p = 0; p < m_n; ++p) {
      if (!insert(static_cast<uint32_t>(p)))
        return Status{Errc::internal, "assign_capacitated: no free column reachable"};
    }
    return m_col;
  }

 private:
  const double* row(uint32_t p) const { return m_cost + static_cast<size_t>(p) * m_k; }
  bool is_free(uint32_t j) const { return m_count[j] < m_cap; }

  // Places p by one shortest augmenting path. False only if no terminal was
  // found, which n <= k * cap and finite, range-checked costs rule out.
  bool insert(uint32_t p) {
    const size_t k = m_k;
    const double* cp = row(p);
    m_open.resize(k);
    for (size_t j = 0; j < k; ++j) {
      m_dist[j] = cp[j] - m_pi[j];
      m_prev[j] = kNone;  // reached straight from the source
      m_open[j] = static_cast<uint32_t>(j);
    }
    double d_sink = kInf;
    uint32_t term = kNone;

    // Dense Dijkstra over the still-open columns: k is small, so a linear scan
    // beats a heap.
    while (!m_open.empty()) {
      // Ties on distance go to a column with free capacity, then to the lowest
      // index. Any order is correct; this one settles a tied free column
      // (whose sink edge is tight) first, which ends the search at once. It
      // matters for degenerate costs: with all costs equal, every insertion
      // would otherwise settle every full column first.
      size_t best = 0;
      for (size_t i = 1; i < m_open.size(); ++i) {
        const uint32_t j = m_open[i];
        const uint32_t b = m_open[best];
        const double dj = m_dist[j];
        const double db = m_dist[b];
        if (dj < db ||
            (dj == db && (is_free(j) > is_free(b) || (is_free(j) == is_free(b) && j < b))))
          best = i;
      }
      const uint32_t u = m_open[best];
      const double du = m_dist[u];
      // Every open column is at least du away and its sink edge is >= 0 (I2),
      // so none can offer a cheaper route to the sink.
      if (du >= d_sink) break;
      m_open[best] = m_open.back();
      m_open.pop_back();
      if (is_free(u)) {
        const double via = du + (m_pi[u] - m_pi_sink);
        if (via < d_sink) {
          d_sink = via;
          term = u;
        }
        if (du >= d_sink) break;  // relaxing could not reach below d_sink
      }
      if (m_count[u] == 0) continue;  // no point to move out of u
      const double* bv = &m_best_val[static_cast<size_t>(u) * k];
      const double base = du + m_pi[u];
      for (const uint32_t v : m_open) {
        const double nd = base + bv[v] - m_pi[v];
        if (nd < m_dist[v]) {
          m_dist[v] = nd;
          m_prev[v] = u;
        }
      }
    }
    // n <= k * cap leaves a free slot somewhere and every column is reachable
    // by its direct edge, so a terminal always exists.
    if (term == kNone) return false;
    // Settled columns are within d_sink; open ones (tentative distance only)
    // are at least d_sink away, and the min truncates them there.
    for (size_t j = 0; j < k; ++j) m_pi[j] += std::min(m_dist[j], d_sink);
    m_pi_sink += d_sink;

    // Walk the path back from the terminal. The via point of each hop is read
    // from the table before any row is rebuilt; each path column loses at most
    // one point and gains exactly one, recorded for the table update.
    m_changed.clear();
    uint32_t v = term;
    while (m_prev[v] != kNone) {
      const uint32_t u = m_prev[v];
      const uint32_t q = m_best_pt[static_cast<size_t>(u) * k + v];
      remove_member(q);
      add_member(q, v);
      m_changed.push_back({v, q, kNone});
      m_changed.push_back({u, kNone, q});
      v = u;
    }
    add_member(p, v);
    m_changed.push_back({v, p, kNone});
    rebuild_changed_rows();
    return true;
  }

  void add_member(uint32_t q, uint32_t j) {
    Column& col = m_columns[j];
    const size_t slot = col.members.size();
    if (col.moves.capacity() == 0) col.moves.reserve(m_initial_slots * m_k);
    col.moves.resize((slot + 1) * m_k);
    m_col[q] = j;
    m_pos[q] = static_cast<uint32_t>(slot);
    col.members.push_back(q);
    ++m_count[j];
    const double* cq = row(q);
    const double base = cq[j];
    double* mv = &col.moves[slot * m_k];
    for (size_t t = 0; t < m_k; ++t) mv[t] = cq[t] - base;
  }

  // Swap-with-last removal, mirrored in the move store so row s still
  // describes members[s].
  void remove_member(uint32_t q) {
    Column& col = m_columns[m_col[q]];
    const size_t slot = m_pos[q];
    const size_t last = col.members.size() - 1;
    if (slot != last) {
      const uint32_t moved = col.members[last];
      col.members[slot] = moved;
      m_pos[moved] = static_cast<uint32_t>(slot);
      std::copy_n(&col.moves[last * m_k], m_k, &col.moves[slot * m_k]);
    }
    col.members.pop_back();
    col.moves.resize(last * m_k);
    --m_count[m_col[q]];
    m_col[q] = kNone;
  }

  struct Column {
    std::vector<uint32_t> members;  // points in this column (unordered)
    // moves[s * k + t]: cost of moving members[s] from here to column t. A
    // compact copy of the members' cost rows: refilling a shortlist walks it
    // with a constant stride the prefetcher follows, where reading the rows in
    // the caller's n x k matrix took a cache miss per member (at n = 100k,
    // k = 64 those misses dominated the solve). Costs n * k doubles in all.
    std::vector<double> moves;
  };

  struct Change {
    uint32_t column;
    uint32_t added;
    uint32_t removed;
  };

  // Brings the shortlists (and the best-move table mirrored from them) of the
  // changed columns up to date.
  void rebuild_changed_rows() {
    // Fold the records per column (a path column appears once as "gained" and
    // once as "lost").
    std::sort(m_changed.begin(), m_changed.end(),
              [](const Change& a, const Change& b) { return a.column < b.column; });
    size_t i = 0;
    while (i < m_changed.size()) {
      const uint32_t c = m_changed[i].column;
      uint32_t added = kNone;
      uint32_t removed = kNone;
      for (; i < m_changed.size() && m_changed[i].column == c; ++i) {
        if (m_changed[i].added != kNone) added = m_changed[i].added;
        if (m_changed[i].removed != kNone) removed = m_changed[i].removed;
      }
      update_row(c, added, removed);
    }
  }

  // Column c lost `removed` and gained `added` (either may be kNone). The
  // removed point leaves every shortlist it is on; the newcomer joins a list
  // when that keeps the list a prefix of the sorted members (it beats the last
  // entry, or the list still holds every member). Only a list emptied while
  // the column still has members needs the O(count) scan of the move store.
  void update_row(uint32_t c, uint32_t added, uint32_t removed) {
    const size_t k = m_k;
    const size_t after = m_count[c];
    const size_t before_add = after - (added != kNone ? 1 : 0);
    Shortlist* lists = &m_short[static_cast<size_t>(c) * k];
    const double* ca = added != kNone ? row(added) : nullptr;
    const double* cr = removed != kNone ? row(removed) : nullptr;
    size_t n_stale = 0;
    for (size_t t = 0; t < k; ++t) {
      if (t == c) continue;
      Shortlist& list = lists[t];
      // A listed point is no worse than the last entry, so anything worse
      // cannot be on the list; the value is recomputed with the same
      // expression add_member stored, hence bit-identical.
      if (cr != nullptr && list.may_hold(cr[t] - cr[c], removed)) list.erase(removed);
      if (ca != nullptr) {
        const double val = ca[t] - ca[c];
        if ((list.size < kShortlist && list.size == before_add) ||
            (list.size > 0 && list.beats_last(val, added)))
          list.insert(val, added);
      }
      if (list.size == 0 && after > 0) m_stale[n_stale++] = static_cast<uint32_t>(t);
    }
    const Column& col = m_columns[c];
    for (size_t s = 0; s < n_stale; ++s) {
      const uint32_t t = m_stale[s];
      Shortlist& list = lists[t];
      const double* mv = &col.moves[t];
      for (size_t slot = 0; slot < after; ++slot) {
        const double v = mv[slot * k];
        if (list.size < kShortlist || list.beats_last(v, col.members[slot]))
          list.insert(v, col.members[slot]);
      }
    }
    double* bv = &m_best_val[static_cast<size_t>(c) * k];
    uint32_t* bp = &m_best_pt[static_cast<size_t>(c) * k];
    for (size_t t = 0; t < k; ++t) {
      if (t == c) continue;
      const bool any = lists[t].size > 0;
      bv[t] = any ? lists[t].val[0] : kInf;
      bp[t] = any ? lists[t].pt[0] : kNone;
    }
  }

  const double* m_cost;
  size_t m_n;
  size_t m_k;
  size_t m_cap;
  std::vector<uint32_t> m_col;     // column of each point, kNone if not yet placed
  std::vector<uint32_t> m_pos;     // slot of each point inside its column
  std::vector<Column> m_columns;   // members and move store per column
  std::vector<Shortlist> m_short;  // [j * k + j']: cheapest moves j -> j'
  // Heads of the shortlists, mirrored flat so Dijkstra reads one dense row.
  std::vector<double> m_best_val;   // [j * k + j']: cheapest move j -> j'
  std::vector<uint32_t> m_best_pt;  // [j * k + j']: the point making it
  std::vector<uint32_t> m_count;    // points per column (= members.size())
  std::vector<double> m_pi;         // column potentials
  double m_pi_sink = 0.0;
  // Dijkstra and update scratch, kept to avoid per-insertion allocation.
  std::vector<double> m_dist;
  std::vector<uint32_t> m_prev;
  std::vector<uint32_t> m_open;  // columns not yet settled by Dijkstra
  std::vector<uint32_t> m_stale;
  std::vector<Change> m_changed;
  size_t m_initial_slots;
};

}  // namespace

Result<std::vector<uint32_t>> assign_capacitated(std::span<const double> cost, size_t n, size_t k,
                                                 size_t cap) {
  if (k == 0) return Status{Errc::invalid_argument, "assign_capacitated: k must be >= 1"};
  ELDR_TRY(check_matrix(cost, n, k, "assign_capacitated"));
  // k * cap may overflow size_t (cap = SIZE_MAX means "unbounded"); compare
  // by division instead, then clamp: no column can ever hold more than n.
  const size_t max_cap = std::numeric_limits<size_t>::max() / k;
  if (cap <= max_cap && n > k * cap)
    return Status{Errc::invalid_argument, "assign_capacitated: n = " + std::to_string(n) +
                                              " points do not fit in k = " + std::to_string(k) +
                                              " columns of capacity " + std::to_string(cap)};
  if (n == 0) return std::vector<uint32_t>{};
  CapacitatedSolver solver(cost, n, k, std::min(cap, n));
  return solver.solve();
}

Result<std::vector<uint32_t>> hungarian_min(std::span<const double> cost, size_t n, size_t m) {
  ELDR_TRY(check_matrix(cost, n, m, "hungarian_min"));
  if (n > m)
    return Status{Errc::invalid_argument, "hungarian_min: needs rows <= columns, got " +
                                              std::to_string(n) + " x " + std::to_string(m)};
  if (n == 0) return std::vector<uint32_t>{};

  // Classic row-by-row Hungarian with potentials (1-based; column 0 is the
  // virtual column holding the row being inserted). Each row insertion is a
  // Dijkstra over the columns in reduced costs a[i][j] - u[i] - v[j] >= 0.
  std::vector<double> u(n + 1, 0.0);
  std::vector<double> v(m + 1, 0.0);
  std::vector<size_t> match(m + 1, 0);  // row (1-based) owning column j, 0 = free
  std::vector<size_t> way(m + 1, 0);
  std::vector<double> minv(m + 1);
  std::vector<uint8_t> used(m + 1);
  for (size_t i = 1; i <= n; ++i) {
    match[0] = i;
    size_t j0 = 0;
    std::fill(minv.begin(), minv.end(), kInf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[j0] = 1;
      const size_t i0 = match[j0];
      const double* a = cost.data() + (i0 - 1) * m;
      double delta = kInf;
      size_t j1 = 0;
      for (size_t j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const double cur = a[j - 1] - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        // Strict '<' keeps the lowest column index on ties (determinism).
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      // n <= m keeps a free column unvisited, and finite costs keep delta
      // finite, so j1 is always a real column here.
      if (j1 == 0) return Status{Errc::internal, "hungarian_min: no augmenting column"};
      for (size_t j = 0; j <= m; ++j) {
        if (used[j]) {
          u[match[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (match[j0] != 0);
    do {
      const size_t j1 = way[j0];
      match[j0] = match[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<uint32_t> out(n, 0);
  for (size_t j = 1; j <= m; ++j) {
    if (match[j] != 0) out[match[j] - 1] = static_cast<uint32_t>(j - 1);
  }
  return out;
}

}  // namespace eldr
