#include "checkpoint/format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace embedps::checkpoint {
namespace {

std::string MetaKey(absl::string_view suffix) {
  return absl::StrCat(std::string(kTableFileMetaPrefixBytes, '\xff'), suffix);
}

}  // namespace

std::string CheckpointName(uint64_t step) {
  return absl::StrFormat("%s%012d", kCheckpointPrefix, step);
}

bool IsCheckpointName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kCheckpointPrefix) || name.size() != 12) {
    return false;
  }
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

std::string ShardDirectoryName(int32_t shard, int32_t num_shards) {
  return absl::StrFormat("shard-%05d-of-%05d", shard, num_shards);
}

std::string TableFileStem(const std::string& table_name) {
  return absl::StrCat("t-", absl::StrReplaceAll(table_name, {{"/", "%2F"}}));
}

std::string TableFileName(const std::string& table) {
  return absl::StrCat(TableFileStem(table), ".sst");
}

// The NUL makes it sort before the other metadata keys; spelled with its
// length because a C string would end at it.
std::string TableFileInfoKey() {
  return MetaKey(absl::string_view("\0info", 5));
}

std::string TableFileStripeRowsKey() { return MetaKey("\x02stripe_rows"); }

std::string TableFileAdmissionPrefix() {
  return MetaKey(
      "\x01"
      "admission");
}

std::string TableFileAdmissionKey(uint32_t stripe) {
  const char index[4] = {
      static_cast<char>(stripe >> 24), static_cast<char>(stripe >> 16),
      static_cast<char>(stripe >> 8), static_cast<char>(stripe)};
  return absl::StrCat(TableFileAdmissionPrefix(), absl::string_view(index, 4));
}

}  // namespace embedps::checkpoint
