// Client's calls for a job's hot-row tier: HotKeys, ReadRows, WriteRows
// (contracts in client/client.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "common/status_macros.h"
#include "proto/training.grpc.pb.h"

namespace embedps::client {

using client_internal::RunParts;

namespace {

// Rows carry their optimizer state (several times an embedding's bytes):
// parts stay under this many bytes of records.
constexpr size_t kRecordBytesPerRequest = size_t{32} << 20;

// The bytes of one record of `table` implied by `bytes` for `keys`, or
// INVALID_ARGUMENT.
absl::StatusOr<size_t> RecordBytes(const TableHandle& table,
                                   absl::string_view op, size_t keys,
                                   size_t bytes, size_t flags) {
  if (keys == 0) return 0;
  if (bytes % keys != 0 || bytes / keys < 8 + sizeof(float) * table.dim ||
      (bytes / keys - 8) % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " of table '", table.name, "': ", bytes,
                     " bytes of records do not split into ", keys,
                     " records of dim ", table.dim));
  }
  if (flags != keys) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " of table '", table.name, "': ", keys, " keys but ",
                     flags, " flags"));
  }
  return bytes / keys;
}

// The keys' parts by shard, each under kRecordBytesPerRequest of records.
std::vector<client_internal::Part> RecordParts(absl::Span<const uint64_t> keys,
                                               int32_t shards, size_t max_keys,
                                               size_t record_bytes) {
  return client_internal::SplitByShard(
      keys, shards,
      std::min(max_keys,
               std::max<size_t>(1, kRecordBytesPerRequest / record_bytes)));
}

// The little-endian bytes of the keys at `rows`.
std::string PackedKeys(absl::Span<const uint64_t> keys,
                       const std::vector<uint32_t>& rows) {
  std::string bytes(rows.size() * sizeof(uint64_t), '\0');
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(bytes.data() + i * sizeof(uint64_t), &keys[rows[i]],
                sizeof(uint64_t));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<std::vector<Client::HotKey>> Client::HotKeys(
    const TableHandle& table, uint32_t count) {
  RETURN_IF_ERROR(impl_->CheckServers());
  std::vector<std::vector<HotKey>> by_shard(num_shards());
  RETURN_IF_ERROR(RunParts(num_shards(), [&](size_t shard) {
    proto::HotKeysRequest request;
    request.set_table_id(table.shard_table_ids[shard]);
    request.set_count(count);
    proto::HotKeysResponse response;
    RETURN_IF_ERROR(impl_->Call(
        static_cast<int32_t>(shard), "HotKeys",
        [&](Impl::Stubs& stub, grpc::ClientContext* context) {
          return stub.training->HotKeys(context, request, &response);
        }));
    const size_t n = response.keys().size() / sizeof(uint64_t);
    if (response.keys().size() != n * sizeof(uint64_t) ||
        response.access_counts().size() != n * sizeof(uint32_t)) {
      return absl::DataLossError(absl::StrCat(
          "HotKeys of table '", table.name, "': shard ", shard, " answered ",
          response.keys().size(), " bytes of keys and ",
          response.access_counts().size(), " of counts"));
    }
    for (size_t i = 0; i < n; ++i) {
      HotKey hot;
      std::memcpy(&hot.key, response.keys().data() + i * sizeof(uint64_t),
                  sizeof(uint64_t));
      std::memcpy(&hot.access_count,
                  response.access_counts().data() + i * sizeof(uint32_t),
                  sizeof(uint32_t));
      by_shard[shard].push_back(hot);
    }
    return absl::OkStatus();
  }));
  std::vector<HotKey> all;
  for (const std::vector<HotKey>& shard : by_shard) {
    all.insert(all.end(), shard.begin(), shard.end());
  }
  const auto better = [](const HotKey& a, const HotKey& b) {
    return a.access_count != b.access_count ? a.access_count > b.access_count
                                            : a.key < b.key;
  };
  std::sort(all.begin(), all.end(), better);
  if (all.size() > count) all.resize(count);
  return all;
}

absl::Status Client::ReadRows(const TableHandle& table,
                              absl::Span<const uint64_t> keys, uint64_t step,
                              absl::Span<char> records,
                              absl::Span<bool> found) {
  ASSIGN_OR_RETURN(const size_t record_bytes,
                   RecordBytes(table, "ReadRows", keys.size(), records.size(),
                               found.size()));
  if (keys.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(impl_->CheckServers());
  const std::vector<client_internal::Part> parts = RecordParts(
      keys, num_shards(), impl_->options.max_keys_per_request, record_bytes);
  return RunParts(parts.size(), [&](size_t p) {
    const client_internal::Part& part = parts[p];
    proto::ReadRowsRequest request;
    request.set_table_id(table.shard_table_ids[part.shard]);
    request.set_keys(PackedKeys(keys, part.rows));
    request.set_step(step);
    proto::ReadRowsResponse response;
    RETURN_IF_ERROR(impl_->Call(
        part.shard, "ReadRows",
        [&](Impl::Stubs& stub, grpc::ClientContext* context) {
          return stub.training->ReadRows(context, request, &response);
        }));
    if (response.records().size() != part.rows.size() * record_bytes ||
        response.found().size() != part.rows.size()) {
      return absl::DataLossError(absl::StrCat(
          "ReadRows of table '", table.name, "': shard ", part.shard,
          " answered ", response.records().size(), " bytes for ",
          part.rows.size(), " records of ", record_bytes,
          " bytes; the servers' table differs from this client's"));
    }
    for (size_t i = 0; i < part.rows.size(); ++i) {
      const size_t row = part.rows[i];
      std::memcpy(records.data() + row * record_bytes,
                  response.records().data() + i * record_bytes, record_bytes);
      found[row] = response.found()[i] != 0;
    }
    return absl::OkStatus();
  });
}

absl::Status Client::WriteRows(const TableHandle& table,
                               absl::Span<const uint64_t> keys,
                               absl::Span<const char> records, uint64_t step,
                               absl::Span<bool> written) {
  ASSIGN_OR_RETURN(const size_t record_bytes,
                   RecordBytes(table, "WriteRows", keys.size(), records.size(),
                               written.size()));
  if (keys.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(impl_->CheckServers());
  const std::vector<client_internal::Part> parts = RecordParts(
      keys, num_shards(), impl_->options.max_keys_per_request, record_bytes);
  return RunParts(parts.size(), [&](size_t p) {
    const client_internal::Part& part = parts[p];
    std::string mine_records(part.rows.size() * record_bytes, '\0');
    for (size_t i = 0; i < part.rows.size(); ++i) {
      std::memcpy(mine_records.data() + i * record_bytes,
                  records.data() + part.rows[i] * record_bytes, record_bytes);
    }
    proto::WriteRowsRequest request;
    request.set_table_id(table.shard_table_ids[part.shard]);
    request.set_keys(PackedKeys(keys, part.rows));
    request.set_records(std::move(mine_records));
    request.set_step(step);
    proto::WriteRowsResponse response;
    RETURN_IF_ERROR(impl_->Call(
        part.shard, "WriteRows",
        [&](Impl::Stubs& stub, grpc::ClientContext* context) {
          return stub.training->WriteRows(context, request, &response);
        }));
    if (response.written().size() != part.rows.size()) {
      return absl::DataLossError(
          absl::StrCat("WriteRows of table '", table.name, "': shard ",
                       part.shard, " answered ", response.written().size(),
                       " flags for ", part.rows.size(), " keys"));
    }
    for (size_t i = 0; i < part.rows.size(); ++i) {
      written[part.rows[i]] = response.written()[i] != 0;
    }
    return absl::OkStatus();
  });
}

}  // namespace embedps::client
