// The online refit driven directly against a router: the sample window, the
// conditions for a refit, and the aligned table it swaps in.
#include "refit.hpp"

#include <gtest/gtest.h>

#include "test_tables.hpp"

namespace eldr::sidecar {
namespace {

using eldr::testing::axis_table;

class RefitTest : public ::testing::Test {
 protected:
  RefitTest() {
    RouterOptions o;
    o.policy = Policy::eldr;  // locality: the picks show the alignment
    o.tau = 0.0f;             // band of one: the top worker, deterministic
    auto r = Router::create(std::make_shared<const ClusterTable>(axis_table()), o);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    router = std::move(*r);
  }
  std::unique_ptr<OnlineRefit> make(uint32_t window, uint32_t min_samples) {
    RefitConfig c;
    c.enabled = true;
    c.window = window;
    c.min_samples = min_samples;
    auto refit = OnlineRefit::create(c, 8, 7, *router, metrics);
    EXPECT_TRUE(refit.is_ok()) << refit.status().to_string();
    return refit ? std::move(*refit) : nullptr;
  }
  // Footprint i of a workload whose expert (i % 4) dominates layer 0.
  static std::vector<int16_t> sample(int i) {
    std::vector<int16_t> c(8, 0);
    c[static_cast<size_t>(i % 4)] = static_cast<int16_t>(5 + i % 3);
    c[4 + static_cast<size_t>(i % 4)] = 1;
    return c;
  }
  bool rendered(const std::string& line) const {
    return metrics.render().find(line) != std::string::npos;
  }

  std::unique_ptr<Router> router;
  Metrics metrics{64};
};

TEST_F(RefitTest, a_zero_window_is_rejected) {
  RefitConfig c;
  c.enabled = true;
  c.window = 0;
  EXPECT_EQ(OnlineRefit::create(c, 8, 0, *router, metrics).status().code(), Errc::invalid_argument);
}

TEST_F(RefitTest, needs_min_samples_and_one_footprint_per_cluster) {
  auto sut = make(64, 1);
  ASSERT_NE(sut, nullptr);
  EXPECT_EQ(sut->run().code(), Errc::state);  // nothing seen
  for (int i = 0; i < 2; ++i) sut->keep(sample(i));
  const Status few = sut->run();
  EXPECT_EQ(few.code(), Errc::state);
  EXPECT_NE(few.message().find("refit needs 4 footprints, has 2"), std::string::npos)
      << few.to_string();

  auto strict = make(64, 32);
  for (int i = 0; i < 31; ++i) strict->keep(sample(i));
  EXPECT_EQ(strict->run().code(), Errc::state);
  EXPECT_EQ(router->table()->fit.source, "test");
  EXPECT_TRUE(rendered("eldr_refits_total 0")) << metrics.render();
}

TEST_F(RefitTest, swaps_in_an_aligned_table_once_per_new_window) {
  auto sut = make(16, 8);
  ASSERT_NE(sut, nullptr);
  for (int i = 0; i < 40; ++i) sut->keep(sample(i));  // wraps: the last 16 stay
  EXPECT_EQ(sut->samples_seen(), 40u);
  const uint64_t epoch = router->table_epoch();
  ASSERT_TRUE(sut->run().is_ok());
  EXPECT_EQ(router->table_epoch(), epoch + 1);
  EXPECT_EQ(router->table()->fit.source, "eldrd refit");
  EXPECT_EQ(router->table()->fit.n_requests, 16u);
  EXPECT_TRUE(rendered("eldr_refits_total 1")) << metrics.render();
  EXPECT_TRUE(rendered("eldr_table_epoch " + std::to_string(epoch + 1))) << metrics.render();
  EXPECT_EQ(sut->run().code(), Errc::state);  // nothing new to learn from
  EXPECT_EQ(router->table_epoch(), epoch + 1);
  // Aligned to the old table: each expert's traffic stays on its worker.
  for (int cell = 0; cell < 4; ++cell) {
    std::vector<int16_t> c(8, 0);
    c[static_cast<size_t>(cell)] = 5;
    auto d = router->route(c);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_EQ(d->worker_id, 100 + cell);
  }
  sut->keep(sample(0));
  EXPECT_TRUE(sut->run().is_ok());
  EXPECT_EQ(router->table_epoch(), epoch + 2);
}

// A refit keeps the table's footprint predictor: routing from the prompt
// and what was learned online go on across it.
TEST(Refit, the_refitted_table_keeps_the_predictor) {
  auto table = std::make_shared<const ClusterTable>(eldr::testing::axis_table_with_predictor());
  ASSERT_TRUE(table->predictor);
  auto router = Router::create(table);
  ASSERT_TRUE(router.is_ok());
  Metrics metrics{64};
  RefitConfig c;
  c.enabled = true;
  c.window = 16;
  c.min_samples = 8;
  auto sut = OnlineRefit::create(c, 8, 7, **router, metrics);
  ASSERT_TRUE(sut.is_ok());
  for (int i = 0; i < 16; ++i) {
    std::vector<int16_t> f(8, 0);
    f[static_cast<size_t>(i % 4)] = 6;
    (*sut)->keep(f);
  }
  ASSERT_TRUE((*sut)->run().is_ok());
  EXPECT_EQ((*router)->table()->predictor, table->predictor);
  const auto prompt = eldr::testing::domain_prompt_tokens(2, 1);
  auto d = (*router)->route_prompt(Prompt::of_tokens(prompt));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
}

}  // namespace
}  // namespace eldr::sidecar
