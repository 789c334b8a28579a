// Where a node answers and where a client listens: the inbox prefixes a
// gateway may take, and the reply subjects a node accepts.
#include "eldr/pool/inbox.hpp"

#include <gtest/gtest.h>

#include <string>

namespace eldr::pool {
namespace {

TEST(Inbox, a_prefix_is_dot_separated_name_tokens_outside_the_pools_and_the_servers_subjects) {
  for (const char* good : {"_INBOX", "_INBOX.gw-a", "_GW_A", "a.b.c", "x"})
    EXPECT_TRUE(validate_inbox_prefix("prefix", good).is_ok()) << good;
  for (const std::string& bad :
       {std::string(), std::string("_INBOX."), std::string(".x"), std::string("a..b"),
        std::string("$KV"), std::string("$JS.API"), std::string("eldr"), std::string("eldr.p"),
        std::string("_INBOX.*"), std::string("_INBOX.>"), std::string("a b"), std::string("a\nb"),
        std::string(kMaxInboxPrefix + 1, 'a')}) {
    const Status s = validate_inbox_prefix("the prefix", bad);
    EXPECT_EQ(s.code(), Errc::invalid_argument) << bad;
    EXPECT_NE(s.message().find("the prefix"), std::string::npos);
  }
  EXPECT_TRUE(validate_inbox_prefix("p", "eldrx.a").is_ok());  // a token, not a string prefix
}

TEST(Inbox, a_node_answers_strictly_under_its_prefixes_and_nowhere_else) {
  const ReplyPolicy p;  // libnats' _INBOX
  EXPECT_TRUE(p.allows("_INBOX.abc"));
  EXPECT_TRUE(p.allows("_INBOX.gw-a.abc.1"));
  for (const char* bad :
       {"", "_INBOX", "_INBOX.", "_INBOXES.abc", "_INBOX..a", "_INBOX.a.", "_INBOX.*", "_INBOX.a.>",
        "_INBOX.a b", "_INBOX.a\tb", "$KV.eldr_p.table", "$JS.API.STREAM.INFO.KV_eldr_p",
        "eldr.p.node.b", "eldr.p.ack.b", "x._INBOX.a"})
    EXPECT_FALSE(p.allows(bad)) << "'" << bad << "'";
  EXPECT_FALSE(p.allows("_INBOX." + std::string(300, 'a')));  // longer than a subject may be
  auto two = ReplyPolicy::create({"_GW_A", "_INBOX.gw-b"});
  ASSERT_TRUE(two.is_ok());
  EXPECT_TRUE(two->allows("_GW_A.x"));
  EXPECT_TRUE(two->allows("_INBOX.gw-b.x"));
  EXPECT_FALSE(two->allows("_INBOX.gw-c.x"));
  EXPECT_FALSE(two->allows("_INBOX.gw-b"));
  EXPECT_EQ(ReplyPolicy::create({"$KV"}).status().code(), Errc::invalid_argument);
  EXPECT_EQ(ReplyPolicy::create({"eldr.p"}).status().code(), Errc::invalid_argument);
}

}  // namespace
}  // namespace eldr::pool
