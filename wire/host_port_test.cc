#include "wire/host_port.h"

#include "gtest/gtest.h"

namespace embedps::wire {
namespace {

TEST(HostPortTest, Ipv6LiteralsAreBracketed) {
  EXPECT_EQ(HostPort("127.0.0.1", 50051), "127.0.0.1:50051");
  EXPECT_EQ(HostPort("ps-0.ps.default.svc", 0), "ps-0.ps.default.svc:0");
  EXPECT_EQ(HostPort("::1", 50051), "[::1]:50051");
  EXPECT_EQ(HostPort("::", 7), "[::]:7");
  EXPECT_EQ(HostPort("fe80::1%eth0", 7), "[fe80::1%eth0]:7");
  EXPECT_EQ(HostPort("[::1]", 50051), "[::1]:50051");
}

TEST(HostPortTest, LoopbackHosts) {
  for (const char* host : {"127.0.0.1", "localhost", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "[::]", "10.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace embedps::wire
