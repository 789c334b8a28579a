// A secured pool end to end (pool_e2e_fixture.hpp): nodes out of their pool
// say why and keep secrets out of logs; the server configuration
// docs/design.md section 10 gives, run verbatim, refuses outsiders; and a
// gateway holding valid credentials changes nothing but its own requests.
#include <filesystem>
#include <fstream>
#include <mutex>

#include "eldr/pool/route_wire.hpp"
#include "pool_e2e_fixture.hpp"

namespace eldr::sidecar::e2e {
namespace {

// A node whose NATS server is unreachable says so at once (log, status,
// metric) and keeps retrying; one the server refuses names the server's
// reason; credentials given in the URL reach no log line and no status.
TEST_F(PoolTest, a_node_out_of_its_pool_says_why_and_credentials_stay_out_of_logs_and_status) {
  server_args = {"--user", "eldr", "--pass", "s3cret-pw"};
  start_servers(1);
  nodes.reserve(3);
  const std::string port = servers[0].port;
  node_urls = "nats://eldr:s3cret-pw@127.0.0.1:" + free_loopback_port();  // nobody there
  const Node& lonely = start_node("lonely");
  EXPECT_TRUE(eventually([&] {
    const auto c = pool_of(lonely);
    return c.is_object() && !c.value("connected", true) &&
           c.value("error", std::string()).find("no NATS server answers") != std::string::npos;
  })) << pool_of(lonely).dump();
  EXPECT_EQ(metric(lonely, "eldr_pool_connected"), 0u);
  EXPECT_EQ(metric(lonely, "eldr_pool_join_errors_total"), 1u);
  EXPECT_TRUE(eventually(
      [&] { return read_file(lonely.log).find("is not in pool") != std::string::npos; }));

  node_urls = "nats://eldr:s3cret-pw@127.0.0.1:" + port;
  const Node& member = start_node("member");
  EXPECT_TRUE(eventually([&] { return connected(member); }));
  EXPECT_EQ(pool_of(member).value("server", std::string()).find("s3cret"), std::string::npos);
  EXPECT_EQ(pool_of(member).count("error"), 0u);

  // Refused (a wrong password): libnats closes the connection for good after
  // the second refusal, before or after the node subscribed. The node stays
  // up, says why, and opens a new connection a second after each close,
  // reading its password file again: once that holds the right password, it
  // joins.
  const std::string log = dir.file("refused.log");
  const std::string password = dir.file("refused.password");
  std::ofstream(password) << "wrong-pw\n";
  const std::string refused_instance = "cl-" + tag + "-refused";
  const pid_t refused =
      spawn({ELDRD_PATH, "--config", config_path, "--instance", refused_instance, "--table",
             table_path, "--nats", servers[0].url(), "--nats-user", "eldr", "--nats-password-file",
             password, "--node", "refused", "--pool", "p" + tag, "--metrics-port", "0"},
            log);
  ASSERT_GT(refused, 0);
  EXPECT_TRUE(eventually(
      [&] {
        const std::string l = read_file(log);
        return l.find("is not in pool") != std::string::npos &&
               l.find("uthorization") != std::string::npos;
      },
      10s))
      << read_file(log);
  const auto refused_pool = [&] {
    const auto s =
        run(std::string(ELDR_CLI_PATH) + " status --json --instance " + refused_instance);
    const auto j = nlohmann::json::parse(s, nullptr, false);
    return j.is_object() ? j.value("pool", nlohmann::json::object()) : nlohmann::json::object();
  };
  if (!std::string_view(ELDR_CLI_PATH).empty()) {
    // Still refused, still up, still trying: the connection was opened anew.
    EXPECT_TRUE(eventually(
        [&] {
          const auto c = refused_pool();
          return !c.value("connected", true) && c["nats"].value("reopened", uint64_t{0}) >= 1 &&
                 c.value("error", std::string()).find("uthorization") != std::string::npos;
        },
        10s))
        << refused_pool().dump();
    std::ofstream(password) << "s3cret-pw\n";
    EXPECT_TRUE(eventually(
        [&] {
          const auto c = refused_pool();
          if (!c.value("connected", false)) return false;
          for (const auto& p : c.value("peers", nlohmann::json::array()))
            if (p.value("name", "") == "member") return true;
          return false;
        },
        15s))
        << refused_pool().dump() << read_file(log);
  }
  EXPECT_EQ(kill(refused, 0), 0) << "the refused node exited: " << read_file(log);
  kill(refused, SIGTERM);
  (void)wait_exit(refused);
  EXPECT_EQ(read_file(log).find("s3cret"), std::string::npos) << read_file(log);

  for (const Node* n : {&lonely, &member})
    EXPECT_EQ(read_file(n->log).find("s3cret"), std::string::npos) << read_file(n->log);
  if (std::string_view(ELDR_CLI_PATH).empty()) return;  // no CLI in this build
  std::string status;
  for (const Node* n : {&lonely, &member})
    for (const char* json : {" --json", ""})
      status += run(std::string(ELDR_CLI_PATH) + " status --instance " + n->instance + json);
  EXPECT_NE(status.find("DISCONNECTED (no NATS server answers at nats://eldr:***@"),
            std::string::npos)
      << status;
  EXPECT_EQ(status.find("s3cret"), std::string::npos) << status;
}

// eldr_pool_open_auth refuses what it cannot use before it tries a server,
// with the reason and without a handle: another struct version, a user
// without a password file, a file that is not there.
TEST(PoolAuth, bad_credentials_are_refused_before_connecting) {
  const char* url = "nats://127.0.0.1:1";
  eldr_pool_t* pool = nullptr;
  eldr_nats_auth_t auth = ELDR_NATS_AUTH_INIT;
  auth.version = ELDR_NATS_AUTH_VERSION + 1;
  EXPECT_EQ(eldr_pool_open_auth(url, "p", &auth, 200, &pool), ELDR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eldr_last_error_message()).find("version"), std::string::npos);
  auth = ELDR_NATS_AUTH_INIT;
  auth.user = "gateway";
  EXPECT_EQ(eldr_pool_open_auth(url, "p", &auth, 200, &pool), ELDR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eldr_last_error_message()).find("password file"), std::string::npos);
  auth.password_file = "/nonexistent/eldr-gateway.pw";
  EXPECT_EQ(eldr_pool_open_auth(url, "p", &auth, 200, &pool), ELDR_E_IO);
  EXPECT_NE(std::string(eldr_last_error_message()).find("/nonexistent/eldr-gateway.pw"),
            std::string::npos);
  // An inbox prefix that is no subject prefix, or lies under the pool's subjects.
  auth = ELDR_NATS_AUTH_INIT;
  for (const char* prefix : {"eldr.prod", "_INBOX.*", "_INBOX..gw", "$KV"}) {
    auth.inbox_prefix = prefix;
    EXPECT_EQ(eldr_pool_open_auth(url, "p", &auth, 200, &pool), ELDR_E_INVALID_ARGUMENT) << prefix;
    EXPECT_NE(std::string(eldr_last_error_message()).find("inbox prefix"), std::string::npos);
  }
  // A version 1 struct (before inbox_prefix) is read: it gets as far as the server.
  auth.version = 1;
  EXPECT_EQ(eldr_pool_open_auth(url, "p", &auth, 200, &pool), ELDR_E_IO)
      << eldr_last_error_message();
  // A server list with no URL in it.
  EXPECT_EQ(eldr_pool_open(" , ", "p", 200, &pool), ELDR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eldr_last_error_message()).find("no NATS server URL"), std::string::npos);
  EXPECT_EQ(pool, nullptr);
}

// A secured pool: the servers speak TLS only and verify client certificates
// (all made here by openssl), and two users have the permissions
// docs/design.md §10 gives: "node" publishes and subscribes on its pool's
// subjects (and JetStream's), "gateway" may only request a route and send a
// complete. Nodes with their certificate and credentials route together; a
// client without credentials is refused; the gateway's credentials cannot
// publish a table; the nodes keep routing.
// ---- the documented secured pool --------------------------------------------------

// The nats-server configuration docs/design.md gives: the fenced block after
// its marker, as written there.
std::string documented_server_config() {
  const std::string design = read_file(ELDR_SOURCE_DIR "/docs/design.md");
  const size_t marker = design.find("<!-- nats-server.conf:");
  if (marker == std::string::npos) return {};
  const size_t open = design.find("```\n", marker);
  const size_t close = design.find("\n```", open + 4);
  if (open == std::string::npos || close == std::string::npos) return {};
  return design.substr(open + 4, close - open - 3);
}

// The pool of that configuration: "prod", its nodes a and b (user
// eldr-node), gateways gw-a and gw-b, over TLS with certificates made here.
class SecuredPool : public PoolTest {
 protected:
  void start_secured_pool() {
    const std::string config = documented_server_config();
    ASSERT_NE(config.find("authorization"), std::string::npos)
        << "no server configuration in docs/design.md";
    d = dir.file("tls");
    std::filesystem::create_directories(d);
    const auto sh = [](const std::string& cmd) {
      int code = 0;
      const std::string out = run(cmd, &code);
      EXPECT_EQ(code, 0) << cmd << "\n" << out;
    };
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    sh("cd " + d + " && openssl req -x509" + ec +
       " -days 1 -subj /CN=eldr-test-ca -keyout ca.key -out ca.pem");
    sh("cd " + d + " && openssl req" + ec +
       " -subj /CN=127.0.0.1 -keyout server.key -out server.csr && "
       "printf 'subjectAltName=IP:127.0.0.1' > san.ext && "
       "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
       "-extfile san.ext -out server.pem");
    sh("cd " + d + " && openssl req" + ec +
       " -subj /CN=eldr-client -keyout client.key -out client.csr && "
       "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
       "-out client.pem");
    for (const char* user : {"node", "gw-a", "gw-b"})
      std::ofstream(d + "/" + user + ".pw") << user << "-pw-" << tag << "\n";
    std::ofstream(d + "/nats.conf") << config;
    server_dir = d;
    server_env = {"NODE_PASSWORD=node-pw-" + tag, "GW_A_PASSWORD=gw-a-pw-" + tag,
                  "GW_B_PASSWORD=gw-b-pw-" + tag};
    server_args = {"-c", "nats.conf"};
    pool_name = "prod";
    start_servers(1, true);
    tls = {"--nats-ca",       d + "/ca.pem", "--nats-cert",
           d + "/client.pem", "--nats-key",  d + "/client.key"};
    node_args = tls;
    node_args.insert(node_args.end(),
                     {"--nats-user", "eldr-node", "--nats-password-file", d + "/node.pw"});
    nodes.reserve(3);
    start_node("a");
    start_node("b");
    ASSERT_TRUE(eventually([&] { return sees_peers(nodes[0], 1) && sees_peers(nodes[1], 1); }, 15s))
        << pool_of(nodes[0]).dump() << read_file(servers[0].log);
  }
  // A gateway's handle with user `user`'s credentials and inbox prefix
  // (nullptr and the failure recorded when it does not open).
  eldr_pool_t* open_secured_gateway(const std::string& user, const std::string& inbox) {
    const std::string ca = d + "/ca.pem", cert = d + "/client.pem", key = d + "/client.key",
                      pw = d + "/" + user + ".pw";
    eldr_nats_auth_t auth = ELDR_NATS_AUTH_INIT;
    auth.ca_file = ca.c_str();
    auth.cert_file = cert.c_str();
    auth.key_file = key.c_str();
    auth.user = user.c_str();
    auth.password_file = pw.c_str();
    auth.inbox_prefix = inbox.empty() ? nullptr : inbox.c_str();
    eldr_pool_t* gw = nullptr;
    EXPECT_EQ(eldr_pool_open_auth(servers[0].url().c_str(), pool_name.c_str(), &auth, 2000, &gw),
              ELDR_OK)
        << eldr_last_error_message();
    return gw;
  }
  // The gateway_routes counters of both nodes, summed.
  uint64_t gateway_routes(const std::string& counter) {
    uint64_t sum = 0;
    for (const Node& n : nodes) {
      const auto c = pool_of(n);
      if (c.is_object()) sum += c["gateway_routes"].value(counter, uint64_t{0});
    }
    return sum;
  }
  uint64_t pool_inflight() { return inflight(nodes[0]).first; }

  std::string d;                 // the certificates, passwords and configuration
  std::vector<std::string> tls;  // the TLS flags of eldrd and the CLI
};

// A client of the raw NATS library with a user's credentials: what a
// gateway's credentials allow anyone who holds them, beyond eldr_pool_*.
class RawClient {
 public:
  RawClient(const std::string& url, const std::string& d, const std::string& user,
            const std::string& password, const std::string& inbox) {
    natsOptions* o = nullptr;
    EXPECT_EQ(natsOptions_Create(&o), NATS_OK);
    EXPECT_EQ(natsOptions_SetURL(o, url.c_str()), NATS_OK);
    EXPECT_EQ(natsOptions_SetSecure(o, true), NATS_OK);
    EXPECT_EQ(natsOptions_LoadCATrustedCertificates(o, (d + "/ca.pem").c_str()), NATS_OK);
    EXPECT_EQ(natsOptions_LoadCertificatesChain(o, (d + "/client.pem").c_str(),
                                                (d + "/client.key").c_str()),
              NATS_OK);
    EXPECT_EQ(natsOptions_SetUserInfo(o, user.c_str(), password.c_str()), NATS_OK);
    EXPECT_EQ(natsOptions_SetCustomInboxPrefix(o, inbox.c_str()), NATS_OK);
    EXPECT_EQ(natsOptions_SetErrorHandler(o, on_error, this), NATS_OK);
    EXPECT_EQ(natsConnection_Connect(&m_nc, o), NATS_OK);
    natsOptions_Destroy(o);
  }
  ~RawClient() {
    for (natsSubscription* s : m_subs) natsSubscription_Destroy(s);
    natsConnection_Destroy(m_nc);
  }
  // A request: the message on `subject` with `reply` as its reply subject.
  void ask(const std::string& subject, const std::string& reply,
           const std::vector<uint8_t>& bytes) {
    EXPECT_EQ(natsConnection_PublishRequest(m_nc, subject.c_str(), reply.c_str(), bytes.data(),
                                            static_cast<int>(bytes.size())),
              NATS_OK);
  }
  void publish(const std::string& subject, const std::vector<uint8_t>& bytes) {
    EXPECT_EQ(
        natsConnection_Publish(m_nc, subject.c_str(), bytes.data(), static_cast<int>(bytes.size())),
        NATS_OK);
  }
  // Counts what arrives on `subject` (if the server lets it subscribe).
  void listen(const std::string& subject) {
    natsSubscription* s = nullptr;
    EXPECT_EQ(natsConnection_Subscribe(&s, m_nc, subject.c_str(), on_msg, this), NATS_OK);
    m_subs.push_back(s);
  }
  void flush() { EXPECT_EQ(natsConnection_FlushTimeout(m_nc, 2000), NATS_OK); }
  uint64_t heard() const { return m_heard.load(); }
  // Whether the server refused this connection something, saying `what`.
  bool refused(const std::string& what) {
    std::lock_guard lock(m_mutex);
    for (const std::string& r : m_refused)
      if (r.find(what) != std::string::npos) return true;
    return false;
  }
  std::string refusals() {
    std::lock_guard lock(m_mutex);
    std::string out;
    for (const std::string& r : m_refused) out += r + "\n";
    return out;
  }

 private:
  static void on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    static_cast<RawClient*>(closure)->m_heard.fetch_add(1);
    natsMsg_Destroy(msg);
  }
  static void on_error(natsConnection* nc, natsSubscription*, natsStatus err, void* closure) {
    if (err != NATS_NOT_PERMITTED) return;
    auto* self = static_cast<RawClient*>(closure);
    const char* text = nullptr;
    (void)natsConnection_GetLastError(nc, &text);
    std::lock_guard lock(self->m_mutex);
    self->m_refused.push_back(text != nullptr ? text : "");
  }
  natsConnection* m_nc = nullptr;
  std::vector<natsSubscription*> m_subs;
  std::atomic<uint64_t> m_heard{0};
  std::mutex m_mutex;
  std::vector<std::string> m_refused;
};

// The documented configuration: nodes with their certificate and
// credentials route together; a node without the CA, a client without
// credentials, a gateway without its own are refused; a gateway with its
// own routes and completes, and cannot publish a table; the nodes keep
// routing.
TEST_F(SecuredPool, the_documented_configuration_routes_and_refuses_outsiders) {
  ASSERT_NO_FATAL_FAILURE(start_secured_pool());
  Node& a = nodes[0];
  Node& b = nodes[1];
  // A node with the right password but no CA: the TLS handshake fails. It
  // stays up, routes alone, says why at once (status, log, metric) and
  // keeps trying.
  node_args = {"--nats-user", "eldr-node", "--nats-password-file", d + "/node.pw"};
  const Node& untrusting = start_node("untrusting");
  EXPECT_TRUE(eventually([&] {
    const auto c = pool_of(untrusting);
    return c.is_object() && !c.value("connected", true) &&
           c.value("error", std::string()).find("SSL handshake") != std::string::npos &&
           c["nats"].value("reopened", uint64_t{0}) >= 1;
  })) << pool_of(untrusting).dump();
  EXPECT_GE(metric(untrusting, "eldr_pool_join_errors_total"), 1u);
  EXPECT_NE(read_file(untrusting.log).find("SSL handshake"), std::string::npos);
  EXPECT_TRUE(client_of(untrusting));  // its engines still have their router
  {
    auto client = client_of(a);
    ASSERT_TRUE(client);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(route(*client, "s" + std::to_string(i), i).is_ok());
  }
  EXPECT_TRUE(eventually([&] { return inflight(b).first == 4; })) << pool_of(b).dump();
  // A gateway through the C API: refused without credentials; with its own
  // and its inbox prefix, it routes and completes.
  eldr_pool_t* gw = nullptr;
  EXPECT_NE(eldr_pool_open_auth(servers[0].url().c_str(), pool_name.c_str(), nullptr, 2000, &gw),
            ELDR_OK);
  gw = open_secured_gateway("gw-a", "_INBOX.gw-a");
  ASSERT_NE(gw, nullptr);
  const std::vector<int16_t> counts = one_cell(2);
  eldr_decision_t dec = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_pool_route(gw, "gw-1", counts.data(), 2, 4, 2000, &dec), ELDR_OK)
      << eldr_last_error_message();
  EXPECT_EQ(dec.worker, 102);
  EXPECT_EQ(eldr_pool_complete(gw, "gw-1", dec.completion_token), ELDR_OK)
      << eldr_last_error_message();
  eldr_pool_free(gw);
  // Without its inbox prefix the server will not let it hear the answer,
  // and the error says why.
  gw = open_secured_gateway("gw-a", "");
  ASSERT_NE(gw, nullptr);
  EXPECT_EQ(eldr_pool_route(gw, "gw-2", counts.data(), 2, 4, 500, &dec), ELDR_E_TIMEOUT);
  EXPECT_NE(std::string(eldr_last_error_message()).find("Permissions Violation for Subscription"),
            std::string::npos)
      << eldr_last_error_message();
  eldr_pool_free(gw);
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 4; })) << pool_of(a).dump();
  for (const Node* n : {&a, &b}) {
    const std::string log = read_file(n->log);
    EXPECT_NE(log.find("TLS (CA "), std::string::npos) << log;
    EXPECT_EQ(log.find("node-pw-"), std::string::npos) << log;  // the password stays in its file
  }
  if (std::string_view(ELDR_CLI_PATH).empty()) return;  // no CLI in this build
  const std::string table2 = reversed_table();
  const auto table = [&](const std::vector<std::string>& flags, int* code) {
    std::vector<std::string> args = {"publish", "--timeout-ms", "3000"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back(table2);
    return table_cli(args, code);
  };
  int code = 0;
  // No TLS, no credentials: refused.
  std::string out = table({}, &code);
  EXPECT_NE(code, 0) << out;
  // TLS but no credentials: refused at once, with the server's reason.
  out = table(tls, &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("NATS refused the connection: Authorization Violation"), std::string::npos)
      << out;
  // A gateway's credentials: connected, but not allowed to write a table.
  std::vector<std::string> gateway = tls;
  gateway.insert(gateway.end(), {"--nats-user", "gw-a", "--nats-password-file", d + "/gw-a.pw",
                                 "--nats-inbox-prefix", "_INBOX.gw-a"});
  out = table(gateway, &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("Permissions Violation"), std::string::npos) << out;
  std::this_thread::sleep_for(300ms);
  for (const Node* n : {&a, &b}) EXPECT_EQ(table_revision(*n), 0u) << n->name;
  // The nodes keep routing, and see each other's requests.
  {
    auto client = client_of(b);
    ASSERT_TRUE(client);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(route(*client, "t" + std::to_string(i), i).is_ok());
  }
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 8; })) << pool_of(a).dump();
  // eldr loadgen as a gateway takes the same flags: 20 routes and completes.
  std::string loadgen = std::string(ELDR_CLI_PATH) + " loadgen --nats " + servers[0].url() +
                        " --pool prod --model 2x4x1 --requests 20 --complete --json" +
                        " --nats-user gw-a --nats-password-file " + d + "/gw-a.pw" +
                        " --nats-inbox-prefix _INBOX.gw-a";
  for (size_t i = 0; i < tls.size(); i += 2) loadgen += " " + tls[i] + " " + tls[i + 1];
  out = run(loadgen, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"failed\":0"), std::string::npos) << out;
  // A node's credentials may: the table reaches both nodes.
  std::vector<std::string> node = tls;
  node.insert(node.end(), {"--nats-user", "eldr-node", "--nats-password-file", d + "/node.pw"});
  out = table(node, &code);
  EXPECT_EQ(code, 0) << out;
  for (const Node* n : {&a, &b})
    EXPECT_TRUE(eventually([&] { return table_revision(*n) != 0; }, 10s)) << n->name;
}

// Every attack of a gateway holding valid credentials (gw-b) on another
// gateway (gw-a) and on the nodes, under the documented configuration: its
// answers aimed at the table key, a peer's subject and JetStream's API; a
// subscription to the other's inbox; the other's tokens presented without
// its keys, on the gateways' subject and on the nodes' forward subject; the
// other's ids routed, then leaving; blind cancels and leaving beats. Nothing
// changes but gw-b's own requests, the table bucket is never written, and
// the nodes keep routing throughout.
TEST_F(SecuredPool, a_gateway_of_a_secured_pool_changes_nothing_but_its_own_requests) {
  ASSERT_NO_FATAL_FAILURE(start_secured_pool());
  Node& a = nodes[0];
  Node& b = nodes[1];
  RawClient attacker(servers[0].url(), d, "gw-b", "gw-b-pw-" + tag, "_INBOX.gw-b");
  const std::vector<int16_t> counts = one_cell(1);
  uint64_t key = 1000;
  // 1. Its route requests ask for their answers on the pool's table key,
  // JetStream's API and node b's own subject: nothing is routed, nothing
  // answered, nothing written.
  for (const std::string reply :
       {"$KV.eldr_prod.table", "$JS.API.STREAM.DELETE.KV_eldr_prod", "eldr.prod.node.b"})
    for (int i = 0; i < 10; ++i)
      attacker.ask("eldr.prod.route", reply,
                   pool::encode_route_request("x" + std::to_string(key), key, 0xbbb, 2, 4, counts)),
          ++key;
  attacker.flush();
  EXPECT_TRUE(eventually([&] { return gateway_routes("replies_refused") == 30; }))
      << pool_of(a).dump() << pool_of(b).dump();
  EXPECT_EQ(gateway_routes("routed"), 0u);  // read with replies_refused: one status
  EXPECT_EQ(pool_inflight(), 0u);
  for (const Node* n : {&a, &b}) {
    EXPECT_EQ(metric(*n, "eldr_pool_malformed_total{fault=\"not_a_message\"}"), 0u) << n->name;
    EXPECT_EQ(metric(*n, "eldr_pool_replies_refused_total"),
              pool_of(*n)["gateway_routes"].value("replies_refused", uint64_t{0}));
  }
  // 2. gw-a routes 40 requests under its own inbox prefix; gw-b's
  // subscriptions to every inbox and to gw-a's are refused by the server,
  // and it hears none of gw-a's answers.
  // (One at a time: the library keeps only the last error's text.)
  for (const std::string subject : {"_INBOX.>", "_INBOX.gw-a.>"}) {
    attacker.listen(subject);
    attacker.flush();
    EXPECT_TRUE(eventually([&] { return attacker.refused("Subscription to \"" + subject); }))
        << attacker.refusals();
  }
  eldr_pool_t* gw_a = open_secured_gateway("gw-a", "_INBOX.gw-a");
  ASSERT_NE(gw_a, nullptr);
  std::vector<std::pair<std::string, uint64_t>> routed;  // gw-a's ids and tokens
  for (int i = 0; i < 40; ++i) {
    const std::string id = "a-" + std::to_string(i);
    eldr_decision_t dec = ELDR_DECISION_INIT;
    ASSERT_EQ(eldr_pool_route(gw_a, id.c_str(), counts.data(), 2, 4, 2000, &dec), ELDR_OK)
        << eldr_last_error_message();
    routed.emplace_back(id, dec.completion_token);
  }
  EXPECT_EQ(attacker.heard(), 0u);
  EXPECT_TRUE(eventually([&] { return pool_inflight() == 40; })) << pool_of(a).dump();
  // 3. gw-a's tokens, obtained anyway, presented without gw-a's keys: on
  // both nodes' complete subjects (without a key, with a guessed one, as a
  // request and as a publish), and on the nodes' own forward subject, which
  // the server refuses it.
  for (const auto& [id, token] : routed)
    for (const char* node : {"a", "b"}) {
      const std::string subject = std::string("eldr.prod.complete.") + node;
      attacker.ask(subject, "_INBOX.gw-b.c", pool::encode_route_complete(id, token));
      attacker.publish(subject, pool::encode_route_complete(id, token, key++));
      attacker.publish(std::string("eldr.prod.forward.") + node,
                       pool::encode_route_complete(id, token));
    }
  attacker.flush();
  EXPECT_TRUE(eventually([&] { return gateway_routes("completes_refused") == 80; }))
      << pool_of(a).dump() << pool_of(b).dump();
  EXPECT_TRUE(eventually([&] { return attacker.refused("Publish to \"eldr.prod.forward."); }))
      << attacker.refusals();
  EXPECT_EQ(pool_inflight(), 40u);
  EXPECT_EQ(attacker.heard(), 0u);
  // 4. gw-b routes gw-a's ids through its own handle. Where one lands on
  // the node that holds gw-a's request, it is refused; on the other node
  // it is a request of gw-b's own (request ids are a node's, as ever).
  // Nothing of gw-a's is replaced, and when gw-b leaves, only its own go.
  eldr_pool_t* gw_b = open_secured_gateway("gw-b", "_INBOX.gw-b");
  ASSERT_NE(gw_b, nullptr);
  uint64_t refused = 0, own = 0;
  for (const auto& [id, token] : routed) {
    eldr_decision_t dec = ELDR_DECISION_INIT;
    const eldr_status_t s = eldr_pool_route(gw_b, id.c_str(), counts.data(), 2, 4, 2000, &dec);
    EXPECT_TRUE(s == ELDR_E_STATE || s == ELDR_OK) << id << ": " << eldr_last_error_message();
    (s == ELDR_OK ? own : refused) += 1;
  }
  EXPECT_TRUE(eventually([&] { return gateway_routes("refused_owned") == refused; }))
      << pool_of(a).dump() << pool_of(b).dump();
  EXPECT_GT(refused, 0u);  // the queue group spreads them over both nodes
  for (int i = 0; i < 5; ++i) {
    eldr_decision_t dec = ELDR_DECISION_INIT;
    ASSERT_EQ(
        eldr_pool_route(gw_b, ("b-" + std::to_string(i)).c_str(), counts.data(), 2, 4, 2000, &dec),
        ELDR_OK)
        << eldr_last_error_message();
  }
  EXPECT_TRUE(eventually([&] { return pool_inflight() == 45 + own; }));
  eldr_pool_free(gw_b);
  EXPECT_TRUE(eventually([&] { return pool_inflight() == 40; })) << pool_of(a).dump();
  // 5. Blind guesses: cancels of gw-a's ids with random keys, leaving beats
  // of random gateway ids.
  for (int i = 0; i < 200; ++i) {
    attacker.publish("eldr.prod.cancel",
                     pool::encode_route_cancel(routed[static_cast<size_t>(i) % 40].first,
                                               0x9e3779b97f4a7c15ull * (i + 1)));
    attacker.publish("eldr.prod.gateway",
                     pool::encode_gateway_beat({0x7f4a7c159e3779b9ull * (i + 1), true}));
  }
  attacker.flush();
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(pool_inflight(), 40u);
  EXPECT_EQ(gateway_routes("cancelled"), 0u);
  // The nodes kept routing for their engines throughout, and see each other.
  {
    auto client = client_of(b);
    ASSERT_TRUE(client);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(route(*client, "e" + std::to_string(i), i).is_ok());
  }
  EXPECT_TRUE(eventually([&] { return inflight(a).first == 44; })) << pool_of(a).dump();
  // gw-a completes its own: every one released.
  for (const auto& [id, token] : routed)
    EXPECT_EQ(eldr_pool_complete(gw_a, id.c_str(), token), ELDR_OK) << eldr_last_error_message();
  EXPECT_TRUE(eventually([&] { return pool_inflight() == 4 && inflight(b).first == 4; }));
  EXPECT_TRUE(eventually([&] { return gateway_routes("orphaned") == 5 + own; }))
      << pool_of(a).dump();  // gw-b's own, nothing else
  eldr_pool_free(gw_a);
  // The table bucket was never written: no node has a pool table, none
  // logged a corrupt one, and a node's credentials publish one as ever.
  for (const Node* n : {&a, &b}) {
    EXPECT_EQ(table_revision(*n), 0u) << n->name;
    EXPECT_EQ(pool_of(*n).value("table_errors", uint64_t{1}), 0u) << pool_of(*n).dump();
    EXPECT_EQ(read_file(n->log).find("corrupt"), std::string::npos) << read_file(n->log);
  }
  if (std::string_view(ELDR_CLI_PATH).empty()) return;  // no CLI in this build
  std::vector<std::string> args = {"publish", "--timeout-ms", "3000"};
  args.insert(args.end(), tls.begin(), tls.end());
  args.insert(args.end(), {"--nats-user", "eldr-node", "--nats-password-file", d + "/node.pw",
                           reversed_table()});
  int code = 0;
  const std::string out = table_cli(args, &code);
  EXPECT_EQ(code, 0) << out;
  for (const Node* n : {&a, &b})
    EXPECT_TRUE(eventually([&] { return table_revision(*n) != 0; }, 10s)) << n->name;
}

}  // namespace
}  // namespace eldr::sidecar::e2e
