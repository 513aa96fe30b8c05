#include "server/publisher.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace embedps::server {
namespace {

uint64_t RandomId() {
  std::random_device device;
  const uint64_t id = (uint64_t{device()} << 32) ^ device() ^
                      static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  return id == 0 ? 1 : id;
}

std::string Bytes(const void* data, size_t size) {
  return std::string(static_cast<const char*>(data), size);
}

}  // namespace

Publisher::Publisher(PublisherOptions options, TableRegistry* registry)
    : options_(options), registry_(registry), id_(RandomId()) {}

Publisher::~Publisher() { Close(); }

void Publisher::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
  published_.SignalAll();
}

uint64_t Publisher::last_sequence() const {
  MutexLock lock(&mu_);
  return next_sequence_ - 1;
}

absl::StatusOr<std::vector<proto::Publication>> Publisher::Collect(
    const proto::PublishRequest& request) {
  std::vector<proto::Publication> parts(1);
  uint64_t part_bytes = request.dense_parameters().size();
  std::vector<std::pair<const embedding::Table*, std::weak_ptr<const void>>>
      newly_tracked;
  for (const TableRegistry::Entry& entry : registry_->List()) {
    embedding::Table& table = *entry.table;
    auto tracked = tracked_.find(entry.table);
    const bool first = tracked == tracked_.end() || tracked->second.expired() ||
                       tracked->second.lock() != entry.hold;
    table.EnableChangeLog();
    if (entry.synchronizer != nullptr) {
      // The steps before `request.step` applied (SYNC), or every worker
      // as far as the staleness allows (SSP).
      RETURN_IF_ERROR(entry.synchronizer->AwaitPullable(request.step()));
    }
    std::vector<uint64_t> keys = table.TakeChangedKeys();
    if (first) {
      // The table's first publication (or that of a table a restore
      // replaced): every row, so that a replica that starts from any
      // checkpoint reaches the training state. Changes after the take
      // above are in the next publication.
      keys.clear();
      RETURN_IF_ERROR(table.Scan(
          [&](const embedding::RowView& row) { keys.push_back(row.key); }));
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      newly_tracked.emplace_back(entry.table, entry.hold);
    }
    const size_t dim = table.spec().dim;
    // Split the table's rows over messages of at most max_message_bytes.
    const uint64_t row_bytes = sizeof(uint64_t) + dim * sizeof(float);
    const size_t rows_per_message = std::max<uint64_t>(
        1, options_.max_message_bytes / std::max<uint64_t>(row_bytes, 1));
    std::unique_ptr<bool[]> found(
        new bool[std::min(keys.size(), rows_per_message)]);
    size_t begin = 0;
    do {
      if (part_bytes > 0 &&
          part_bytes + row_bytes > options_.max_message_bytes) {
        parts.emplace_back();
        part_bytes = 0;
      }
      const size_t count = std::min(keys.size() - begin, rows_per_message);
      proto::PublishedTable* out = parts.back().add_table();
      *out->mutable_config() = *entry.config;
      // The rows are read straight into the message (their one copy); the
      // keys whose row is gone since it changed move to `removed`, the
      // rows after them down over their places.
      std::string& values = *out->mutable_values();
      values.resize(count * dim * sizeof(float));
      float* v = reinterpret_cast<float*>(values.data());
      RETURN_IF_ERROR(
          table
              .Lookup(absl::MakeConstSpan(keys).subspan(begin, count),
                      absl::MakeSpan(v, count * dim),
                      absl::MakeSpan(found.get(), count),
                      embedding::Table::MissingRows::kZeros)
              .status());
      std::vector<uint64_t> changed, removed;
      changed.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        if (!found[i]) {
          removed.push_back(keys[begin + i]);
          continue;
        }
        if (changed.size() != i) {
          std::memmove(v + changed.size() * dim, v + i * dim,
                       dim * sizeof(float));
        }
        changed.push_back(keys[begin + i]);
      }
      values.resize(changed.size() * dim * sizeof(float));
      out->set_keys(Bytes(changed.data(), changed.size() * sizeof(uint64_t)));
      out->set_removed(
          Bytes(removed.data(), removed.size() * sizeof(uint64_t)));
      part_bytes += count * row_bytes;
      begin += count;
    } while (begin < keys.size());
  }
  for (auto& [table, hold] : newly_tracked) tracked_[table] = std::move(hold);
  // Forget tables that are gone.
  absl::erase_if(tracked_, [](const auto& t) { return t.second.expired(); });
  return parts;
}

absl::StatusOr<proto::PublishResponse> Publisher::Publish(
    const proto::PublishRequest& request) {
  MutexLock publish_lock(&publish_mu_);
  ASSIGN_OR_RETURN(std::vector<proto::Publication> parts, Collect(request));
  const int64_t now = absl::ToUnixMicros(absl::Now());
  MutexLock lock(&mu_);
  const uint64_t sequence = next_sequence_++;
  // The first publication holds every row: it follows any checkpoint.
  const uint64_t previous_step = last_step_ == UINT64_MAX ? 0 : last_step_;
  last_step_ = request.step();
  Held held{sequence, request.step(), 0, {}};
  uint64_t rows = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    proto::Publication& part = parts[p];
    part.set_publisher_id(id_);
    part.set_shard_index(options_.shard_index);
    part.set_num_shards(options_.num_shards);
    part.set_sequence(sequence);
    part.set_step(request.step());
    part.set_previous_step(previous_step);
    part.set_published_unix_micros(now);
    part.set_part(static_cast<uint32_t>(p));
    part.set_parts(static_cast<uint32_t>(parts.size()));
    if (p == 0) *part.mutable_dense_parameters() = request.dense_parameters();
    for (const proto::PublishedTable& table : part.table()) {
      rows += table.keys().size() / sizeof(uint64_t) +
              table.removed().size() / sizeof(uint64_t);
    }
    held.bytes += part.ByteSizeLong();
    held.parts.push_back(
        std::make_shared<const proto::Publication>(std::move(part)));
  }
  history_bytes_ += held.bytes;
  history_.push_back(std::move(held));
  // The newest publication stays whatever its size.
  while (history_.size() > 1 && history_bytes_ > options_.history_bytes) {
    history_bytes_ -= history_.front().bytes;
    history_.pop_front();
  }
  published_.SignalAll();
  proto::PublishResponse response;
  response.set_publisher_id(id_);
  response.set_sequence(sequence);
  response.set_rows(rows);
  return response;
}

absl::StatusOr<std::vector<std::shared_ptr<const proto::Publication>>>
Publisher::After(uint64_t publisher_id, uint64_t after_sequence,
                 absl::Time deadline, uint64_t after_step) {
  if (publisher_id != 0 && publisher_id != id_) {
    return absl::FailedPreconditionError(
        absl::StrCat("publisher ", publisher_id,
                     " is gone (this shard restarted as publisher ", id_,
                     "): catch up from a checkpoint, then subscribe afresh"));
  }
  // A fresh subscriber skips the publications of steps it already holds.
  const bool skip_steps = publisher_id == 0 && after_step > 0;
  auto wanted = [&](const Held& held) {
    return held.sequence > after_sequence &&
           !(skip_steps && held.step <= after_step);
  };
  MutexLock lock(&mu_);
  published_.WaitUntil(&mu_, deadline, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return closed_ || (!history_.empty() && wanted(history_.back()));
  });
  if (closed_) return absl::CancelledError("the publisher is shutting down");
  std::vector<std::shared_ptr<const proto::Publication>> out;
  if (next_sequence_ - 1 <= after_sequence) return out;
  const uint64_t oldest =
      history_.empty() ? next_sequence_ : history_.front().sequence;
  if (publisher_id != 0 && after_sequence + 1 < oldest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "publications after ", after_sequence, " are gone (the history holds ",
        oldest, " to ", next_sequence_ - 1,
        "): catch up from a newer checkpoint, then subscribe afresh"));
  }
  for (const Held& held : history_) {
    if (!wanted(held)) continue;
    out.insert(out.end(), held.parts.begin(), held.parts.end());
  }
  return out;
}

}  // namespace embedps::server
