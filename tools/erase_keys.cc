// erase_keys: deletion on request. Erases the keys listed in a file from a
// table on every training shard and prints how many rows each shard
// removed.
//
//   erase_keys --servers=HOST:PORT,... --table=NAME --keys_file=FILE
//       [--tls_ca=... --token_file=...]
//
// FILE holds one key a line (decimal, or hex with 0x), blank lines and
// lines starting with '#' ignored. Erased rows leave the training shards
// at once, the serving replicas with the next publication, and every
// checkpoint written afterwards; older checkpoints hold them until they
// are deleted (docs/operations.md "Erasing keys"). Exit 0 on success, 1 if
// the shards refused or could not be reached, 2 for a bad flag or file.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "common/program_usage.h"
#include "security/flags.h"

ABSL_FLAG(std::string, servers, "",
          "host:port of every training shard, comma-separated, in shard "
          "order (a replicated shard: its replicas joined by '|')");
ABSL_FLAG(std::string, table, "", "the table to erase the keys from");
ABSL_FLAG(std::string, keys_file, "",
          "a file of keys, one a line (decimal, or 0x hex)");

namespace {

// The keys of `path`; INVALID_ARGUMENT naming the line that is no key.
absl::StatusOr<std::vector<uint64_t>> ReadKeys(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read --keys_file '" + path + "'");
  std::vector<uint64_t> keys;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    uint64_t key = 0;
    const bool parsed = absl::ConsumePrefix(&text, "0x")
                            ? absl::SimpleHexAtoi(text, &key)
                            : absl::SimpleAtoi(text, &key);
    if (!parsed) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", number, ": not a key: '", line.substr(0, 64), "'"));
    }
    keys.push_back(key);
  }
  return keys;
}

int Run() {
  if (absl::GetFlag(FLAGS_servers).empty() ||
      absl::GetFlag(FLAGS_table).empty() ||
      absl::GetFlag(FLAGS_keys_file).empty()) {
    std::fprintf(stderr,
                 "erase_keys needs --servers, --table and --keys_file\n");
    return 2;
  }
  absl::StatusOr<std::vector<uint64_t>> keys =
      ReadKeys(absl::GetFlag(FLAGS_keys_file));
  if (!keys.ok()) {
    std::fprintf(stderr, "%s\n", std::string(keys.status().message()).c_str());
    return 2;
  }
  embedps::client::ClientOptions options;
  options.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',');
  options.security = embedps::security::ChannelSecurityFromFlags();
  absl::StatusOr<std::unique_ptr<embedps::client::Client>> client =
      embedps::client::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<embedps::client::TableHandle> table =
      (*client)->OpenTable(absl::GetFlag(FLAGS_table));
  if (!table.ok()) {
    std::fprintf(stderr, "%s\n", table.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::vector<uint64_t>> erased =
      (*client)->Erase(*table, *keys);
  if (!erased.ok()) {
    std::fprintf(stderr, "%s\n", erased.status().ToString().c_str());
    return 1;
  }
  uint64_t total = 0;
  for (size_t shard = 0; shard < erased->size(); ++shard) {
    std::printf("shard %zu: %llu rows erased\n", shard,
                static_cast<unsigned long long>((*erased)[shard]));
    total += (*erased)[shard];
  }
  std::printf("table '%s': %zu keys asked, %llu rows erased\n",
              table->name.c_str(), keys->size(),
              static_cast<unsigned long long>(total));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  embedps::SetProgramUsage(
      "erases the keys a file lists from a table on every training shard "
      "and prints the rows each removed.\n"
      "  erase_keys --servers=HOST:PORT,... --table=NAME --keys_file=FILE",
      {"tools/erase_keys.cc", embedps::security::kClientFlagsFile});
  absl::ParseCommandLine(argc, argv);
  return Run();
}
