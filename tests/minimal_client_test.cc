// The C++ client guide's program (examples/cpp/minimal_client.cc) runs
// against a real ps_server and sees its rows move.
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/child_process.h"
#include "testing/server_process.h"

namespace embedps {
namespace {

TEST(MinimalClientTest, RunsAgainstARealServer) {
  ASSERT_OK_AND_ASSIGN(auto server,
                       testing::ServerProcess::Start("server/ps_server", {}));
  const std::string out = testing::TestTempPath("minimal_client_out");
  for (int run = 0; run < 2; ++run) {  // the second finds the table
    ASSERT_OK_AND_ASSIGN(
        auto client, testing::ChildProcess::Spawn(
                         "examples/cpp/minimal_client",
                         {absl::StrCat("--servers=", server->address())}, out));
    ASSERT_OK_AND_ASSIGN(const int code, client->WaitFor(absl::Seconds(60)));
    EXPECT_EQ(code, 0);
    std::ifstream file(out);
    std::stringstream text;
    text << file.rdbuf();
    EXPECT_THAT(text.str(), ::testing::HasSubstr("after one push"));
  }
  EXPECT_EQ(server->Stop(), 0);
}

}  // namespace
}  // namespace embedps
