// The daemon's request map: request id -> routed worker and the router's key
// of the request (RouteHints::request_id), for the requests in flight, oldest
// first, bounded. A complete releases its request's worker; a
// full map evicts its oldest request. On the footprint path (one insert, one
// or two lookups per footprint), so it never allocates once grown: entries
// live in a pool (ids inline, at most shm::kMaxRequestId bytes) threaded on an
// intrusive oldest-first list, found through an open-addressing index
// (linear probing, deletion by backward shift: no tombstones to clean up).
// A list rather than a ring of entries: completes arrive out of order, and a
// ring's holes would evict a request before the map holds `capacity` ones.
// Single-threaded (the daemon's consumer thread).
#pragma once

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "eldr/shm.hpp"

namespace eldr::sidecar {

class RequestMap {
 public:
  // capacity >= 1. Memory grows with the requests held (doubling) up to
  // capacity, then stays put.
  explicit RequestMap(uint32_t capacity) : m_capacity(capacity) {
    m_entries.reserve(std::min<uint32_t>(capacity, kInitialEntries));
    m_index.assign(index_size_for(m_entries.capacity()), 0);
  }

  // What the map holds about one request.
  struct Held {
    int32_t worker = -1;
    uint64_t key = 0;        // the caller's (the service: its router request id)
    uint64_t token = 0;      // what a complete must present (the service's completion token)
    uint32_t owner_pid = 0;  // the process that pushed it: may complete it without the token
    // Routed from its prompt, its real footprint not pushed yet: the next
    // footprint of the id is learned from, not routed again.
    bool awaiting_footprint = false;
  };

  size_t size() const noexcept { return m_size; }
  uint32_t capacity() const noexcept { return m_capacity; }
  bool full() const noexcept { return m_size >= m_capacity; }

  std::optional<int32_t> find(std::string_view id) const noexcept {
    const size_t at = locate(id, hash_of(id));
    if (at == kNotFound) return std::nullopt;
    return m_entries[slot_of(m_index[at])].worker;
  }
  std::optional<Held> held(std::string_view id) const noexcept {
    const size_t at = locate(id, hash_of(id));
    if (at == kNotFound) return std::nullopt;
    return held_of(m_entries[slot_of(m_index[at])]);
  }
  // Sets Held::awaiting_footprint of a held id; false when `id` is not held.
  bool set_awaiting(std::string_view id, bool awaiting) noexcept {
    const size_t at = locate(id, hash_of(id));
    if (at == kNotFound) return false;
    m_entries[slot_of(m_index[at])].awaiting = awaiting;
    return true;
  }

  // What is held about `id` and whether allow(held) let it be removed;
  // nullopt when `id` is not held. One lookup for the check and the removal.
  struct Checked {
    Held held;
    bool taken = false;
  };
  template <class Allow>
  std::optional<Checked> take_if(std::string_view id, Allow&& allow) noexcept {
    const size_t at = locate(id, hash_of(id));
    if (at == kNotFound) return std::nullopt;
    const uint32_t slot = slot_of(m_index[at]);
    const Held held = held_of(m_entries[slot]);
    if (!allow(held)) return Checked{held, false};
    remove_from_index(at);
    return Checked{release(slot), true};
  }

  // Removes `id`; returns what was held about it, if it was held.
  std::optional<Held> take(std::string_view id) noexcept {
    const size_t at = locate(id, hash_of(id));
    if (at == kNotFound) return std::nullopt;
    const uint32_t slot = slot_of(m_index[at]);
    remove_from_index(at);
    return release(slot);
  }

  // Removes the oldest request; returns what was held. Requires size() > 0.
  Held take_oldest() noexcept {
    const uint32_t slot = m_oldest;
    const Entry& e = m_entries[slot];
    remove_from_index(locate(e.view(), hash_of(e.view())));
    return release(slot);
  }

  // Appends `id` as the newest request. Requires !full(), `id` not held and
  // 1 <= id.size() <= shm::kMaxRequestId (the transport validated it).
  void push(std::string_view id, int32_t worker, uint64_t key = 0) {
    push(id, Held{worker, key, 0, 0});
  }
  void push(std::string_view id, const Held& held) {
    const uint32_t slot = acquire();
    Entry& e = m_entries[slot];
    e.length = static_cast<uint8_t>(id.size());
    std::memcpy(e.id, id.data(), id.size());
    e.worker = held.worker;
    e.key = held.key;
    e.token = held.token;
    e.owner_pid = held.owner_pid;
    e.awaiting = held.awaiting_footprint;
    e.newer = kNone;
    e.older = m_newest;
    if (m_newest != kNone) m_entries[m_newest].newer = slot;
    m_newest = slot;
    if (m_oldest == kNone) m_oldest = slot;
    ++m_size;
    insert_into_index(hash_of(id), slot);
  }

  // Calls f(held) for every request, oldest first (the cluster snapshot).
  template <class F>
  void for_each(F&& f) const {
    for (uint32_t slot = m_oldest; slot != kNone; slot = m_entries[slot].newer)
      f(held_of(m_entries[slot]));
  }

 private:
  static_assert(shm::kMaxRequestId <= UINT8_MAX, "id lengths are kept in a byte");
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kNotFound = SIZE_MAX;
  static constexpr uint32_t kInitialEntries = 1024;

  struct Entry {
    uint32_t older = kNone;  // oldest-first list; in the free list, `newer` links
    uint32_t newer = kNone;
    int32_t worker = -1;
    uint32_t owner_pid = 0;
    uint64_t key = 0;
    uint64_t token = 0;
    uint8_t length = 0;
    bool awaiting = false;
    char id[shm::kMaxRequestId];
    std::string_view view() const noexcept { return {id, length}; }
  };

  // An index cell: the id hash's low 32 bits (home position and a filter
  // before comparing ids) above the entry's slot + 1; 0 is an empty cell.
  static uint64_t cell(uint32_t hash, uint32_t slot) noexcept {
    return (uint64_t{hash} << 32) | (uint64_t{slot} + 1);
  }
  static uint32_t hash_of_cell(uint64_t c) noexcept { return static_cast<uint32_t>(c >> 32); }
  static uint32_t slot_of(uint64_t c) noexcept { return static_cast<uint32_t>(c) - 1; }
  static uint32_t hash_of(std::string_view id) noexcept {
    return static_cast<uint32_t>(XXH3_64bits(id.data(), id.size()));
  }
  // At most half full: short probe runs.
  static size_t index_size_for(size_t entries) noexcept {
    return std::bit_ceil(std::max<size_t>(2 * entries, 16));
  }
  size_t mask() const noexcept { return m_index.size() - 1; }

  size_t locate(std::string_view id, uint32_t hash) const noexcept {
    for (size_t at = hash & mask();; at = (at + 1) & mask()) {
      const uint64_t c = m_index[at];
      if (c == 0) return kNotFound;
      if (hash_of_cell(c) == hash && m_entries[slot_of(c)].view() == id) return at;
    }
  }

  void insert_into_index(uint32_t hash, uint32_t slot) noexcept {
    size_t at = hash & mask();
    while (m_index[at] != 0) at = (at + 1) & mask();
    m_index[at] = cell(hash, slot);
  }

  // Backward-shift deletion: pull later cells of the probe run into the hole
  // unless that would move one before its home position.
  void remove_from_index(size_t hole) noexcept {
    for (size_t at = (hole + 1) & mask(); m_index[at] != 0; at = (at + 1) & mask()) {
      const size_t home = hash_of_cell(m_index[at]) & mask();
      if (((at - home) & mask()) >= ((at - hole) & mask())) {
        m_index[hole] = m_index[at];
        hole = at;
      }
    }
    m_index[hole] = 0;
  }

  uint32_t acquire() {
    if (m_free != kNone) {
      const uint32_t slot = m_free;
      m_free = m_entries[slot].newer;
      return slot;
    }
    if (m_entries.size() == m_entries.capacity()) {
      // Grow the pool (doubling, up to capacity) and the index with it.
      m_entries.reserve(std::min<size_t>(size_t{2} * m_entries.capacity(), m_capacity));
      if (index_size_for(m_entries.capacity()) > m_index.size()) rehash();
    }
    m_entries.emplace_back();
    return static_cast<uint32_t>(m_entries.size() - 1);
  }

  void rehash() {
    std::vector<uint64_t> old(index_size_for(m_entries.capacity()), 0);
    old.swap(m_index);
    for (uint64_t c : old)
      if (c != 0) insert_into_index(hash_of_cell(c), slot_of(c));
  }

  // Unlinks `slot` from the oldest-first list onto the free list.
  Held release(uint32_t slot) noexcept {
    Entry& e = m_entries[slot];
    (e.older != kNone ? m_entries[e.older].newer : m_oldest) = e.newer;
    (e.newer != kNone ? m_entries[e.newer].older : m_newest) = e.older;
    e.newer = m_free;
    e.older = kNone;
    m_free = slot;
    --m_size;
    return held_of(e);
  }
  static Held held_of(const Entry& e) noexcept {
    return {e.worker, e.key, e.token, e.owner_pid, e.awaiting};
  }

  uint32_t m_capacity;
  size_t m_size = 0;
  uint32_t m_oldest = kNone;
  uint32_t m_newest = kNone;
  uint32_t m_free = kNone;  // freed slots, linked through Entry::newer
  std::vector<Entry> m_entries;
  std::vector<uint64_t> m_index;
};

}  // namespace eldr::sidecar
