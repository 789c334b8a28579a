// The prompts of requests routed from their prompt, kept by request id until
// the request's real footprint arrives (Router::learn) or it is forgotten:
// a bounded FIFO (the oldest is dropped first, counted). Private to core;
// the Router serialises calls with its own mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>

#include "eldr/predictor.hpp"

namespace eldr::detail {

class PromptMemory {
 public:
  explicit PromptMemory(uint32_t capacity) : m_capacity(capacity) {}
  // Replaces what an earlier request with the same id left.
  void remember(uint64_t id, PromptFeatures features) {
    if (m_capacity == 0) return;
    if (m_entries.insert_or_assign(id, std::move(features)).second) m_order.push_back(id);
    while (m_entries.size() > m_capacity) {
      m_dropped += m_entries.erase(m_order.front());  // 0: taken already
      m_order.pop_front();
    }
    // The order list holds taken ids until they reach the front.
    while (m_order.size() > 2 * size_t{m_capacity} && !m_entries.count(m_order.front()))
      m_order.pop_front();
  }
  std::optional<PromptFeatures> take(uint64_t id) {
    auto it = m_entries.find(id);
    if (it == m_entries.end()) return std::nullopt;
    PromptFeatures f = std::move(it->second);
    m_entries.erase(it);
    return f;
  }
  uint64_t dropped() const noexcept { return m_dropped; }

 private:
  uint32_t m_capacity;
  std::unordered_map<uint64_t, PromptFeatures> m_entries;
  std::deque<uint64_t> m_order;
  uint64_t m_dropped = 0;
};

}  // namespace eldr::detail
