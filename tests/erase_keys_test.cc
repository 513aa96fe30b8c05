// Deletion on request against real ps_server processes: tools/erase_keys
// erases the keys a file lists from two shards while a client keeps
// training other keys, prints each shard's count, and the erased keys read
// as their initial vectors afterwards.
#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/key_hash.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tables.pb.h"
#include "testing/child_process.h"
#include "testing/server_process.h"

namespace embedps {
namespace {

using ::testing::HasSubstr;

TEST(EraseKeysTest, ErasesListedKeysOnEveryShardWhileTrainingGoesOn) {
  std::vector<std::unique_ptr<testing::ServerProcess>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(
        auto server, testing::ServerProcess::Start(
                         "server/ps_server", {absl::StrCat("--shard_index=", i),
                                              "--num_shards=2"}));
    addresses.push_back(server->address());
    servers.push_back(std::move(server));
  }
  client::ClientOptions options;
  options.servers = addresses;
  ASSERT_OK_AND_ASSIGN(auto client, client::Client::Connect(options));
  proto::TableConfig config;
  config.set_name("users");
  config.set_dim(4);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  config.mutable_optimizer()->set_learning_rate(0.5f);
  ASSERT_OK_AND_ASSIGN(const client::TableHandle table,
                       client->CreateTable(config));

  std::vector<uint64_t> erased(40);
  for (uint64_t i = 0; i < erased.size(); ++i) erased[i] = 1000 + i;
  std::vector<float> initial(erased.size() * 4);
  ASSERT_OK(client->Lookup(table, erased, absl::MakeSpan(initial)));
  std::vector<float> ones(erased.size() * 4, 1.0f);
  ASSERT_OK(client->Push(table, erased, ones));
  uint64_t on_shard_1 = 0;
  for (uint64_t key : erased) on_shard_1 += ShardOfKey(key, 2) == 1;

  // Training on other keys goes on meanwhile.
  std::atomic<bool> training{true};
  std::thread trainer([&] {
    std::vector<uint64_t> other = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<float> grads(other.size() * 4, 0.01f);
    while (training.load()) {
      EXPECT_OK(client->Push(table, other, grads));
    }
  });
  const std::string keys_file = testing::TestTempPath("keys");
  {
    std::ofstream file(keys_file);
    file << "# a privacy request\n";
    for (uint64_t key : erased) file << key << "\n";
    file << "0x3e8\n";  // 1000 again, in hex
  }
  const std::string out = testing::TestTempPath("erase_out");
  ASSERT_OK_AND_ASSIGN(
      auto tool,
      testing::ChildProcess::Spawn(
          "tools/erase_keys",
          {absl::StrCat("--servers=", addresses[0], ",", addresses[1]),
           "--table=users", "--keys_file=" + keys_file},
          out));
  ASSERT_OK_AND_ASSIGN(const int code, tool->WaitFor(absl::Seconds(60)));
  training = false;
  trainer.join();
  EXPECT_EQ(code, 0);
  std::ifstream file(out);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_THAT(text.str(),
              HasSubstr(absl::StrCat("shard 0: ", erased.size() - on_shard_1,
                                     " rows erased")));
  EXPECT_THAT(text.str(),
              HasSubstr(absl::StrCat("shard 1: ", on_shard_1, " rows erased")));
  EXPECT_THAT(text.str(), HasSubstr("41 keys asked, 40 rows erased"));

  std::vector<float> after(erased.size() * 4);
  ASSERT_OK(client->Lookup(table, erased, absl::MakeSpan(after)));
  EXPECT_EQ(after, initial);

  // A file that is no list of keys: exit 2, nothing erased.
  std::ofstream(keys_file) << "12\nnot-a-key\n";
  ASSERT_OK_AND_ASSIGN(
      auto refused,
      testing::ChildProcess::Spawn(
          "tools/erase_keys",
          {absl::StrCat("--servers=", addresses[0], ",", addresses[1]),
           "--table=users", "--keys_file=" + keys_file}));
  ASSERT_OK_AND_ASSIGN(const int refused_code,
                       refused->WaitFor(absl::Seconds(60)));
  EXPECT_EQ(refused_code, 2);
  for (auto& server : servers) EXPECT_EQ(server->Stop(), 0);
}

}  // namespace
}  // namespace embedps
