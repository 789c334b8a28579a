// NatsAuth: the combinations a pool client may be given, and that what is
// logged names files, never secrets.
#include "eldr/pool/nats_auth.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "temp_dir.hpp"

namespace eldr::pool {
namespace {

TEST(NatsAuth, one_kind_of_credentials_with_its_files) {
  eldr::testing::TempDir dir;
  const std::string pw = dir.file("pw"), token = dir.file("token"), ca = dir.file("ca.pem");
  std::ofstream(pw) << "hunter2\n";
  std::ofstream(token) << "t0ken";
  std::ofstream(ca) << "-----BEGIN CERTIFICATE-----\n";
  EXPECT_TRUE(NatsAuth{}.check().is_ok());
  EXPECT_TRUE((NatsAuth{.ca_file = ca, .user = "node", .password_file = pw}).check().is_ok());
  EXPECT_TRUE((NatsAuth{.ca_file = ca}).tls());
  // A certificate without its key, a user without a password, two kinds at once.
  EXPECT_EQ((NatsAuth{.cert_file = ca}).check().code(), Errc::invalid_argument);
  EXPECT_EQ((NatsAuth{.user = "node"}).check().code(), Errc::invalid_argument);
  EXPECT_EQ((NatsAuth{.user = "node", .password_file = pw, .token_file = token}).check().code(),
            Errc::invalid_argument);
  // A file that is not there.
  const Status missing = NatsAuth{.token_file = dir.file("nope")}.check();
  EXPECT_EQ(missing.code(), Errc::io);
  EXPECT_NE(missing.message().find("nope"), std::string::npos);
  // The secret is read with its newline dropped, and never described.
  EXPECT_EQ(read_secret(pw).value(), "hunter2");
  const NatsAuth a{.ca_file = ca, .user = "node", .password_file = pw};
  EXPECT_NE(a.describe().find("TLS (CA " + ca), std::string::npos) << a.describe();
  EXPECT_NE(a.describe().find("user node (password from " + pw), std::string::npos);
  EXPECT_EQ(a.describe().find("hunter2"), std::string::npos);
  std::ofstream(dir.file("empty")) << "\n";
  EXPECT_FALSE(read_secret(dir.file("empty")).is_ok());
}

}  // namespace
}  // namespace eldr::pool
