#include "wire/peer_host.h"

#include "gtest/gtest.h"

namespace embedps::wire {
namespace {

TEST(PeerHostTest, APeerIsItsAddressWithoutThePort) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.5:41234"), "ipv4:10.0.0.5");
  EXPECT_EQ(PeerHost("ipv6:[::1]:50051"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("ipv6:[fe80::1%eth0]:7"), "ipv6:[fe80::1%eth0]");
  EXPECT_EQ(PeerHost("unix:/tmp/socket"), "unix:/tmp/socket");
  EXPECT_EQ(PeerHost("ipv4:"), "ipv4:");
  EXPECT_EQ(PeerHost(""), "");
}

}  // namespace
}  // namespace embedps::wire
