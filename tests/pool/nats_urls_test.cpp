// Server URLs: a list split at commas, and the user info of every URL
// masked before it reaches a log line, a status or an error message.
#include "eldr/pool/nats_urls.hpp"

#include <gtest/gtest.h>

namespace eldr::pool {
namespace {

TEST(NatsUrls, a_list_splits_at_commas_without_the_blanks) {
  EXPECT_EQ(split_urls(" nats://a:4222 ,nats://b:4222,, "),
            (std::vector<std::string>{"nats://a:4222", "nats://b:4222"}));
  EXPECT_TRUE(split_urls("").empty());
}

TEST(NatsUrls, user_info_is_masked_and_everything_else_kept) {
  EXPECT_EQ(redact_url("nats://eldr:s3cret@10.0.0.1:4222"), "nats://eldr:***@10.0.0.1:4222");
  EXPECT_EQ(redact_url("tls://TOKEN123@h:4222/x"), "tls://***@h:4222/x");
  EXPECT_EQ(redact_url("nats://10.0.0.1:4222"), "nats://10.0.0.1:4222");
  EXPECT_EQ(redact_url("nats://u:p@a:1,nats://v:q@b:2"), "nats://u:***@a:1,nats://v:***@b:2");
  EXPECT_EQ(redact_url("cannot connect to nats://u:p:w@h:1 (refused)"),
            "cannot connect to nats://u:***@h:1 (refused)");
  EXPECT_EQ(redact_url("nats: authorization violation"), "nats: authorization violation");
  EXPECT_EQ(redact_url("nats://"), "nats://");
  EXPECT_EQ(redact_url(""), "");
}

}  // namespace
}  // namespace eldr::pool
