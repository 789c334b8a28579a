// Multi-node mode end to end (pool_e2e_fixture.hpp): bookings, loads and
// snapshots across nodes and servers, faults, the pool's table and refit,
// routing over NATS for gateways. pool_security_test.cpp holds the secured
// pool and what a gateway's credentials can and cannot do.
#include <signal.h>

#include <filesystem>
#include <future>
#include <optional>

#include "pool_e2e_fixture.hpp"

namespace eldr::sidecar::e2e {
namespace {

TEST_F(PoolTest, bookings_and_load_reports_reach_every_node_of_a_three_server_cluster) {
  start_servers(3);
  nodes.reserve(3);
  Node& a = start_node("a");
  Node& b = start_node("b");
  Node& c = start_node("c");
  for (const Node* n : {&a, &b, &c})
    ASSERT_TRUE(eventually([&] { return sees_peers(*n, 2); }, 15s))
        << n->name << ": " << pool_of(*n).dump();
  auto client = client_of(a);
  ASSERT_TRUE(client);
  std::vector<uint64_t> tokens;
  for (int i = 0; i < 10; ++i) {
    auto d = route(*client, "r" + std::to_string(i), i % 4);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_EQ(d->worker, 100 + i % 4);
    tokens.push_back(d->completion_token);
  }
  EXPECT_TRUE(eventually([&] { return inflight(a) == std::pair<uint64_t, uint64_t>{10, 10}; }));
  for (const Node* n : {&b, &c})
    EXPECT_TRUE(eventually([&] {
      return inflight(*n) == std::pair<uint64_t, uint64_t>{10, 0};
    })) << n->name
        << " counts " << inflight(*n).first;
  // An engine reports to b; a and c hear it.
  auto at_b = client_of(b);
  ASSERT_TRUE(at_b);
  ASSERT_TRUE(at_b->push_worker_report(103, 7, 0.25f).is_ok());
  for (const Node* n : {&a, &c})
    EXPECT_TRUE(eventually([&] { return running_of(*n, 103) == 7u; })) << n->name;
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(
        client->push_complete("r" + std::to_string(i), tokens[static_cast<size_t>(i)]).is_ok());
  // The report set 103 to 7 (it had r3 and r7): 3 + 3 + 2 + 7 = 15 in flight,
  // then r0..r4 completed on 100, 101, 102, 103 and 100: 10 are left.
  for (const Node* n : {&a, &b, &c})
    EXPECT_TRUE(eventually([&] { return inflight(*n).first == 10; }))
        << n->name << " counts " << inflight(*n).first;
  const auto status = pool_of(a);
  EXPECT_EQ(status["node"], "a");
  EXPECT_EQ(status["pool"], "p" + tag);
  EXPECT_EQ(status["table_source"], "local");
  EXPECT_TRUE(eventually([&] {
    const uint64_t n = metric(b, "eldr_pool_messages_received_total{kind=\"book\"}");
    return n >= 10 && n != UINT64_MAX;
  }));
  EXPECT_TRUE(eventually([&] { return metric(b, "eldr_pool_connected") == 1; }));
}

// A node on compact bookings and one still on full ones (a rolling upgrade):
// each counts the other's requests, nothing is refused.
TEST_F(PoolTest, compact_and_full_bookings_mix_in_one_pool) {
  start_servers(1);
  const std::string full_config = dir.file("full.toml");
  std::ofstream(full_config) << read_file(config_path) << "bookings = \"full\"\n";  // in [pool]
  nodes.reserve(2);
  Node& a = start_node("a");
  Node& b = start_node("b", full_config);
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  for (Node* n : {&a, &b}) {
    auto client = client_of(*n);
    ASSERT_TRUE(client);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(route(*client, n->name + std::to_string(i), i).is_ok());
  }
  for (const Node* n : {&a, &b})
    EXPECT_TRUE(eventually([&] {
      return inflight(*n) == std::pair<uint64_t, uint64_t>{8, 4};
    })) << n->name
        << " counts " << inflight(*n).first;
  for (const Node* n : {&a, &b}) {
    EXPECT_EQ(metric(*n, "eldr_pool_malformed_total{fault=\"shape\"}"), 0u) << n->name;
    EXPECT_EQ(metric(*n, "eldr_pool_bookings_refused_total"), 0u) << n->name;
  }
}

// Twins follow the nodes' rates: a node that takes all the traffic expects
// no unseen peer picks; one that routes nothing yet assumes a twin per peer.
TEST_F(PoolTest, twins_follow_how_much_each_node_routes) {
  start_servers(1);
  nodes.reserve(2);
  Node& a = start_node("a");
  Node& b = start_node("b");
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  const auto per_pick = [](const Node& n) {
    const auto c = pool_of(n);
    return c.is_object() && c["twins_per_pick"].is_number() ? c["twins_per_pick"].get<double>()
                                                            : -1.0;
  };
  EXPECT_EQ(per_pick(a), 1.0);  // nobody has routed yet
  auto client = client_of(a);
  ASSERT_TRUE(client);
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(route(*client, "t" + std::to_string(i), i % 4).is_ok());
    std::this_thread::sleep_for(25ms);
  }
  EXPECT_TRUE(eventually([&] { return per_pick(a) >= 0.0 && per_pick(a) < 0.1; }))
      << pool_of(a).dump();
  EXPECT_EQ(per_pick(b), 1.0) << pool_of(b).dump();
}

TEST_F(PoolTest, one_server_of_three_down_interrupts_nothing) {
  start_servers(3);
  nodes.reserve(2);
  Node& a = start_node("a");
  Node& b = start_node("b");
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  // A gateway given all three servers, as operators list them (blanks too).
  std::string urls;
  for (const auto& s : servers) urls += (urls.empty() ? "" : " , ") + s.url();
  eldr_pool_t* gw = nullptr;
  ASSERT_EQ(eldr_pool_open(urls.c_str(), ("p" + tag).c_str(), 2000, &gw), ELDR_OK)
      << eldr_last_error_message();
  const auto gateway_routes = [&](const std::string& id) {
    const std::vector<int16_t> counts = one_cell(1);
    eldr_decision_t d = ELDR_DECISION_INIT;
    const eldr_status_t s = eldr_pool_route(gw, id.c_str(), counts.data(), 2, 4, 2000, &d);
    return s == ELDR_OK && eldr_pool_complete(gw, id.c_str(), d.completion_token) == ELDR_OK;
  };
  EXPECT_TRUE(gateway_routes("gw-before")) << eldr_last_error_message();
  // Its complete returned once a had it: released everywhere before a server goes.
  ASSERT_TRUE(eventually([&] { return inflight(a).first == 0 && inflight(b).first == 0; }));
  // Take down the server a is on: its client moves to another by itself.
  const std::string on = pool_of(a).value("server", "");
  size_t down = 0;
  for (size_t i = 0; i < servers.size(); ++i)
    if (on.find(":" + servers[i].port) != std::string::npos) down = i;
  stop_server(servers[down]);
  auto client = client_of(a);
  ASSERT_TRUE(client);
  for (int i = 0; i < 8; ++i) {
    auto d = route(*client, "s" + std::to_string(i), 0);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  }
  EXPECT_TRUE(eventually([&] { return inflight(b).first == 8; }, 5s))
      << "b counts " << inflight(b).first << "; a: " << pool_of(a).dump()
      << "; b: " << pool_of(b).dump() << " lost " << metric(b, "eldr_pool_messages_lost_total")
      << " stale " << metric(b, "eldr_pool_messages_stale_total") << " unknown releases "
      << metric(b, "eldr_pool_unknown_releases_total") << " repaired "
      << metric(b, "eldr_pool_bookings_repaired_total") << " refused "
      << metric(b, "eldr_pool_bookings_refused_total");
  EXPECT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 5s));
  // The gateway too, on whichever server it is now.
  int tries = 0;
  EXPECT_TRUE(eventually([&] { return gateway_routes("gw-after-" + std::to_string(++tries)); }, 5s))
      << eldr_last_error_message();
  eldr_pool_free(gw);
}

// A complete forwarded to the node that holds the request waits for that
// node's answer and is sent again until it comes: here the holder's only
// server is down (the servers do not advertise each other), so the first
// copy reaches nobody; the server comes back, and a later copy releases it.
TEST_F(PoolTest, a_forwarded_complete_lost_with_a_server_is_sent_again_until_the_holder_answers) {
  server_args = {"--no_advertise"};
  start_servers(2);
  nodes.reserve(2);
  node_urls = servers[0].url();
  Node& a = start_node("a");  // holds the request
  node_urls = servers[1].url();
  Node& c = start_node("c");  // its engine completes it
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(c, 1); }, 15s));
  auto at_a = client_of(a);
  ASSERT_TRUE(at_a);
  auto d = route(*at_a, "held", 1);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  ASSERT_TRUE(eventually([&] { return inflight(a).first == 1 && inflight(c).first == 1; }));
  stop_server(servers[0]);
  ASSERT_TRUE(eventually([&] { return !connected(a); }, 10s));
  auto at_c = client_of(c);
  ASSERT_TRUE(at_c);
  ASSERT_TRUE(at_c->push_complete("held", d->completion_token).is_ok());
  ASSERT_TRUE(eventually([&] { return metric(c, "eldr_pool_completes_resent_total") >= 1; }));
  EXPECT_EQ(inflight(a).first, 1u);  // nothing reached it
  start_server(0);                   // same port
  ASSERT_TRUE(eventually([&] { return connected(a); }, 10s));
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 0 && inflight(c).first == 0; }, 10s))
      << "a: " << pool_of(a).dump() << "\nc: " << pool_of(c).dump();
  EXPECT_EQ(metric(c, "eldr_pool_completes_direct_total"), 1u);
  EXPECT_EQ(metric(c, "eldr_pool_completes_unanswered_total"), 0u);
  // Answered: nothing more goes out.
  const uint64_t resent = metric(c, "eldr_pool_completes_resent_total");
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(metric(c, "eldr_pool_completes_resent_total"), resent);
}

TEST_F(PoolTest, a_sigkilled_nodes_bookings_expire_everywhere_else) {
  start_servers(1);
  nodes.reserve(3);
  Node& a = start_node("a");
  Node& b = start_node("b");
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  {
    auto client = client_of(b);
    ASSERT_TRUE(client);
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(route(*client, "k" + std::to_string(i), 1).is_ok());
  }
  ASSERT_TRUE(eventually([&] { return inflight(a).first == 6; }));
  stop_node(b);
  // peer_timeout_ms = 1000: gone within ~1.1 s, well inside the budget.
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 0 && sees_peers(a, 0); }, 5s))
      << pool_of(a).dump();
  EXPECT_TRUE(eventually([&] { return metric(a, "eldr_pool_peers_expired_total") == 1; }));
}

TEST_F(PoolTest, routing_goes_on_while_nats_is_down_and_views_resync_after_it_returns) {
  start_servers(1);
  nodes.reserve(2);
  Node& a = start_node("a");
  Node& b = start_node("b");
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  auto client = client_of(a);
  ASSERT_TRUE(client);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(route(*client, "x" + std::to_string(i), 2).is_ok());
  ASSERT_TRUE(eventually([&] { return inflight(b).first == 4; }));
  stop_server(servers[0]);
  ASSERT_TRUE(eventually([&] { return !connected(a); }, 10s));
  // No broker: a routes on, with its own bookings and its last view.
  for (int i = 4; i < 12; ++i) {
    auto d = route(*client, "x" + std::to_string(i), 2);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_EQ(d->worker, 102);
  }
  EXPECT_TRUE(eventually([&] { return inflight(a).second == 12; }));
  start_server(0);  // same port
  const auto back = SteadyClock::now();
  ASSERT_TRUE(eventually([&] { return inflight(b).first == 12; }, 10s))
      << "b counts " << inflight(b).first << "; " << pool_of(b).dump();
  const auto resync_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - back).count();
  std::fprintf(stderr, "views re-synced %lld ms after the server came back\n",
               static_cast<long long>(resync_ms));
  // The metrics follow at the node's next maintenance tick (100 ms).
  EXPECT_TRUE(eventually([&] {
    const uint64_t n = metric(a, "eldr_pool_reconnects_total");
    return n >= 1 && n != UINT64_MAX;
  }));
}

TEST_F(PoolTest, malformed_messages_on_the_pool_subjects_are_counted_and_ignored) {
  start_servers(1);
  nodes.reserve(2);
  Node& a = start_node("a");
  Node& b = start_node("b");
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  const std::string prefix = "eldr.p" + tag + ".node.";
  std::vector<uint8_t> noise(300);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>(i * 37 + 11);
  publish_raw(servers[0].url(), prefix + "evil", noise);
  publish_raw(servers[0].url(), prefix + "evil", {});
  publish_raw(servers[0].url(), prefix + "evil", {'E', 'L', 'C', 'L', 0, 0, 0, 0, 1, 2, 3});
  ASSERT_TRUE(eventually([&] {
    return metric(a, "eldr_pool_malformed_total{fault=\"not_a_message\"}") == 3;
  })) << http_get(a.metrics_port, "/metrics");
  EXPECT_TRUE(eventually(
      [&] { return metric(b, "eldr_pool_malformed_total{fault=\"not_a_message\"}") == 3; }));
  // An answer to a forwarded complete that is not a token: counted, nothing else.
  publish_raw(servers[0].url(), "eldr.p" + tag + ".ack.a", {1, 2, 3});
  EXPECT_TRUE(eventually([&] { return metric(a, "eldr_pool_remote_malformed_total") == 1; }))
      << http_get(a.metrics_port, "/metrics");
  // Both still route and still hear each other.
  auto client = client_of(b);
  ASSERT_TRUE(client);
  ASSERT_TRUE(route(*client, "after", 3).is_ok());
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 1; }));
  EXPECT_TRUE(sees_peers(a, 1));
  EXPECT_TRUE(
      eventually([&] { return metric(a, "eldr_pool_peers") == 1; }));  // "evil" never became a peer
}

TEST_F(PoolTest, a_published_table_reaches_every_node_at_the_same_epoch) {
  if (std::string_view(ELDR_CLI_PATH).empty()) GTEST_SKIP() << "no eldr CLI in this build";
  start_servers(3, true);
  nodes.reserve(3);
  Node& a = start_node("a");
  Node& b = start_node("b");
  Node& c = start_node("c");
  for (const Node* n : {&a, &b, &c})
    ASSERT_TRUE(eventually([&] { return sees_peers(*n, 2); }, 15s)) << n->name;
  {
    auto client = client_of(c);
    ASSERT_TRUE(client);
    auto d = route(*client, "before", 0);
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(d->worker, 100);  // the local table
  }
  int rc = 0;
  const std::string out = table_cli({"publish", reversed_table()}, &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto published = SteadyClock::now();
  const size_t at = out.find("revision ");
  ASSERT_NE(at, std::string::npos) << out;
  uint64_t revision = std::stoull(out.substr(at + 9));
  for (const Node* n : {&a, &b, &c})
    EXPECT_TRUE(eventually([&] { return table_revision(*n) == revision; }, 10s))
        << n->name << ": " << pool_of(*n).dump();
  std::fprintf(stderr, "every node routes with revision %llu %lld ms after the first publish\n",
               static_cast<unsigned long long>(revision),
               static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          SteadyClock::now() - published)
                                          .count()));
  // Once the bucket is there (the first publish created it), a switch takes
  // the watchers' delivery only. Published twice: the reversed table again.
  ASSERT_EQ(table_cli({"publish", table_path}, &rc).find("published"), 0u);
  ASSERT_TRUE(eventually([&] { return table_revision(a) > revision; }, 10s));
  const std::string again = table_cli({"publish", reversed_table()}, &rc);
  ASSERT_EQ(rc, 0) << again;
  const auto republished = SteadyClock::now();
  revision = std::stoull(again.substr(again.find("revision ") + 9));
  for (const Node* n : {&a, &b, &c})
    EXPECT_TRUE(eventually([&] { return table_revision(*n) == revision; }, 10s)) << n->name;
  const auto switch_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - republished)
          .count();
  std::fprintf(stderr, "every node routes with revision %llu %lld ms after the publish\n",
               static_cast<unsigned long long>(revision), static_cast<long long>(switch_ms));
  for (const Node* n : {&a, &b, &c}) {
    auto client = client_of(*n);
    ASSERT_TRUE(client);
    auto d = route(*client, "after-" + n->name, 0);
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(d->worker, 103) << n->name;
    EXPECT_EQ(d->table_epoch, (uint64_t{1} << 40) + revision) << n->name;
  }
  // A write against a revision that is no longer the pool's is refused.
  const std::string stale =
      table_cli({"publish", "--expect-revision", std::to_string(revision - 1), table_path}, &rc);
  EXPECT_NE(rc, 0) << stale;
  EXPECT_NE(stale.find("another table was published"), std::string::npos) << stale;
  // A table of another geometry is refused before anything is written.
  ClusterTable other = eldr::testing::axis_table();
  other.geometry = {3, 4, 1};
  other.layer_mask = {0, 1, 2};
  other.idf.assign(12, 1.0f);
  other.centroids.assign(4 * 12, 0.0f);
  for (uint32_t w = 0; w < 4; ++w) other.centroids[w * 12 + w] = 1.0f;
  const std::string other_path = dir.file("other.eldr");
  ASSERT_TRUE(save_table(other, other_path).is_ok());
  const std::string shape = table_cli({"publish", other_path}, &rc);
  EXPECT_NE(rc, 0) << shape;
  EXPECT_NE(shape.find("its nodes would refuse it"), std::string::npos) << shape;
  const std::string show = table_cli({"show"}, &rc);
  EXPECT_EQ(rc, 0) << show;
  EXPECT_NE(show.find("revision " + std::to_string(revision)), std::string::npos) << show;
  // A local reload would split the pool: refused while it has a table.
  EXPECT_EQ(kill(a.pid, SIGHUP), 0);
  EXPECT_TRUE(
      eventually([&] { return read_file(a.log).find("reload refused") != std::string::npos; }));
}

TEST_F(PoolTest, the_table_watcher_follows_the_bucket_across_a_server_restart) {
  if (std::string_view(ELDR_CLI_PATH).empty()) GTEST_SKIP() << "no eldr CLI in this build";
  start_servers(1, true);
  nodes.reserve(1);
  Node& a = start_node("a");
  ASSERT_TRUE(eventually([&] { return connected(a); }, 15s));
  int rc = 0;
  std::string out = table_cli({"publish", reversed_table()}, &rc);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(eventually([&] { return table_revision(a) != 0; }, 10s)) << pool_of(a).dump();
  const uint64_t first = table_revision(a);
  stop_server(servers[0]);
  ASSERT_TRUE(eventually([&] { return !connected(a); }, 10s));
  start_server(0);  // same port, same store
  ASSERT_TRUE(eventually([&] { return connected(a); }, 10s));
  out = table_cli({"publish", table_path}, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(eventually([&] { return table_revision(a) > first; }, 10s)) << pool_of(a).dump();
  auto client = client_of(a);
  ASSERT_TRUE(client);
  auto d = route(*client, "back", 0);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->worker, 100);  // the axis table again
}

TEST_F(PoolTest, one_node_refits_for_the_pool_and_another_takes_over_when_it_dies) {
  start_servers(1, true);
  const std::string refit_config = dir.file("refit.toml");
  std::ofstream(refit_config) << read_file(config_path)
                              << "[refit]\nenabled = true\nperiod_s = 1\nwindow = 64\n"
                                 "min_samples = 16\n";
  nodes.reserve(2);
  const auto lease = [](const Node& n) {
    const auto c = pool_of(n);
    return c.is_object() && c.contains("refit_lease") ? c["refit_lease"] : nlohmann::json::object();
  };
  Node& a = start_node("a", refit_config);
  ASSERT_TRUE(eventually([&] { return lease(a).value("held_here", false); }, 15s))
      << pool_of(a).dump();
  Node& b = start_node("b", refit_config);
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  EXPECT_TRUE(eventually([&] { return lease(b).value("holder", std::string()) == "a"; }))
      << pool_of(b).dump();
  EXPECT_FALSE(lease(b).value("held_here", true));
  // Traffic at b only: a refits on b's bookings and publishes for both.
  {
    auto client = client_of(b);
    ASSERT_TRUE(client);
    for (int i = 0; i < 40; ++i)
      ASSERT_TRUE(route(*client, "f" + std::to_string(i), i % 4).is_ok());
  }
  for (const Node* n : {&a, &b})
    EXPECT_TRUE(eventually([&] { return table_revision(*n) != 0; }, 15s))
        << n->name << ": " << pool_of(*n).dump();
  EXPECT_NE(read_file(a.log).find("refit published"), std::string::npos);
  EXPECT_EQ(read_file(b.log).find("refit published"), std::string::npos);
  // The holder dies: b takes the lease once a's stops being renewed (5 s).
  stop_node(a);
  EXPECT_TRUE(eventually([&] { return lease(b).value("held_here", false); }, 15s))
      << pool_of(b).dump();
}

TEST_F(PoolTest, a_gateway_without_a_sidecar_routes_through_any_node_over_nats) {
  start_servers(1);
  nodes.reserve(2);
  Node& a = start_node("a");
  Node& b = start_node("b");
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  eldr_pool_t* pool = open_gateway();
  ASSERT_NE(pool, nullptr);
  std::vector<uint64_t> tokens;
  for (int i = 0; i < 6; ++i) {
    const std::vector<int16_t> counts = one_cell(i % 4);
    eldr_decision_t d = ELDR_DECISION_INIT;
    ASSERT_EQ(
        eldr_pool_route(pool, ("g" + std::to_string(i)).c_str(), counts.data(), 2, 4, 2000, &d),
        ELDR_OK)
        << eldr_last_error_message();
    EXPECT_EQ(d.worker, 100 + i % 4);
    EXPECT_NE(d.completion_token, 0u);
    tokens.push_back(d.completion_token);
  }
  // Whichever node answered, both count them.
  for (const Node* n : {&a, &b})
    EXPECT_TRUE(eventually([&] { return inflight(*n).first == 6; })) << n->name;
  EXPECT_EQ(inflight(a).second + inflight(b).second, 6u);
  // Each node keeps its gateway routes (key, gateway) while they are in flight.
  const auto held = [&](const Node& n) {
    return pool_of(n).value("gateway_routes", nlohmann::json::object()).value("held", 99);
  };
  EXPECT_EQ(held(a) + held(b), 6);
  // The pool's answer to a footprint it cannot route is its error.
  std::vector<int16_t> wrong(12, 1);
  eldr_decision_t d = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_pool_route(pool, "wrong", wrong.data(), 3, 4, 2000, &d), ELDR_E_SHAPE_MISMATCH);
  EXPECT_NE(std::string(eldr_last_error_message()).find("rejected"), std::string::npos);
  EXPECT_EQ(d.worker, -1);  // untouched
  // Completes go to the node that routed each request.
  EXPECT_EQ(eldr_pool_complete(pool, "g0", 0), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_pool_complete(pool, "never", 1), ELDR_E_NOT_FOUND);
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(
        eldr_pool_complete(pool, ("g" + std::to_string(i)).c_str(), tokens[static_cast<size_t>(i)]),
        ELDR_OK);
  for (const Node* n : {&a, &b}) {
    EXPECT_TRUE(eventually([&] { return inflight(*n).first == 0; })) << n->name;
    EXPECT_TRUE(eventually([&] { return held(*n) == 0; })) << pool_of(*n).dump();
  }
  eldr_pool_free(pool);
  // Garbage on the route subject gets an error answer, never a crash.
  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, servers[0].url().c_str()), NATS_OK);
  natsMsg* reply = nullptr;
  const char junk[] = "not a footprint";
  ASSERT_EQ(natsConnection_Request(&reply, nc, ("eldr.p" + tag + ".route").c_str(), junk,
                                   sizeof junk, 2000),
            NATS_OK);
  natsMsg_Destroy(reply);
  // And on the pool-wide complete subject, which every node hears: each counts it.
  ASSERT_EQ(natsConnection_Publish(nc, ("eldr.p" + tag + ".complete").c_str(), junk, sizeof junk),
            NATS_OK);
  ASSERT_EQ(natsConnection_FlushTimeout(nc, 2000), NATS_OK);
  natsConnection_Destroy(nc);
  (void)nats_CloseAndWait(2000);
  EXPECT_TRUE(eventually([&] {
    return metric(a, "eldr_pool_remote_malformed_total") +
               metric(b, "eldr_pool_remote_malformed_total") ==
           3;
  }));
}

// A gateway whose route gets no answer (the node stalled past the timeout;
// in a pool, the answer lost with the gateway's server) cancels it with the
// route's key: the node that routed it releases it, or refuses it when the
// cancel gets there first. Only the key the route carried cancels it.
TEST_F(PoolTest, a_gateway_route_that_gets_no_answer_is_cancelled_where_it_was_routed) {
  Node& a = start_lone_node();
  ASSERT_TRUE(connected(a));
  eldr_pool_t* pool = open_gateway();
  ASSERT_NE(pool, nullptr);
  const std::vector<int16_t> counts = one_cell(1);
  // The node stalls: the route and then its cancel wait in its socket.
  ASSERT_EQ(kill(a.pid, SIGSTOP), 0);
  eldr_decision_t d = ELDR_DECISION_INIT;
  const eldr_status_t late = eldr_pool_route(pool, "late", counts.data(), 2, 4, 300, &d);
  ASSERT_EQ(kill(a.pid, SIGCONT), 0);
  EXPECT_EQ(late, ELDR_E_TIMEOUT) << eldr_last_error_message();
  EXPECT_EQ(d.worker, -1);
  EXPECT_TRUE(eventually([&] {
    return metric(a, "eldr_pool_routes_cancelled_total") +
               metric(a, "eldr_pool_routes_refused_cancelled_total") ==
           1;
  })) << read_file(a.log);
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 0; })) << pool_of(a).dump();
  eldr_pool_free(pool);

  // The same by hand, with keys of our choosing.
  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, servers[0].url().c_str()), NATS_OK);
  const std::string subject = "eldr.p" + tag;
  const auto route = [&](const std::string& id, const std::string& key,
                         const std::string& gateway = "") {
    shm::FootprintOut f;
    f.request_id = id;
    f.layers = 2;
    f.experts = 4;
    f.counts = counts;
    std::vector<uint8_t> bytes;
    EXPECT_TRUE(shm::detail::encode_footprint(f, bytes).is_ok());
    natsMsg* msg = nullptr;
    EXPECT_EQ(
        natsMsg_Create(&msg, (subject + ".route").c_str(), nullptr,
                       reinterpret_cast<const char*>(bytes.data()), static_cast<int>(bytes.size())),
        NATS_OK);
    if (!key.empty()) {
      EXPECT_EQ(natsMsgHeader_Set(msg, eldr::pool::kRouteKeyHeader, key.c_str()), NATS_OK);
    }
    if (!gateway.empty()) {
      EXPECT_EQ(natsMsgHeader_Set(msg, eldr::pool::kGatewayHeader, gateway.c_str()), NATS_OK);
    }
    natsMsg* reply = nullptr;
    EXPECT_EQ(natsConnection_RequestMsg(&reply, nc, msg, 2000), NATS_OK);
    natsMsg_Destroy(msg);
    pool::RouteReply r;
    if (reply != nullptr) {
      auto got =
          eldr::pool::decode_route_reply({reinterpret_cast<const uint8_t*>(natsMsg_GetData(reply)),
                                          static_cast<size_t>(natsMsg_GetDataLength(reply))});
      if (got) r = *got;
      natsMsg_Destroy(reply);
    }
    return r;
  };
  // Publishes a cancel, then garbage on the same subject: once the garbage
  // is counted, the node has taken the cancel.
  uint64_t malformed = metric(a, "eldr_pool_remote_malformed_total");
  const auto cancel = [&](const std::string& id, uint64_t key) {
    const auto bytes = eldr::pool::encode_route_cancel(id, key);
    const char junk[] = "not a cancel";
    EXPECT_EQ(natsConnection_Publish(nc, (subject + ".cancel").c_str(), bytes.data(),
                                     static_cast<int>(bytes.size())),
              NATS_OK);
    EXPECT_EQ(natsConnection_Publish(nc, (subject + ".cancel").c_str(), junk, sizeof junk),
              NATS_OK);
    EXPECT_EQ(natsConnection_FlushTimeout(nc, 2000), NATS_OK);
    ++malformed;
    EXPECT_TRUE(
        eventually([&] { return metric(a, "eldr_pool_remote_malformed_total") == malformed; }));
  };
  // Routed with a key: a cancel with another key or another id leaves it.
  const pool::RouteReply kept = route("kept", eldr::pool::format_key(0x1234));
  ASSERT_EQ(kept.status, 0) << kept.message;
  ASSERT_TRUE(eventually([&] { return inflight(a).first == 1; })) << pool_of(a).dump();
  cancel("kept", 0x1235);
  cancel("other", 0x1234);
  std::this_thread::sleep_for(300ms);  // three status refreshes: a wrong release would show
  EXPECT_EQ(inflight(a).first, 1u);
  cancel("kept", 0x1234);
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 0; })) << pool_of(a).dump();
  // Cancelled before it came: refused, nothing booked.
  cancel("early", 0x77);
  const pool::RouteReply early = route("early", eldr::pool::format_key(0x77));
  EXPECT_EQ(early.status, static_cast<int32_t>(Errc::state));
  EXPECT_NE(early.message.find("cancelled"), std::string::npos) << early.message;
  // A key or a gateway id that is none: refused as malformed, nothing
  // booked. No key at all: routed, not cancellable.
  EXPECT_EQ(route("bad-key", "xyz").status, static_cast<int32_t>(Errc::invalid_argument));
  ++malformed;
  const pool::RouteReply bad_gateway = route("bad-gateway", eldr::pool::format_key(0x78), "0");
  EXPECT_EQ(bad_gateway.status, static_cast<int32_t>(Errc::invalid_argument));
  EXPECT_NE(bad_gateway.message.find(eldr::pool::kGatewayHeader), std::string::npos)
      << bad_gateway.message;
  ++malformed;
  EXPECT_EQ(route("no-key", "").status, 0);
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 1; })) << pool_of(a).dump();
  // A beat that is no GatewayBeat: counted, nothing else.
  const char junk[] = "not a beat";
  ASSERT_EQ(natsConnection_Publish(nc, (subject + ".gateway").c_str(), junk, sizeof junk), NATS_OK);
  ASSERT_EQ(natsConnection_FlushTimeout(nc, 2000), NATS_OK);
  ++malformed;
  EXPECT_TRUE(
      eventually([&] { return metric(a, "eldr_pool_remote_malformed_total") == malformed; }));
  EXPECT_EQ(inflight(a).first, 1u);
  natsConnection_Destroy(nc);
  (void)nats_CloseAndWait(2000);
}

// A gateway routing over NATS beats every second. One that dies (SIGKILL)
// leaves requests nobody can complete: the node that routed them releases
// them once it has not heard the gateway for gateway_timeout_ms.
TEST_F(PoolTest, the_requests_of_a_gateway_that_dies_are_released_where_they_were_routed) {
  if (std::string_view(ELDR_CLI_PATH).empty()) GTEST_SKIP() << "the eldr CLI is not built";
  Node& a = start_gateway_timeout_node();
  // A gateway process that routes 10 requests a second and holds them all.
  const std::string gateway_log = dir.file("gateway.log");
  const pid_t gateway =
      spawn({ELDR_CLI_PATH, "loadgen", "--nats", servers[0].url(), "--pool", "p" + tag, "--model",
             "2x4x1", "--requests", "1000", "--rate", "10", "--complete", "--hold", "1000"},
            gateway_log);
  ASSERT_GT(gateway, 0);
  EXPECT_TRUE(eventually([&] { return inflight(a).first >= 5; }, 15s)) << read_file(gateway_log);
  ASSERT_EQ(kill(gateway, SIGKILL), 0);
  (void)wait_exit(gateway, 5s);
  const uint64_t held = inflight(a).first;
  EXPECT_GE(held, 5u);
  // Released after the timeout (2 s from the last beat or route), not before.
  const auto killed = SteadyClock::now();
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 0; }, 15s)) << pool_of(a).dump();
  EXPECT_GE(SteadyClock::now() - killed, 900ms);
  EXPECT_GE(metric(a, "eldr_pool_routes_orphaned_total"), held);
  EXPECT_NE(read_file(a.log).find("went silent: released the"), std::string::npos);
}

// A live gateway keeps its requests however long they run; one freed with
// requests open has them released at once.
TEST_F(PoolTest, a_live_gateways_requests_stay_and_a_freed_ones_go_at_once) {
  Node& a = start_gateway_timeout_node();
  eldr_pool_t* pool = open_gateway();
  ASSERT_NE(pool, nullptr);
  const std::vector<int16_t> counts = one_cell(2);
  for (const char* id : {"live-1", "live-2"}) {
    eldr_decision_t d = ELDR_DECISION_INIT;
    ASSERT_EQ(eldr_pool_route(pool, id, counts.data(), 2, 4, 2000, &d), ELDR_OK)
        << eldr_last_error_message();
  }
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 2; })) << pool_of(a).dump();
  std::this_thread::sleep_for(3500ms);  // the timeout and more
  EXPECT_EQ(inflight(a).first, 2u);
  const uint64_t orphaned = metric(a, "eldr_pool_routes_orphaned_total");
  eldr_pool_free(pool);
  const auto freed = SteadyClock::now();
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 0; })) << pool_of(a).dump();
  EXPECT_LT(SteadyClock::now() - freed, 1500ms);
  EXPECT_EQ(metric(a, "eldr_pool_routes_orphaned_total"), orphaned + 2);
  EXPECT_NE(read_file(a.log).find(" left: released the 2 requests"), std::string::npos)
      << read_file(a.log);
}

// A gateway's complete returns once the node that routed the request has
// it (it answers with the token; a server on the way could have died with
// it). A node from before such answers gets it as before: once a server has it.
TEST_F(PoolTest, a_gateways_complete_waits_for_the_node_and_a_node_from_before_gets_it_as_before) {
  Node& a = start_lone_node();
  ASSERT_TRUE(connected(a));
  eldr_pool_t* pool = open_gateway();
  ASSERT_NE(pool, nullptr);
  const std::vector<int16_t> counts = one_cell(3);
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_pool_route(pool, "c1", counts.data(), 2, 4, 2000, &d), ELDR_OK)
      << eldr_last_error_message();
  ASSERT_EQ(kill(a.pid, SIGSTOP), 0);
  auto done = std::async(std::launch::async,
                         [&] { return eldr_pool_complete(pool, "c1", d.completion_token); });
  EXPECT_EQ(done.wait_for(800ms), std::future_status::timeout);  // a has not taken it
  ASSERT_EQ(kill(a.pid, SIGCONT), 0);
  EXPECT_EQ(done.get(), ELDR_OK) << eldr_last_error_message();
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 0; })) << pool_of(a).dump();
  // A node that is gone: nobody listens for a second, NO_DAEMON; the next
  // complete to it is tried once.
  eldr_decision_t d2 = ELDR_DECISION_INIT, d3 = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_pool_route(pool, "c2", counts.data(), 2, 4, 2000, &d2), ELDR_OK);
  ASSERT_EQ(eldr_pool_route(pool, "c3", counts.data(), 2, 4, 2000, &d3), ELDR_OK);
  stop_node(a);
  auto sent = SteadyClock::now();
  EXPECT_EQ(eldr_pool_complete(pool, "c2", d2.completion_token), ELDR_E_NO_DAEMON);
  EXPECT_GE(SteadyClock::now() - sent, 900ms);
  sent = SteadyClock::now();
  EXPECT_EQ(eldr_pool_complete(pool, "c3", d3.completion_token), ELDR_E_NO_DAEMON);
  EXPECT_LT(SteadyClock::now() - sent, 500ms);
  eldr_pool_free(pool);

  // A node from before answers routes without acks_completes.
  natsConnection* old = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&old, servers[0].url().c_str()), NATS_OK);
  const std::string legacy = "legacy" + tag;
  natsSubscription* routes = nullptr;
  ASSERT_EQ(natsConnection_QueueSubscribe(
                &routes, old, ("eldr." + legacy + ".route").c_str(), "eldr",
                [](natsConnection* nc, natsSubscription*, natsMsg* msg, void*) {
                  pool::RouteReply r;
                  r.request_id = "old-1";
                  r.worker = 101;
                  r.completion_token = 42;
                  r.node = "old-node";
                  const auto bytes = pool::encode_route_reply(r);
                  (void)natsConnection_Publish(nc, natsMsg_GetReply(msg), bytes.data(),
                                               static_cast<int>(bytes.size()));
                  natsMsg_Destroy(msg);
                },
                nullptr),
            NATS_OK);
  natsSubscription* completes = nullptr;
  ASSERT_EQ(natsConnection_SubscribeSync(&completes, old,
                                         ("eldr." + legacy + ".complete.old-node").c_str()),
            NATS_OK);
  ASSERT_EQ(natsConnection_FlushTimeout(old, 2000), NATS_OK);
  ASSERT_EQ(eldr_pool_open(servers[0].url().c_str(), legacy.c_str(), 2000, &pool), ELDR_OK);
  ASSERT_EQ(eldr_pool_route(pool, "old-1", counts.data(), 2, 4, 2000, &d), ELDR_OK)
      << eldr_last_error_message();
  EXPECT_EQ(d.worker, 101);
  sent = SteadyClock::now();
  EXPECT_EQ(eldr_pool_complete(pool, "old-1", 42), ELDR_OK) << eldr_last_error_message();
  EXPECT_LT(SteadyClock::now() - sent, 500ms);  // not waiting for an answer
  natsMsg* got = nullptr;
  ASSERT_EQ(natsSubscription_NextMsg(&got, completes, 2000), NATS_OK);
  const auto c =
      pool::decode_route_complete({reinterpret_cast<const uint8_t*>(natsMsg_GetData(got)),
                                   static_cast<size_t>(natsMsg_GetDataLength(got))});
  natsMsg_Destroy(got);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->completion_token, 42u);
  eldr_pool_free(pool);
  natsSubscription_Destroy(routes);
  natsSubscription_Destroy(completes);
  natsConnection_Destroy(old);
  (void)nats_CloseAndWait(2000);
}

// Routing from the prompt over NATS: any node routes it with the table's
// predictor, and the booking carries the predicted footprint, so every node
// counts the request.
TEST_F(PoolTest, a_gateway_routes_prompts_through_any_node_over_nats) {
  ASSERT_TRUE(save_table(eldr::testing::axis_table_with_predictor(), table_path).is_ok());
  start_servers(1);
  nodes.reserve(2);
  Node& a = start_node("a");
  Node& b = start_node("b");
  ASSERT_TRUE(eventually([&] { return sees_peers(a, 1) && sees_peers(b, 1); }, 15s));
  eldr_pool_t* pool = open_gateway();
  ASSERT_NE(pool, nullptr);
  std::vector<uint64_t> tokens;
  for (uint32_t i = 0; i < 4; ++i) {
    eldr_decision_t d = ELDR_DECISION_INIT;
    const std::string id = "pt" + std::to_string(i);
    if (i % 2 == 0) {
      const auto prompt = eldr::testing::domain_prompt_tokens(i, 8);
      ASSERT_EQ(eldr_pool_route_tokens(pool, id.c_str(), prompt.data(), prompt.size(), 2000, &d),
                ELDR_OK)
          << eldr_last_error_message();
    } else {
      const auto prompt = eldr::testing::domain_prompt_text(i, 8);
      ASSERT_EQ(eldr_pool_route_text(pool, id.c_str(), prompt.data(), prompt.size(), 2000, &d),
                ELDR_OK)
          << eldr_last_error_message();
    }
    EXPECT_EQ(d.worker, static_cast<int32_t>(100 + i));
    EXPECT_GT(d.confidence, 0.0f);
    EXPECT_LE(d.confidence, 1.0f);
    tokens.push_back(d.completion_token);
  }
  for (const Node* n : {&a, &b})
    EXPECT_TRUE(eventually([&] { return inflight(*n).first == 4; })) << n->name;
  EXPECT_EQ(inflight(a).second + inflight(b).second, 4u);
  // A bad prompt: the node's verdict; one past the limits never leaves the gateway.
  eldr_decision_t d = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_pool_route_text(pool, "bad", "\xff\xfe", 2, 2000, &d), ELDR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eldr_last_error_message()).find("rejected"), std::string::npos);
  const std::vector<uint32_t> too_long(ELDR_MAX_PROMPT_TOKENS + 1, 3);
  EXPECT_EQ(eldr_pool_route_tokens(pool, "long", too_long.data(), too_long.size(), 2000, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(d.worker, -1);
  for (uint32_t i = 0; i < 4; ++i)
    ASSERT_EQ(eldr_pool_complete(pool, ("pt" + std::to_string(i)).c_str(), tokens[i]), ELDR_OK);
  for (const Node* n : {&a, &b})
    EXPECT_TRUE(eventually([&] { return inflight(*n).first == 0; })) << n->name;
  EXPECT_EQ(metric(a, "eldr_prompt_routed_total") + metric(b, "eldr_prompt_routed_total"), 4u);
  eldr_pool_free(pool);
}

}  // namespace
}  // namespace eldr::sidecar::e2e
