// eldr table publish | show: the pool's one cluster table in NATS (JetStream
// key-value, pool/include/eldr/pool/pool_table.hpp). publish verifies the file, checks that
// its geometry is the pool's, and writes it with compare-and-set; every
// eldrd of the pool switches to it at the same epoch.
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/pool/nats_auth_cli.hpp"
#include "eldr/pool/nats_link.hpp"
#include "eldr/pool/peer_wire.hpp"
#include "eldr/pool/pool_table.hpp"

namespace eldr::cli {

namespace {

using pool::KeyValue;
using pool::NatsLink;

struct TableArgs {
  std::string nats, pool = "default", file;
  pool::NatsAuth auth;
  int64_t expect_revision = -1;  // -1: the revision read just before
  uint32_t replicas = 0;
  uint32_t timeout_ms = 10000;
};

Result<std::pair<std::unique_ptr<NatsLink>, std::unique_ptr<KeyValue>>> open_bucket(
    const TableArgs& a) {
  if (!pool::nats_supported())
    return Status{Errc::unsupported,
                  "this eldr was built without NATS support (libnats-dev missing at build time)"};
  ELDR_TRY(pool::validate_pool_name("pool", a.pool));
  pool::NatsLinkOptions o;
  o.urls = pool::split_urls(a.nats);
  o.auth = a.auth;
  o.name = "eldr table";
  o.fail_when_refused = true;
  auto link = NatsLink::open(o);
  if (!link) return link.status();
  if (!(*link)->wait_connected(a.timeout_ms))
    return Status{Errc::no_daemon, "no NATS server answered at " + pool::redact_url(a.nats) +
                                       " within " + std::to_string(a.timeout_ms) + " ms" + [&] {
                                         const std::string why = (*link)->last_error();
                                         return why.empty() ? std::string() : " (" + why + ")";
                                       }()};
  // A NATS cluster that has just started has no JetStream leader for a
  // moment: opening the bucket is retried until the timeout.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.timeout_ms);
  for (;;) {
    auto kv = (*link)->key_value(pool::pool_bucket(a.pool), static_cast<int>(a.replicas));
    if (kv) return std::pair{std::move(*link), std::move(*kv)};
    if (kv.status().code() != Errc::io || std::chrono::steady_clock::now() >= deadline) {
      // A refused subject (a user without the permission) times out: say what NATS said.
      const std::string why = (*link)->last_error();
      if (why.empty()) return kv.status();
      return Status{kv.status().code(), kv.status().message() + " (NATS said: " + why + ")"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

int run_publish(const TableArgs& a) {
  auto table = load_table(a.file);
  if (!table) return report(table.status());
  if (Status s = table->validate(); !s) return report(s);
  auto opened = open_bucket(a);
  if (!opened) return report(opened.status());
  auto& [link, kv] = *opened;
  // The pool's nodes only take a table of their geometry: refuse here, before anything is written.
  auto current = pool::fetch_pool_table(*kv);
  if (!current && current.status().code() != Errc::not_found) return report(current.status());
  if (current && *current) {
    const Geometry& was = (*current)->table.geometry;
    const Geometry& now = table->geometry;
    if (was.layers != now.layers || was.experts != now.experts || was.top_k != now.top_k)
      return report({Errc::shape_mismatch, "the pool's table (revision " +
                                               std::to_string((*current)->revision) + ") is " +
                                               was.to_string() + ", " + a.file + " is " +
                                               now.to_string() + ": its nodes would refuse it"});
  }
  const int64_t payload = link->max_payload();
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(payload - 8192, 1024));
  std::optional<uint64_t> expect;
  if (a.expect_revision >= 0) expect = static_cast<uint64_t>(a.expect_revision);
  auto revision = pool::publish_pool_table(*kv, *table, expect, chunk);
  if (!revision) return report(revision.status());
  std::printf(
      "published %s to pool %s: revision %llu (table epoch %llu on every node), %s, %u "
      "workers\n",
      a.file.c_str(), a.pool.c_str(), static_cast<unsigned long long>(*revision),
      static_cast<unsigned long long>(pool::kPoolEpochBase + *revision),
      table->geometry.to_string().c_str(), table->num_clusters());
  return 0;
}

int run_show(const TableArgs& a) {
  auto opened = open_bucket(a);
  if (!opened) return report(opened.status());
  auto current = pool::fetch_pool_table(*opened->second);
  if (!current) return report(current.status());
  if (!*current) {
    std::printf("pool %s has no table yet (its nodes route with their local ones)\n",
                a.pool.c_str());
    return 0;
  }
  const auto& t = (*current)->table;
  std::printf("pool %s: revision %llu (table epoch %llu), %s, %s, %u workers\n", a.pool.c_str(),
              static_cast<unsigned long long>((*current)->revision),
              static_cast<unsigned long long>((*current)->epoch()), t.model.c_str(),
              t.geometry.to_string().c_str(), t.num_clusters());
  return 0;
}

}  // namespace

void register_table_commands(CLI::App& app) {
  auto* table = app.add_subcommand("table", "the pool's shared cluster table in NATS");
  table->require_subcommand(1);
  auto a = std::make_shared<TableArgs>();
  auto* publish = table->add_subcommand(
      "publish", "verify a table file and write it as the pool's table (compare-and-set)");
  publish->add_option("--nats", a->nats, "URL[,URL...] of the pool's NATS servers")->required();
  publish->add_option("--pool", a->pool, "the pool's name");
  publish->add_option("--expect-revision", a->expect_revision,
                      "write only if the pool's table is at this revision (0: none yet)");
  publish->add_option("--replicas", a->replicas,
                      "copies of the bucket if it is created now (0: min(3, servers))");
  publish->add_option("--timeout-ms", a->timeout_ms, "how long to wait for a NATS server");
  publish->add_option("file", a->file, "cluster table file (eldr fit)")->required();
  pool::add_nats_auth_options(*publish, a->auth);
  publish->callback([a] {
    g_exit_code = run_publish(*a);
    pool::nats_shutdown();
  });
  auto* show = table->add_subcommand("show", "the pool's table: revision, model, geometry");
  show->add_option("--nats", a->nats, "URL[,URL...] of the pool's NATS servers")->required();
  show->add_option("--pool", a->pool, "the pool's name");
  show->add_option("--timeout-ms", a->timeout_ms, "how long to wait for a NATS server");
  pool::add_nats_auth_options(*show, a->auth);
  show->callback([a] {
    g_exit_code = run_show(*a);
    pool::nats_shutdown();
  });
}

}  // namespace eldr::cli
