#include "eldr/routed_experts.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/base64.hpp"
#include "eldr/internal/checked_math.hpp"
#include "eldr/npy.hpp"

namespace eldr {
namespace {

// Decoded bytes per base64 chunk: a multiple of 3 (whole quanta) and of 8 (whole
// elements of every dtype), small enough for L1 next to the accumulator.
constexpr size_t kChunkBytes = 3 * 8 * 256;

// Everything the counting loop needs, derived once per call from the options
// and the payload's axes.
struct Plan {
  uint32_t experts = 0;
  uint32_t hidden_layers = 0;
  uint32_t top_k = 0;
  uint32_t layers = 0;  // footprint L
  uint64_t rows = 0;
  uint64_t first = 0, last = 0;  // counted rows [first, last)
  // The accumulator is [L + 2][E + 2]: per footprint layer a column for
  // cached entries (int16 -1), the E experts and a column for bad ids; then
  // a row that takes the MoE entries of rows outside the counted range (only
  // its bad column matters) and one that takes dense layers' entries
  // (ignored). Clamping every id into its row makes the hot loop branch-free:
  // a bad id lands in a bad column, found after the chunk.
  uint32_t stride = 0;  // E + 2
  // Per position inside a row ([hidden layer][slot]): the offset of the
  // accumulator row it lands in, for a counted row and for an uncounted one.
  std::vector<uint32_t> counted_offset, uncounted_offset;
};

std::string uint_list(std::span<const uint32_t> v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > 8) s += ", ...";
  return s;
}

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

// Counts a stream of ids into the accumulator, element by element in
// row-major order, however the caller splits the stream.
class Counter {
 public:
  explicit Counter(Plan plan)
      : m_plan(std::move(plan)), m_acc(size_t{m_plan.layers + 2} * m_plan.stride, 0) {}

  template <class T>
  Status feed(const uint8_t* bytes, size_t n);

  // Narrows into out, or out_of_range (out untouched) when a cell passes int16.
  Status finish(std::span<int16_t> out) const;

  uint64_t cached() const noexcept;
  const Plan& plan() const noexcept { return m_plan; }

 private:
  template <class T>
  void count(const uint8_t* bytes, size_t n);
  template <class T>
  Status find_bad(const uint8_t* bytes, size_t n, uint64_t row, size_t col) const;
  bool any_bad() const noexcept;

  Plan m_plan;
  // uint32: the counted cells are bounded by make_plan; the sink rows may
  // wrap harmlessly, and bad columns are checked after every chunk of at most
  // kMaxFeed elements, long before they could wrap to zero.
  std::vector<uint32_t> m_acc;
  uint64_t m_row = 0;
  size_t m_col = 0;
};

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

// The payload length (bytes of ids) as whole rows of [H][k] elements.
Result<uint64_t> whole_rows(uint64_t bytes, IdDtype dtype, uint32_t hidden_layers, uint32_t top_k) {
  const uint64_t row_bytes = uint64_t{hidden_layers} * top_k * id_dtype_size(dtype);
  if (row_bytes == 0) return uint64_t{0};
  if (bytes % row_bytes != 0)
    return Status{Errc::corrupt, "payload of " + std::to_string(bytes) + " bytes is not a whole " +
                                     "number of rows of " + std::to_string(hidden_layers) + " x " +
                                     std::to_string(top_k) + " " + id_dtype_name(dtype) + " (" +
                                     std::to_string(row_bytes) + " bytes each)"};
  return bytes / row_bytes;
}

Status require_axes(const RoutedExpertsOptions& o) {
  if (o.num_hidden_layers == 0)
    return {Errc::invalid_argument, "num_hidden_layers is required for raw ids"};
  if (o.top_k == 0) return {Errc::invalid_argument, "top_k is required for raw ids"};
  return Status::ok();
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

struct NpyIds {
  IdDtype dtype;
  uint32_t hidden_layers;
  uint32_t top_k;
  uint64_t rows;
  uint64_t data_offset;
};

// Checks a .npy header against what the decoder accepts and the caller said.
Result<NpyIds> check_npy_header(const NpyHeader& h, uint64_t total_bytes,
                                const RoutedExpertsOptions& o, const IdDtype* expected) {
  NpyIds ids{};
  switch (h.dtype) {
    case NpyDtype::u8:
      ids.dtype = IdDtype::u8;
      break;
    case NpyDtype::u16:
      ids.dtype = IdDtype::u16;
      break;
    case NpyDtype::i16:
      ids.dtype = IdDtype::i16;
      break;
    case NpyDtype::i32:
      ids.dtype = IdDtype::i32;
      break;
    case NpyDtype::i64:
      ids.dtype = IdDtype::i64;
      break;
    default:
      return Status{Errc::unsupported, std::string("npy dtype '") + npy_dtype_descr(h.dtype) +
                                           "' is not an expert id dtype (u1, u2, i2, i4, i8)"};
  }
  if (h.big_endian)
    return Status{Errc::unsupported, "npy: big-endian expert ids are not supported"};
  if (h.fortran_order)
    return Status{Errc::unsupported, "npy: fortran_order True is not supported (save C order)"};
  if (expected && *expected != ids.dtype)
    return Status{Errc::shape_mismatch, std::string("npy holds ") + id_dtype_name(ids.dtype) +
                                            " ids, the caller expects " + id_dtype_name(*expected)};
  if (h.shape.size() != 3)
    return Status{Errc::shape_mismatch,
                  "npy routed experts must be 3-D [rows, layers, top_k], got " +
                      std::to_string(h.shape.size()) + " dimensions"};
  if (h.shape[1] == 0 || h.shape[1] > kMaxLayers || h.shape[2] == 0 || h.shape[2] > kMaxTopK)
    return Status{Errc::shape_mismatch, "npy shape (" + std::to_string(h.shape[0]) + ", " +
                                            std::to_string(h.shape[1]) + ", " +
                                            std::to_string(h.shape[2]) +
                                            ") needs 1 <= layers <= " + std::to_string(kMaxLayers) +
                                            " and 1 <= top_k <= " + std::to_string(kMaxTopK)};
  ids.rows = h.shape[0];
  ids.hidden_layers = static_cast<uint32_t>(h.shape[1]);
  ids.top_k = static_cast<uint32_t>(h.shape[2]);
  if (o.num_hidden_layers != 0 && o.num_hidden_layers != ids.hidden_layers)
    return Status{Errc::shape_mismatch, "npy has " + std::to_string(ids.hidden_layers) +
                                            " layers, the caller says num_hidden_layers = " +
                                            std::to_string(o.num_hidden_layers)};
  if (o.top_k != 0 && o.top_k != ids.top_k)
    return Status{Errc::shape_mismatch, "npy has top_k " + std::to_string(ids.top_k) +
                                            ", the caller says " + std::to_string(o.top_k)};
  ids.data_offset = h.data_offset;
  const uint64_t actual = total_bytes - h.data_offset;
  if (actual != h.data_bytes)
    return Status{Errc::corrupt,
                  "npy data is " + std::to_string(actual) + " bytes, its shape needs " +
                      std::to_string(h.data_bytes) +
                      (actual < h.data_bytes ? " (truncated)" : " (trailing bytes)")};
  return ids;
}

// Decodes just past the header of a base64 .npy (whole quanta) into
// `prefix`: its fixed preamble says how long the dict is.
Result<NpyHeader> read_base64_npy_header(base64::Decoder& dec, std::vector<uint8_t>* prefix) {
  const size_t total = dec.decoded_size();
  auto grow_to = [&](size_t want) -> Status {
    want = std::min(want, total);
    while (prefix->size() < want) {
      const size_t need = (want - prefix->size() + 2) / 3 * 3;
      const size_t at = prefix->size();
      prefix->resize(at + need + 1);
      auto n = dec.next(prefix->data() + at, need + 1);
      if (!n) return n.status();
      prefix->resize(at + *n);
      if (*n == 0) break;
    }
    return Status::ok();
  };
  ELDR_TRY(grow_to(kNpyPreambleMax));
  auto header_size = npy_header_size(*prefix);
  if (!header_size) return header_size.status();
  if (*header_size > total)
    return Status{Errc::corrupt, "npy truncated inside its header (" + std::to_string(total) +
                                     " bytes, the header needs " + std::to_string(*header_size) +
                                     ")"};
  ELDR_TRY(grow_to(static_cast<size_t>(*header_size)));
  return parse_npy_header(*prefix);
}

template <class F>
auto guarded(const char* what, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Status{Errc::out_of_memory, std::string(what) + ": out of memory"};
  } catch (const std::exception& e) {
    return Status{Errc::internal, std::string(what) + ": " + e.what()};
  }
}

}  // namespace

size_t id_dtype_size(IdDtype dtype) noexcept {
  switch (dtype) {
    case IdDtype::u8:
      return 1;
    case IdDtype::u16:
    case IdDtype::i16:
      return 2;
    case IdDtype::i32:
      return 4;
    case IdDtype::i64:
      return 8;
  }
  return 1;
}

const char* id_dtype_name(IdDtype dtype) noexcept {
  switch (dtype) {
    case IdDtype::u8:
      return "uint8";
    case IdDtype::u16:
      return "uint16";
    case IdDtype::i16:
      return "int16";
    case IdDtype::i32:
      return "int32";
    case IdDtype::i64:
      return "int64";
  }
  return "?";
}

Result<IdDtype> parse_id_dtype(std::string_view name) {
  for (IdDtype d : {IdDtype::u8, IdDtype::u16, IdDtype::i16, IdDtype::i32, IdDtype::i64})
    if (name == id_dtype_name(d)) return d;
  return Status{Errc::invalid_argument, "unknown id dtype '" + std::string(name.substr(0, 32)) +
                                            "' (expected uint8, uint16, int16, int32 or int64)"};
}

uint32_t footprint_layers(const RoutedExpertsOptions& options,
                          uint32_t num_hidden_layers) noexcept {
  return options.moe_layers.empty() ? num_hidden_layers
                                    : static_cast<uint32_t>(options.moe_layers.size());
}

Result<RoutedExpertsInfo> footprint_from_ids(std::span<const uint8_t> bytes, IdDtype dtype,
                                             const RoutedExpertsOptions& options,
                                             std::span<int16_t> out) {
  return guarded("footprint_from_ids", [&]() -> Result<RoutedExpertsInfo> {
    ELDR_TRY(check_options(options));
    ELDR_TRY(require_axes(options));
    auto rows = whole_rows(bytes.size(), dtype, options.num_hidden_layers, options.top_k);
    if (!rows) return rows.status();
    auto plan = make_plan(options, options.num_hidden_layers, options.top_k, *rows, out.size());
    if (!plan) return plan.status();
    Counter counter(std::move(*plan));
    ELDR_TRY(feed(counter, dtype, bytes.data(), bytes.size() / id_dtype_size(dtype)));
    return finish(counter, dtype, out);
  });
}

Result<RoutedExpertsInfo> footprint_from_base64_ids(std::string_view base64, IdDtype dtype,
                                                    const RoutedExpertsOptions& options,
                                                    std::span<int16_t> out) {
  return guarded("footprint_from_base64_ids", [&]() -> Result<RoutedExpertsInfo> {
    ELDR_TRY(check_options(options));
    ELDR_TRY(require_axes(options));
    auto dec = base64::Decoder::create(base64);
    if (!dec) return dec.status();
    auto rows = whole_rows(dec->decoded_size(), dtype, options.num_hidden_layers, options.top_k);
    if (!rows) return rows.status();
    auto plan = make_plan(options, options.num_hidden_layers, options.top_k, *rows, out.size());
    if (!plan) return plan.status();
    Counter counter(std::move(*plan));
    ELDR_TRY(stream(*dec, counter, dtype, nullptr, 0));
    return finish(counter, dtype, out);
  });
}

Result<RoutedExpertsInfo> footprint_from_npy(std::span<const uint8_t> npy,
                                             const RoutedExpertsOptions& options,
                                             std::span<int16_t> out, const IdDtype* expected) {
  return guarded("footprint_from_npy", [&]() -> Result<RoutedExpertsInfo> {
    ELDR_TRY(check_options(options));
    auto header = parse_npy_header(npy);
    if (!header) return header.status();
    auto ids = check_npy_header(*header, npy.size(), options, expected);
    if (!ids) return ids.status();
    auto plan = make_plan(options, ids->hidden_layers, ids->top_k, ids->rows, out.size());
    if (!plan) return plan.status();
    Counter counter(std::move(*plan));
    const uint64_t data_bytes = npy.size() - ids->data_offset;
    ELDR_TRY(feed(counter, ids->dtype, npy.data() + ids->data_offset,
                  static_cast<size_t>(data_bytes / id_dtype_size(ids->dtype))));
    return finish(counter, ids->dtype, out);
  });
}

Result<RoutedExpertsInfo> footprint_from_base64_npy(std::string_view base64,
                                                    const RoutedExpertsOptions& options,
                                                    std::span<int16_t> out,
                                                    const IdDtype* expected) {
  return guarded("footprint_from_base64_npy", [&]() -> Result<RoutedExpertsInfo> {
    ELDR_TRY(check_options(options));
    auto dec = base64::Decoder::create(base64);
    if (!dec) return dec.status();
    const size_t total = dec->decoded_size();
    std::vector<uint8_t> prefix;
    auto header = read_base64_npy_header(*dec, &prefix);
    if (!header) return header.status();
    auto ids = check_npy_header(*header, total, options, expected);
    if (!ids) return ids.status();
    auto plan = make_plan(options, ids->hidden_layers, ids->top_k, ids->rows, out.size());
    if (!plan) return plan.status();
    Counter counter(std::move(*plan));
    const size_t offset = static_cast<size_t>(ids->data_offset);
    ELDR_TRY(stream(*dec, counter, ids->dtype, prefix.data() + offset, prefix.size() - offset));
    return finish(counter, ids->dtype, out);
  });
}

Result<RoutedExpertsInfo> base64_npy_shape(std::string_view base64) {
  return guarded("base64_npy_shape", [&]() -> Result<RoutedExpertsInfo> {
    auto dec = base64::Decoder::create(base64);
    if (!dec) return dec.status();
    std::vector<uint8_t> prefix;
    auto header = read_base64_npy_header(*dec, &prefix);
    if (!header) return header.status();
    RoutedExpertsOptions any;
    auto ids = check_npy_header(*header, dec->decoded_size(), any, nullptr);
    if (!ids) return ids.status();
    RoutedExpertsInfo info;
    info.dtype = ids->dtype;
    info.num_hidden_layers = ids->hidden_layers;
    info.top_k = ids->top_k;
    info.footprint_layers = ids->hidden_layers;
    info.rows_in_payload = ids->rows;
    return info;
  });
}

}  // namespace eldr
