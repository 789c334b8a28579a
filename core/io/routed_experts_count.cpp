// The counting core of the routed-expert decoders: the option checks, the
// counting plan, the Counter's branch-free hot loop (and its slow path naming
// a bad id) and the base64 streaming into it. See routed_experts_count.hpp.
#include "routed_experts_count.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "eldr/base64.hpp"
#include "eldr/geometry.hpp"
#include "eldr/internal/checked_math.hpp"

namespace eldr::expert_ids {
namespace {

// Decoded bytes per base64 chunk: a multiple of 3 (whole quanta) and of 8 (whole
// elements of every dtype), small enough for L1 next to the accumulator.
constexpr size_t kChunkBytes = 3 * 8 * 256;

std::string uint_list(std::span<const uint32_t> v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > 8) s += ", ...";
  return s;
}

}  // namespace

Status check_options(const RoutedExpertsOptions& o) {
  if (o.num_experts == 0 || o.num_experts > kMaxExperts)
    return {Errc::invalid_argument, "num_experts " + std::to_string(o.num_experts) +
                                        " is outside 1.." + std::to_string(kMaxExperts)};
  if (o.num_hidden_layers > kMaxLayers)
    return {Errc::invalid_argument, "num_hidden_layers " + std::to_string(o.num_hidden_layers) +
                                        " is above " + std::to_string(kMaxLayers)};
  if (o.top_k > kMaxTopK)
    return {Errc::invalid_argument,
            "top_k " + std::to_string(o.top_k) + " is above " + std::to_string(kMaxTopK)};
  for (size_t i = 1; i < o.moe_layers.size(); ++i)
    if (o.moe_layers[i] <= o.moe_layers[i - 1])
      return {Errc::invalid_argument,
              "moe_layers must be ascending and unique: " + uint_list(o.moe_layers)};
  return Status::ok();
}

Result<Plan> make_plan(const RoutedExpertsOptions& o, uint32_t hidden_layers, uint32_t top_k,
                       uint64_t rows, size_t out_cells) {
  if (hidden_layers == 0 || hidden_layers > kMaxLayers)
    return Status{Errc::shape_mismatch, "num_hidden_layers " + std::to_string(hidden_layers) +
                                            " is outside 1.." + std::to_string(kMaxLayers)};
  if (top_k == 0 || top_k > kMaxTopK)
    return Status{Errc::shape_mismatch,
                  "top_k " + std::to_string(top_k) + " is outside 1.." + std::to_string(kMaxTopK)};
  if (!o.moe_layers.empty() && o.moe_layers.back() >= hidden_layers)
    return Status{Errc::out_of_range,
                  "moe_layers names hidden layer " + std::to_string(o.moe_layers.back()) +
                      " but the model has " + std::to_string(hidden_layers) + " hidden layers"};
  Plan p;
  p.experts = o.num_experts;
  p.hidden_layers = hidden_layers;
  p.top_k = top_k;
  p.layers = footprint_layers(o, hidden_layers);
  p.rows = rows;
  const size_t cells = size_t{p.layers} * p.experts;
  if (out_cells != cells)
    return Status{Errc::shape_mismatch, "the footprint buffer holds " + std::to_string(out_cells) +
                                            " cells, " + std::to_string(p.layers) + " layers x " +
                                            std::to_string(p.experts) + " experts need " +
                                            std::to_string(cells)};
  p.first = o.first_row;
  if (p.first > rows)
    return Status{Errc::out_of_range, "first_row " + std::to_string(p.first) +
                                          " is past the payload's " + std::to_string(rows) +
                                          " rows"};
  if (o.row_count == kAllRows) {
    p.last = rows;
  } else if (o.row_count > rows - p.first) {
    return Status{Errc::out_of_range,
                  "rows [" + std::to_string(p.first) + ", " + std::to_string(p.first) + " + " +
                      std::to_string(o.row_count) + ") run past the payload's " +
                      std::to_string(rows) + " rows"};
  } else {
    p.last = p.first + o.row_count;
  }
  // The accumulator's counted cells cannot wrap: one grows at most top_k per
  // counted row.
  uint64_t max_cell = 0;
  if (!checked_mul(p.last - p.first, top_k, &max_cell) || max_cell > INT32_MAX)
    return Status{Errc::out_of_range, std::to_string(p.last - p.first) +
                                          " rows are too many to count into an int16 footprint"};
  p.stride = p.experts + 2;
  const uint32_t uncounted_row = p.layers * p.stride, dense_row = (p.layers + 1) * p.stride;
  std::vector<uint32_t> layer_offset(hidden_layers, dense_row);
  if (o.moe_layers.empty()) {
    for (uint32_t h = 0; h < hidden_layers; ++h) layer_offset[h] = h * p.stride;
  } else {
    for (size_t i = 0; i < o.moe_layers.size(); ++i)
      layer_offset[o.moe_layers[i]] = static_cast<uint32_t>(i) * p.stride;
  }
  p.counted_offset.resize(size_t{hidden_layers} * top_k);
  p.uncounted_offset.resize(size_t{hidden_layers} * top_k);
  for (uint32_t h = 0; h < hidden_layers; ++h) {
    const auto at = static_cast<std::ptrdiff_t>(size_t{h} * top_k);
    std::fill_n(p.counted_offset.begin() + at, top_k, layer_offset[h]);
    std::fill_n(p.uncounted_offset.begin() + at, top_k,
                layer_offset[h] == dense_row ? dense_row : uncounted_row);
  }
  return p;
}

constexpr size_t kMaxFeed = size_t{1} << 20;

template <class T>
void Counter::count(const uint8_t* bytes, size_t n) {
  constexpr bool kCachedMarker = std::is_same_v<T, int16_t>;
  uint32_t* acc = m_acc.data();
  const uint64_t experts = m_plan.experts;
  const uint32_t experts32 = m_plan.experts, experts1 = m_plan.experts + 1;
  const size_t row_len = m_plan.counted_offset.size();
  while (n > 0) {
    const bool counting = m_row >= m_plan.first && m_row < m_plan.last;
    const uint32_t* offsets =
        (counting ? m_plan.counted_offset.data() : m_plan.uncounted_offset.data()) + m_col;
    const size_t take = std::min(n, row_len - m_col);
    // Column of id v: 1 + v for a valid id, E + 1 for a bad one, 0 for the
    // int16 cached marker. Converted to unsigned, a negative id is huge, so
    // one unsigned min covers both ends. Two passes per block: the cell indices
    // first (a loop the compiler vectorises), then the increments (the only
    // data-dependent stores, with nothing else in their loop).
    constexpr size_t kBlock = 256;
    uint32_t cell[kBlock];
    for (size_t b = 0; b < take; b += kBlock) {
      const size_t m = std::min(kBlock, take - b);
      const uint8_t* src = bytes + b * sizeof(T);
      for (size_t i = 0; i < m; ++i) {
        T v;
        std::memcpy(&v, src + i * sizeof(T), sizeof(T));
        if constexpr (kCachedMarker) {
          const int32_t id = int32_t{v} + 1;  // -1 -> 0; other negatives stay negative
          const auto col =
              static_cast<uint32_t>(id) > experts1 ? experts1 : static_cast<uint32_t>(id);
          cell[i] = offsets[b + i] + col;
        } else if constexpr (sizeof(T) <= 4) {
          // A negative id converts to 2^32 - |v|, far above any E.
          const auto id = static_cast<uint32_t>(v);
          cell[i] = offsets[b + i] + 1 + (id < experts32 ? id : experts32);
        } else {
          const auto id = static_cast<uint64_t>(static_cast<int64_t>(v));
          cell[i] = offsets[b + i] + 1 + static_cast<uint32_t>(std::min(id, experts));
        }
      }
      for (size_t i = 0; i < m; ++i) ++acc[cell[i]];
    }
    bytes += take * sizeof(T);
    n -= take;
    m_col += take;
    if (m_col == row_len) {
      m_col = 0;
      ++m_row;
    }
  }
}

bool Counter::any_bad() const noexcept {
  uint32_t bad = 0;
  for (uint32_t l = 0; l <= m_plan.layers; ++l)
    bad |= m_acc[size_t{l} * m_plan.stride + m_plan.experts + 1];
  return bad != 0;
}

uint64_t Counter::cached() const noexcept {
  uint64_t n = 0;
  for (uint32_t l = 0; l < m_plan.layers; ++l) n += m_acc[size_t{l} * m_plan.stride];
  return n;
}

// The slow path after a chunk put something in a bad column: name the first
// bad id of the chunk.
template <class T>
Status Counter::find_bad(const uint8_t* bytes, size_t n, uint64_t row, size_t col) const {
  const size_t row_len = m_plan.counted_offset.size();
  const uint32_t dense_row = (m_plan.layers + 1) * m_plan.stride;
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
    const bool dense = m_plan.counted_offset[col] == dense_row;
    const bool cached = std::is_same_v<T, int16_t> && v == -1;
    if (!dense && !cached && static_cast<uint64_t>(static_cast<int64_t>(v)) >= m_plan.experts) {
      std::string where = " at row " + std::to_string(row) + ", hidden layer " +
                          std::to_string(col / m_plan.top_k) + ", slot " +
                          std::to_string(col % m_plan.top_k);
      if constexpr (std::is_signed_v<T>) {
        if (v < 0)
          return {Errc::out_of_range,
                  "negative expert id " + std::to_string(v) + where +
                      (std::is_same_v<T, int16_t> ? " (only -1 marks a cached entry)"
                                                  : " (only int16 ids may mark cached entries)")};
      }
      return {Errc::out_of_range, "expert id " + std::to_string(v) + where + " is outside [0, " +
                                      std::to_string(m_plan.experts) + ")"};
    }
    if (++col == row_len) {
      col = 0;
      ++row;
    }
  }
  return {Errc::internal, "a bad expert id was counted but not found again"};
}

template <class T>
Status Counter::feed(const uint8_t* bytes, size_t n) {
  while (n > 0) {
    const size_t take = std::min(n, kMaxFeed);
    const uint64_t row = m_row;
    const size_t col = m_col;
    count<T>(bytes, take);
    if (any_bad()) return find_bad<T>(bytes, take, row, col);
    bytes += take * sizeof(T);
    n -= take;
  }
  return Status::ok();
}

Status Counter::finish(std::span<int16_t> out) const {
  const uint32_t e = m_plan.experts;
  for (uint32_t l = 0; l < m_plan.layers; ++l) {
    const uint32_t* row = m_acc.data() + size_t{l} * m_plan.stride + 1;
    for (uint32_t x = 0; x < e; ++x)
      if (row[x] > INT16_MAX)
        return {Errc::out_of_range, "footprint cell [layer " + std::to_string(l) + ", expert " +
                                        std::to_string(x) + "] counts " + std::to_string(row[x]) +
                                        " tokens, past int16's 32767"};
  }
  for (uint32_t l = 0; l < m_plan.layers; ++l) {
    const uint32_t* row = m_acc.data() + size_t{l} * m_plan.stride + 1;
    for (uint32_t x = 0; x < e; ++x) out[size_t{l} * e + x] = static_cast<int16_t>(row[x]);
  }
  return Status::ok();
}

Status feed(Counter& counter, IdDtype dtype, const uint8_t* bytes, size_t elems) {
  switch (dtype) {
    case IdDtype::u8:
      return counter.feed<uint8_t>(bytes, elems);
    case IdDtype::u16:
      return counter.feed<uint16_t>(bytes, elems);
    case IdDtype::i16:
      return counter.feed<int16_t>(bytes, elems);
    case IdDtype::i32:
      return counter.feed<int32_t>(bytes, elems);
    case IdDtype::i64:
      return counter.feed<int64_t>(bytes, elems);
  }
  return {Errc::invalid_argument, "unknown id dtype"};
}

Result<RoutedExpertsInfo> finish(const Counter& counter, IdDtype dtype, std::span<int16_t> out) {
  ELDR_TRY(counter.finish(out));
  const Plan& p = counter.plan();
  RoutedExpertsInfo info;
  info.dtype = dtype;
  info.num_hidden_layers = p.hidden_layers;
  info.top_k = p.top_k;
  info.footprint_layers = p.layers;
  info.rows_in_payload = p.rows;
  info.rows_counted = p.last - p.first;
  info.cached_entries = counter.cached();
  return info;
}

// Streams the rest of a base64 text through the counter. `carry` bytes of
// already decoded data (the start of the ids) come first.
Status stream(base64::Decoder& dec, Counter& counter, IdDtype dtype, const uint8_t* carry,
              size_t carry_len) {
  const size_t width = id_dtype_size(dtype);
  alignas(64) uint8_t buf[kChunkBytes + 16];
  if (carry_len > 0) std::memcpy(buf, carry, carry_len);
  size_t have = carry_len;
  while (dec.remaining() > 0) {
    auto n = dec.next(buf + have, sizeof buf - have);
    if (!n) return n.status();
    if (*n == 0) return {Errc::internal, "base64 decoder made no progress"};
    have += *n;
    const size_t elems = have / width;
    ELDR_TRY(feed(counter, dtype, buf, elems));
    const size_t used = elems * width;
    std::memmove(buf, buf + used, have - used);
    have -= used;
  }
  // The length was checked as whole rows before streaming.
  if (have != 0) return {Errc::internal, "base64 stream ended inside an element"};
  return Status::ok();
}

}  // namespace eldr::expert_ids
