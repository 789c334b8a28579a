// A map that keeps its newest `capacity` entries: what a pool client or node
// remembers about requests routed over NATS (which node routed each, the
// route keys cancelled before their route came), where nothing says when an
// entry is no longer needed and the oldest is the first to let go. Not
// thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <utility>

namespace eldr::pool {

template <class K, class V>
class RecentMap {
 public:
  explicit RecentMap(size_t capacity) : m_capacity(std::max<size_t>(capacity, 1)) {}

  // Adds `key` as the newest entry (replacing one of the same key), then
  // forgets the oldest past capacity.
  void put(K key, V value) {
    const uint64_t seq = ++m_seq;
    m_order.emplace_back(key, seq);
    m_map.insert_or_assign(std::move(key), Slot{std::move(value), seq});
    while (m_map.size() > m_capacity) forget_front();
    // Replaced and taken entries leave their places in m_order behind:
    // dropped once they outnumber the live ones (amortised O(1)).
    if (m_order.size() > 2 * m_capacity + 16) compact();
  }

  const V* find(const K& key) const {
    const auto it = m_map.find(key);
    return it == m_map.end() ? nullptr : &it->second.value;
  }

  std::optional<V> take(const K& key) {
    const auto it = m_map.find(key);
    if (it == m_map.end()) return std::nullopt;
    V value = std::move(it->second.value);
    m_map.erase(it);
    return value;
  }

  size_t size() const noexcept { return m_map.size(); }
  size_t capacity() const noexcept { return m_capacity; }

 private:
  struct Slot {
    V value;
    uint64_t seq;  // its place in m_order
  };
  bool live(const std::pair<K, uint64_t>& place) const {
    const auto it = m_map.find(place.first);
    return it != m_map.end() && it->second.seq == place.second;
  }
  void forget_front() {
    while (!m_order.empty()) {
      const auto place = std::move(m_order.front());
      m_order.pop_front();
      if (live(place)) {
        m_map.erase(place.first);
        return;
      }
    }
  }
  void compact() {
    std::deque<std::pair<K, uint64_t>> kept;
    for (auto& place : m_order)
      if (live(place)) kept.push_back(std::move(place));
    m_order.swap(kept);
  }

  size_t m_capacity;
  uint64_t m_seq = 0;
  std::unordered_map<K, Slot> m_map;
  std::deque<std::pair<K, uint64_t>> m_order;  // oldest first, with stale places
};

}  // namespace eldr::pool
