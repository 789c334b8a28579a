// RecentMap: the newest `capacity` entries stay, whatever mix of puts,
// replacements and takes came before.
#include "eldr/pool/recent_map.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

namespace eldr::pool {
namespace {

TEST(RecentMap, forgets_the_oldest_past_capacity) {
  RecentMap<std::string, int> m(2);
  m.put("a", 1);
  m.put("b", 2);
  m.put("c", 3);
  EXPECT_EQ(m.find("a"), nullptr);
  ASSERT_NE(m.find("b"), nullptr);
  EXPECT_EQ(*m.find("b"), 2);
  EXPECT_EQ(m.size(), 2u);
}

TEST(RecentMap, a_replaced_entry_is_the_newest_and_a_taken_one_is_gone) {
  RecentMap<std::string, int> m(2);
  m.put("a", 1);
  m.put("b", 2);
  m.put("a", 10);  // now the newest: b goes first
  m.put("c", 3);
  EXPECT_EQ(m.find("b"), nullptr);
  EXPECT_EQ(*m.find("a"), 10);
  EXPECT_EQ(m.take("a"), 10);
  EXPECT_EQ(m.take("a"), std::nullopt);
  m.put("d", 4);  // room for it without forgetting c
  EXPECT_EQ(*m.find("c"), 3);
  EXPECT_EQ(*m.find("d"), 4);
}

// Against a model that keeps the newest capacity keys by their last put.
TEST(RecentMap, matches_a_model_through_random_puts_and_takes) {
  constexpr size_t kCapacity = 8;
  RecentMap<int, int> m(kCapacity);
  std::map<int, std::pair<uint64_t, int>> model;  // key -> (last put, value)
  std::mt19937 rng(7);
  for (uint64_t step = 1; step <= 20000; ++step) {
    const int key = static_cast<int>(rng() % 24);
    if (rng() % 3 == 0) {
      const auto got = m.take(key);
      const auto it = model.find(key);
      ASSERT_EQ(got.has_value(), it != model.end()) << step;
      if (it != model.end()) {
        EXPECT_EQ(*got, it->second.second);
        model.erase(it);
      }
    } else {
      m.put(key, static_cast<int>(step));
      model[key] = {step, static_cast<int>(step)};
      if (model.size() > kCapacity) {
        auto oldest = model.begin();
        for (auto it = model.begin(); it != model.end(); ++it)
          if (it->second.first < oldest->second.first) oldest = it;
        model.erase(oldest);
      }
    }
    ASSERT_EQ(m.size(), model.size()) << step;
    for (const auto& [k, v] : model) {
      ASSERT_NE(m.find(k), nullptr) << step << " key " << k;
      EXPECT_EQ(*m.find(k), v.second);
    }
  }
}

}  // namespace
}  // namespace eldr::pool
