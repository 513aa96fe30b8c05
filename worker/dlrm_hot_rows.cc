// DlrmWorker's hot-row tier (worker/hot_rows.h): set-up, refreshes of the
// hot set, write-backs (docs/architecture.md "Hot rows").
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/process_memory.h"
#include "common/status_macros.h"
#include "server/table_config.h"
#include "worker/dlrm_worker.h"

namespace embedps::worker::dlrm_internal {
namespace {

// Defaults of WorkerConfig.hot_rows_refresh_steps and _warmup_steps.
constexpr int64_t kDefaultRefreshSteps = 1000;
constexpr int64_t kDefaultWarmupSteps = 50;

// Rank 0's `keys` on every rank (their bits travel as floats: a broadcast
// copies, it adds nothing).
absl::Status BroadcastKeys(dense::Communicator& communicator,
                           std::vector<uint64_t>& keys) {
  float count[2];
  const uint64_t n = keys.size();
  std::memcpy(count, &n, sizeof(n));
  RETURN_IF_ERROR(communicator.Broadcast(absl::MakeSpan(count, 2), 0));
  uint64_t received;
  std::memcpy(&received, count, sizeof(received));
  std::vector<float> bits(received * 2);
  if (communicator.rank() == 0) {
    std::memcpy(bits.data(), keys.data(), received * sizeof(uint64_t));
  }
  RETURN_IF_ERROR(communicator.Broadcast(absl::MakeSpan(bits), 0));
  keys.resize(received);
  std::memcpy(keys.data(), bits.data(), received * sizeof(uint64_t));
  return absl::OkStatus();
}

}  // namespace

absl::Status DlrmWorker::SetupHotRows() {
  const int64_t per_table = c_.hot_rows_per_table();
  if (per_table <= 0) return absl::OkStatus();
  if (o_.job.world_size > 1 && communicator_->buffers_on_device()) {
    return absl::FailedPreconditionError(
        "hot_rows_per_table (--hot_rows) with several CUDA workers: their "
        "collectives (NCCL) take device memory, and the tier's sums are on "
        "the host; run one worker per job with the tier, or none");
  }
  if (per_table > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot_rows_per_table (--hot_rows) is ", per_table,
                     "; at most 2^31 - 1 rows a table"));
  }
  std::vector<embedding::TableSpec> specs;
  uint64_t bytes = 0;
  std::vector<std::string> kept_out;
  for (const proto::TableConfig& config : c_.table()) {
    ASSIGN_OR_RETURN(embedding::TableSpec spec, server::SpecFromConfig(config));
    // Rows the servers may drop on their own stay with the servers (the
    // tier would not see them go).
    const bool eligible = spec.eviction.ttl == 0 && spec.eviction.max_rows == 0;
    hot_table_.push_back(eligible);
    if (eligible) {
      bytes += static_cast<uint64_t>(per_table) * HotRows::BytesPerRow(spec);
    } else {
      kept_out.push_back(spec.name);
    }
    specs.push_back(std::move(spec));
  }
  const uint64_t available = AvailableMemoryBytes();
  if (available > 0 && bytes > available / 2) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hot_rows_per_table (--hot_rows) = ", per_table, " needs up to ", bytes,
        " bytes of worker memory for the tier; this host has ", available,
        " available and the tier may take half: lower it"));
  }
  if (!kept_out.empty()) {
    log_->info(
        "worker {}: the hot-row tier leaves out the tables with a "
        "TTL or max_rows: {}",
        o_.job.rank, absl::StrJoin(kept_out, ", "));
  }
  hot_ = std::make_unique<HotRows>(
      specs, static_cast<int>(
                 std::clamp(std::thread::hardware_concurrency(), 1u, 8u)));
  hot_refresh_steps_ = c_.hot_rows_refresh_steps() > 0
                           ? c_.hot_rows_refresh_steps()
                           : kDefaultRefreshSteps;
  hot_warmup_steps_ = c_.hot_rows_warmup_steps() > 0
                          ? c_.hot_rows_warmup_steps()
                          : kDefaultWarmupSteps;
  log_->info(
      "worker {}: hot-row tier of up to {} rows a table ({} bytes), "
      "chosen again every {} steps",
      o_.job.rank, per_table, bytes, hot_refresh_steps_);
  return absl::OkStatus();
}

absl::Status DlrmWorker::WriteBackHotRows(int64_t step, DlrmJobResult& result) {
  if (hot_ == nullptr) return absl::OkStatus();
  AwaitHotApply();
  const absl::Time start = absl::Now();
  uint64_t lost = 0;
  std::vector<uint64_t> keys;
  std::vector<char> records;
  for (int t = 0; t < hot_->num_tables(); ++t) {
    // Only the rows the tier used: the others hold what their shard holds,
    // and a row written counts as changed (incremental checkpoints,
    // publications).
    hot_->UsedRecords(t, keys, records);
    if (keys.empty()) continue;
    std::unique_ptr<bool[]> written(new bool[keys.size()]());
    if (absl::Status s = client_->WriteRows(
            handles_[t], keys, records, static_cast<uint64_t>(step),
            absl::MakeSpan(written.get(), keys.size()));
        !s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("writing the hot rows of table '", table_names_[t],
                       "' back at step ", step, ": ", s.message()));
    }
    for (size_t i = 0; i < keys.size(); ++i) lost += written[i] ? 0 : 1;
    // The servers counted the tier's uses: they start over.
    hot_->ClearCounts(t);
  }
  if (lost > 0) {
    // Erased (or evicted) on their shard since the tier read them: they
    // stay gone, and leave the tier at its next refresh.
    log_->info(
        "worker {}: {} hot rows were erased on their shards; not "
        "written back",
        o_.job.rank, lost);
  }
  result.hot_rows_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

absl::Status DlrmWorker::RefreshHotRows(int64_t step, DlrmJobResult& result) {
  AwaitHotApply();
  const absl::Time start = absl::Now();
  const bool several = o_.job.world_size > 1;
  if (o_.job.rank == 0) RETURN_IF_ERROR(WriteBackHotRows(step, result));
  // No rank reads before the write-back is in.
  if (several) RETURN_IF_ERROR(communicator_->Barrier());
  size_t held = 0;
  for (int t = 0; t < hot_->num_tables(); ++t) {
    std::vector<uint64_t> keys;
    if (o_.job.rank == 0 && hot_table_[t]) {
      ASSIGN_OR_RETURN(
          std::vector<client::Client::HotKey> hot,
          client_->HotKeys(handles_[t],
                           static_cast<uint32_t>(c_.hot_rows_per_table())));
      for (const client::Client::HotKey& k : hot) keys.push_back(k.key);
    }
    if (several) RETURN_IF_ERROR(BroadcastKeys(*communicator_, keys));
    const size_t record_bytes = hot_->record_bytes(t);
    std::vector<char> records(keys.size() * record_bytes);
    std::unique_ptr<bool[]> found(new bool[keys.size()]());
    RETURN_IF_ERROR(client_->ReadRows(
        handles_[t], keys, static_cast<uint64_t>(step), absl::MakeSpan(records),
        absl::MakeSpan(found.get(), keys.size())));
    // Keys erased since rank 0 chose them are left out.
    size_t kept = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!found[i]) continue;
      keys[kept] = keys[i];
      std::memmove(records.data() + kept * record_bytes,
                   records.data() + i * record_bytes, record_bytes);
      ++kept;
    }
    keys.resize(kept);
    records.resize(kept * record_bytes);
    held += kept;
    RETURN_IF_ERROR(hot_->Assign(t, std::move(keys), records));
  }
  result.hot_rows_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  log_->info("worker {}: step {}: the hot-row tier holds {} rows ({:.2f} s)",
             o_.job.rank, step, held,
             absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

bool DlrmWorker::HotRowsRefreshDue(int64_t step) const {
  return hot_ != nullptr && step < total_steps_ &&
         (step == start_step_ + hot_warmup_steps_ ||
          step % hot_refresh_steps_ == 0);
}

absl::StatusOr<std::unique_ptr<PreparedStep>> DlrmWorker::Reprepare(
    std::unique_ptr<PreparedStep> step, uint64_t pull_step) {
  RETURN_IF_ERROR(AwaitPulls(*step));
  data::SchemaBatch batch = std::move(step->batch);
  Recycle(std::move(step));
  return Prepare(std::move(batch), pull_step);
}

}  // namespace embedps::worker::dlrm_internal
