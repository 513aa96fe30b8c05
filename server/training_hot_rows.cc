// TrainingServiceImpl's calls for a job's hot-row tier: HotKeys, ReadRows
// and WriteRows (training.proto).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "embedding/table.h"
#include "server/key_checks.h"
#include "server/training_service.h"
#include "wire/grpc_status.h"

namespace embedps::server {
namespace {

// Bytes of one row's record in `table`.
size_t RecordBytes(const embedding::Table& table) {
  const embedding::TableSpec& spec = table.spec();
  return embedding::RowRecordBytes(
      spec.dim, embedding::OptimizerStateFloats(spec.optimizer, spec.dim));
}

}  // namespace

grpc::Status TrainingServiceImpl::ServedTable(uint32_t table_id,
                                              TableRegistry::Entry* entry) {
  if (absl::Status serves = writes_->CheckServes(); !serves.ok()) {
    return wire::ToGrpcStatus(serves);
  }
  absl::StatusOr<TableRegistry::Entry> found = registry_->Find(table_id);
  if (!found.ok()) {
    return rejections_.Reject(Rejection::kUnknownTable, found.status());
  }
  *entry = *std::move(found);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::TableAndKeys(uint32_t table_id,
                                               const std::string& key_bytes,
                                               TableRegistry::Entry* entry,
                                               std::vector<uint64_t>* keys) {
  absl::StatusOr<TableRegistry::Entry> found = registry_->Find(table_id);
  if (!found.ok()) {
    return rejections_.Reject(Rejection::kUnknownTable, found.status());
  }
  Rejection rejection;
  absl::StatusOr<std::vector<uint64_t>> parsed =
      ParseShardKeys(key_bytes, options_, &rejection);
  if (!parsed.ok()) return rejections_.Reject(rejection, parsed.status());
  *entry = *std::move(found);
  *keys = *std::move(parsed);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::HotKeys(grpc::ServerContext*,
                                          const proto::HotKeysRequest* request,
                                          proto::HotKeysResponse* response) {
  return metrics_->Measure(RpcMethod::kHotKeys, [&]() -> grpc::Status {
    TableRegistry::Entry entry;
    if (grpc::Status found = ServedTable(request->table_id(), &entry);
        !found.ok()) {
      return found;
    }
    if (request->count() == 0) {
      return rejections_.Reject(
          Rejection::kEmptyRequest,
          absl::InvalidArgumentError("HotKeys of no key: count is 0"));
    }
    // The `count` best (count, key) pairs, in a heap whose top is the
    // worst kept: more pulls first, then the smaller key.
    using Ranked = std::pair<uint32_t, uint64_t>;
    const auto better = [](const Ranked& a, const Ranked& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    std::vector<Ranked> heap;
    // At most what a request may carry: the caller asks the keys' rows next.
    const size_t count =
        std::min<uint64_t>(request->count(), options_.max_keys_per_request);
    heap.reserve(count);
    const absl::Status scanned =
        entry.table->Scan([&](const embedding::RowView& row) {
          const Ranked ranked(row.access_count, row.key);
          if (heap.size() < count) {
            heap.push_back(ranked);
            std::push_heap(heap.begin(), heap.end(), better);
          } else if (better(ranked, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), better);
            heap.back() = ranked;
            std::push_heap(heap.begin(), heap.end(), better);
          }
        });
    if (!scanned.ok()) return wire::ToGrpcStatus(scanned);
    std::sort(heap.begin(), heap.end(), better);
    std::string keys(heap.size() * sizeof(uint64_t), '\0');
    std::string counts(heap.size() * sizeof(uint32_t), '\0');
    for (size_t i = 0; i < heap.size(); ++i) {
      std::memcpy(keys.data() + i * sizeof(uint64_t), &heap[i].second,
                  sizeof(uint64_t));
      std::memcpy(counts.data() + i * sizeof(uint32_t), &heap[i].first,
                  sizeof(uint32_t));
    }
    response->set_keys(std::move(keys));
    response->set_access_counts(std::move(counts));
    return grpc::Status::OK;
  });
}

grpc::Status TrainingServiceImpl::ReadRows(
    grpc::ServerContext*, const proto::ReadRowsRequest* request,
    proto::ReadRowsResponse* response) {
  return metrics_->Measure(RpcMethod::kReadRows, [&]() -> grpc::Status {
    if (absl::Status serves = writes_->CheckServes(); !serves.ok()) {
      return wire::ToGrpcStatus(serves);
    }
    TableRegistry::Entry entry;
    std::vector<uint64_t> keys;
    if (grpc::Status found =
            TableAndKeys(request->table_id(), request->keys(), &entry, &keys);
        !found.ok()) {
      return found;
    }
    const size_t record_bytes = RecordBytes(*entry.table);
    const uint64_t response_bytes = keys.size() * (record_bytes + 1);
    if (response_bytes > options_.max_response_bytes) {
      return rejections_.Reject(
          Rejection::kOverLimit,
          absl::ResourceExhaustedError(absl::StrCat(
              "a ReadRows of ", keys.size(), " keys answers ", response_bytes,
              " bytes; this server sends at most ", options_.max_response_bytes,
              " in one response (--max_message_bytes): split the batch")));
    }
    if (absl::Status room = memory_->Admit(
            response_bytes,
            [&] {
              return absl::StrCat("a ReadRows of ", keys.size(), " keys");
            });
        !room.ok()) {
      return rejections_.Reject(Rejection::kOverLimit, room);
    }
    if (entry.synchronizer != nullptr) {
      if (absl::Status pullable =
              entry.synchronizer->AwaitPullable(request->step());
          !pullable.ok()) {
        return wire::ToGrpcStatus(pullable);
      }
    }
    std::string records(keys.size() * record_bytes, '\0');
    std::unique_ptr<bool[]> found(new bool[keys.size()]());
    absl::StatusOr<uint64_t> read = entry.table->ReadRecords(
        keys, absl::MakeSpan(records.data(), records.size()),
        absl::MakeSpan(found.get(), keys.size()));
    if (!read.ok()) return wire::ToGrpcStatus(read.status());
    std::string flags(keys.size(), '\0');
    for (size_t i = 0; i < keys.size(); ++i) flags[i] = found[i] ? 1 : 0;
    response->set_records(std::move(records));
    response->set_found(std::move(flags));
    return grpc::Status::OK;
  });
}

grpc::Status TrainingServiceImpl::WriteRowsImpl(
    const proto::WriteRowsRequest& request,
    proto::WriteRowsResponse* response) {
  TableRegistry::Entry entry;
  std::vector<uint64_t> keys;
  if (grpc::Status found =
          TableAndKeys(request.table_id(), request.keys(), &entry, &keys);
      !found.ok()) {
    return found;
  }
  const size_t record_bytes = RecordBytes(*entry.table);
  if (request.records().size() != keys.size() * record_bytes) {
    return rejections_.Reject(
        Rejection::kSizeMismatch,
        absl::InvalidArgumentError(absl::StrCat(
            "WriteRows of table '", entry.table->spec().name,
            "': ", keys.size(), " keys need ", keys.size() * record_bytes,
            " bytes of records (", record_bytes, " each), got ",
            request.records().size())));
  }
  std::unique_ptr<bool[]> written(new bool[keys.size()]());
  embedding::AccessContext context;
  context.step = request.step();
  absl::StatusOr<uint64_t> count = entry.table->WriteRecords(
      keys, request.records(), absl::MakeSpan(written.get(), keys.size()),
      context);
  if (!count.ok()) {
    // Repeated keys or floats that are not finite: nothing was written.
    return rejections_.Reject(Rejection::kNonFinite, count.status());
  }
  std::string flags(keys.size(), '\0');
  for (size_t i = 0; i < keys.size(); ++i) flags[i] = written[i] ? 1 : 0;
  response->set_written(std::move(flags));
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::WriteRows(
    grpc::ServerContext*, const proto::WriteRowsRequest* request,
    proto::WriteRowsResponse* response) {
  return WriteInOrder(
      RpcMethod::kWriteRows,
      [&] {
        proto::ReplicatedOp op;
        *op.mutable_write_rows() = *request;
        return op;
      },
      [&] { return WriteRowsImpl(*request, response); });
}

}  // namespace embedps::server
