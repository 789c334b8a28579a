// The counting core shared by the routed-expert decoders (routed_experts.cpp:
// raw and base64 ids; routed_experts_npy.cpp: .npy and base64 .npy): the
// option checks, the counting plan, the Counter that turns a stream of ids
// into a footprint, and the base64 streaming into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "eldr/base64.hpp"
#include "eldr/routed_experts.hpp"

namespace eldr::expert_ids {

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

Status check_options(const RoutedExpertsOptions& o);

// The plan for a payload of `rows` rows of [hidden_layers][top_k] ids,
// counted into a footprint of `out_cells` cells.
Result<Plan> make_plan(const RoutedExpertsOptions& o, uint32_t hidden_layers, uint32_t top_k,
                       uint64_t rows, size_t out_cells);

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

// Feeds `elems` ids of `dtype` to the counter.
Status feed(Counter& counter, IdDtype dtype, const uint8_t* bytes, size_t elems);

// Narrows the counts into out and says what was counted.
Result<RoutedExpertsInfo> finish(const Counter& counter, IdDtype dtype, std::span<int16_t> out);

// Streams the rest of a base64 text through the counter. `carry` bytes of
// already decoded data (the start of the ids) come first.
Status stream(base64::Decoder& dec, Counter& counter, IdDtype dtype, const uint8_t* carry,
              size_t carry_len);

// Runs a decoder's body, turning exceptions into a Status naming `what`.
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

}  // namespace eldr::expert_ids
