#include "server/replicator.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/malloc_options.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "server/etcd_directory_client.h"
#include "wire/grpc_status.h"

namespace embedps::server {
namespace {

constexpr size_t kRowsPerChunk = 4096;
// A catch-up makes every write wait for the joiner once it is at most
// kCloseBehind writes behind the primary, or after kMaxDrainRounds rounds
// of working off what queued up (a joiner that cannot keep up).
constexpr uint64_t kCloseBehind = 16;
constexpr int kMaxDrainRounds = 20;

uint64_t DrawIncarnation() {
  std::mt19937_64 rng(std::random_device{}());
  uint64_t value = 0;
  while (value == 0) value = rng();
  return value;
}

bool Contains(const proto::ReplicaView& view, const std::string& member) {
  return std::find(view.in_sync().begin(), view.in_sync().end(), member) !=
         view.in_sync().end();
}

// A channel to another replica or the directory.
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const security::ChannelSecurity& security) {
  grpc::ChannelArguments args = security::ChannelArgumentsFor(security);
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, credentials, args);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Replicator>> Replicator::Create(
    ReplicationOptions options, TableRegistry* registry,
    PushDeduplicator* deduplicator, ShardCheckpointer* checkpointer,
    RpcMetrics* metrics, MemoryGuard* memory, ApplyForwarded apply_forwarded) {
  if (options.directory.empty() == options.control_plane.empty() ||
      options.shard < 0) {
    return absl::InvalidArgumentError(
        "replication needs the shard and either the directory's address or "
        "etcd's endpoints (not both)");
  }
  auto replicator = std::unique_ptr<Replicator>(
      new Replicator(std::move(options), registry, deduplicator, checkpointer,
                     metrics, memory, std::move(apply_forwarded)));
  ASSIGN_OR_RETURN(
      replicator->credentials_,
      security::MakeChannelCredentials(replicator->options_.security));
  const ReplicationOptions& o = replicator->options_;
  if (!o.control_plane.empty()) {
    control::EtcdOptions etcd;
    etcd.endpoints = o.control_plane;
    etcd.security = o.security;
    EtcdDirectoryOptions directory;
    directory.cluster_id = o.cluster_id;
    ASSIGN_OR_RETURN(replicator->directory_,
                     EtcdDirectoryClient::Connect(std::move(etcd), directory));
  } else {
    replicator->directory_ = NewGrpcDirectoryClient(
        o.directory,
        MakeChannel(o.directory, replicator->credentials_, o.security));
  }
  return replicator;
}

void Replicator::Run(const std::string& member) {
  if (!member.empty()) options_.member = member;
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

Replicator::Replicator(ReplicationOptions options, TableRegistry* registry,
                       PushDeduplicator* deduplicator,
                       ShardCheckpointer* checkpointer, RpcMetrics* metrics,
                       MemoryGuard* memory, ApplyForwarded apply_forwarded)
    : options_(std::move(options)),
      registry_(registry),
      deduplicator_(deduplicator),
      checkpointer_(checkpointer),
      metrics_(metrics),
      apply_forwarded_(std::move(apply_forwarded)),
      incarnation_(DrawIncarnation()),
      memory_(memory) {}

Replicator::~Replicator() {
  absl::flat_hash_map<std::string, std::shared_ptr<ReplicaSender>> senders;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    senders.swap(senders_);
  }
  changed_.SignalAll();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (catch_up_.joinable()) catch_up_.join();
  senders.clear();
}

void Replicator::HeartbeatLoop() {
  const auto log = Logger("replication");
  absl::Time last_warning = absl::InfinitePast();
  while (true) {
    absl::Duration lease;
    proto::HeartbeatRequest request;
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      lease = lease_;
      request.set_epoch(epoch_);
    }
    request.set_shard(options_.shard);
    request.set_member(options_.member);
    request.set_incarnation(incarnation_);
    const absl::Time sent = absl::Now();
    absl::StatusOr<proto::ReplicaView> view =
        directory_->Heartbeat(request, sent + lease / 2);
    if (view.ok()) {
      OnView(*view, sent);
    } else if (absl::Now() - last_warning > absl::Seconds(5)) {
      last_warning = absl::Now();
      log->warn("shard {}: {} did not answer: {}", options_.shard,
                directory_->Describe(), view.status().ToString());
    }
    MutexLock lock(&mu_);
    changed_.WaitWithTimeout(&mu_, lease / 5);
  }
}

void Replicator::Depose(const std::string& why) {
  if (role_ == Role::kDeposed) return;
  role_ = Role::kDeposed;
  Logger("replication")
      ->error("shard {}: replica {} leaves the shard: {}", options_.shard,
              options_.member, why);
  changed_.SignalAll();
  if (options_.on_deposed) {
    // Not under mu_: the callback may stop the process.
    std::thread([f = options_.on_deposed, why] { f(why); }).detach();
  }
}

void Replicator::OnView(const proto::ReplicaView& view, absl::Time sent) {
  MutexLock lock(&mu_);
  latest_view_ = view;
  if (view.lease_ms() > 0) lease_ = absl::Milliseconds(view.lease_ms());
  const bool me_primary = view.primary() == options_.member;
  switch (role_) {
    case Role::kStarting:
      if (me_primary) {
        role_ = Role::kPrimary;
        epoch_ = view.epoch();
        lineage_ = view.lineage();
        primary_ = options_.member;
        lease_until_ = sent + lease_;
        Logger("replication")
            ->info("shard {}: {} is the primary (epoch {})", options_.shard,
                   options_.member, epoch_);
      } else if (!view.primary().empty()) {
        role_ = Role::kJoining;
        catch_up_ = std::thread([this, view] { CatchUpLoop(view); });
      }
      break;
    case Role::kJoining:
      break;  // CatchUpLoop decides
    case Role::kBackup:
      if (me_primary && view.epoch() > epoch_) {
        role_ = Role::kPrimary;
        epoch_ = view.epoch();
        primary_ = options_.member;
        lease_until_ = sent + lease_;
        Logger("replication")
            ->info("shard {}: {} takes over as the primary (epoch {})",
                   options_.shard, options_.member, epoch_);
      } else if (Contains(view, options_.member)) {
        counted_in_sync_ = true;
      } else if (view.epoch() != epoch_ || counted_in_sync_) {
        Depose(
            absl::StrCat("the shard's view changed under this backup "
                         "(epoch ",
                         view.epoch(), ", primary ", view.primary(),
                         "): it must catch up again"));
      }
      break;
    case Role::kPrimary:
      if (me_primary && view.epoch() == epoch_) {
        lease_until_ = sent + lease_;
      } else {
        Depose(absl::StrCat("another replica is the primary now (epoch ",
                            view.epoch(), ": ", view.primary(), ")"));
      }
      break;
    case Role::kDeposed:
      break;
  }
  changed_.SignalAll();
}

void Replicator::CatchUpLoop(proto::ReplicaView view) {
  const auto log = Logger("replication");
  log->info("shard {}: {} catches up from {} (epoch {})", options_.shard,
            options_.member, view.primary(), view.epoch());
  uint64_t sequence = 0, lineage = 0;
  absl::Status status = FetchState(view, &sequence, &lineage);
  // The replica the view names may not know yet that it is the primary (a
  // failover under way), or may have lost its place: try the newest view a
  // few times before leaving.
  for (int attempt = 1;
       attempt < 10 && !status.ok() &&
       (absl::IsFailedPrecondition(status) || absl::IsUnavailable(status)) &&
       !absl::StrContains(status.message(), "holds rows");
       ++attempt) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      changed_.WaitWithTimeout(&mu_, lease_ / 4);
      view = latest_view_;
    }
    status = FetchState(view, &sequence, &lineage);
  }
  MutexLock lock(&mu_);
  if (stopping_) return;
  if (!status.ok()) {
    Depose(absl::StrCat("catching up from ", view.primary(),
                        " failed: ", status.message()));
    return;
  }
  log->info("shard {}: {} has the state of sequence {}; a backup now",
            options_.shard, options_.member, sequence);
  changed_.SignalAll();
}

absl::Status Replicator::FetchState(const proto::ReplicaView& view,
                                    uint64_t* sequence, uint64_t* lineage) {
  for (const TableRegistry::Entry& entry : registry_->List()) {
    if (entry.table->Stats().rows > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table '", entry.config->name(),
          "' holds rows here: a replica joins a shard empty (start it "
          "without --restore)"));
    }
  }
  auto stub = proto::Replication::NewStub(
      MakeChannel(view.primary(), credentials_, options_.security));
  grpc::ClientContext context;
  proto::CatchUpRequest request;
  request.set_epoch(view.epoch());
  request.set_member(options_.member);
  std::unique_ptr<grpc::ClientReader<proto::CatchUpChunk>> reader =
      stub->CatchUp(&context, request);
  proto::CatchUpChunk chunk;
  bool ended = false;
  TableRegistry::Entry current{};
  absl::Status status;
  std::vector<uint64_t> keys;
  while (status.ok() && reader->Read(&chunk)) {
    switch (chunk.part_case()) {
      case proto::CatchUpChunk::kTable: {
        const proto::CatchUpChunk::Table& table = chunk.table();
        absl::StatusOr<TableRegistry::CreateResult> created = registry_->Create(
            table.config(), std::numeric_limits<size_t>::max(),
            table.table_id());
        if (!created.ok()) {
          status = created.status();
          break;
        }
        absl::StatusOr<TableRegistry::Entry> entry =
            registry_->Find(table.table_id());
        if (!entry.ok()) {
          status = entry.status();
          break;
        }
        current = *entry;
        status = current.table->MergeAdmissionStates(
            {table.admission_state().begin(), table.admission_state().end()});
        if (status.ok() && current.synchronizer != nullptr) {
          status = current.synchronizer->ImportState(table.synchronizer());
        }
        break;
      }
      case proto::CatchUpChunk::kRows: {
        const proto::CatchUpChunk::Rows& rows = chunk.rows();
        if (current.table == nullptr || rows.table_id() != current.table_id ||
            rows.keys().size() % sizeof(uint64_t) != 0) {
          status = absl::DataLossError("rows out of place in the catch-up");
          break;
        }
        // The rows' records and their index entries.
        if (memory_ != nullptr) {
          status =
              memory_->Admit(rows.records().size() + rows.keys().size(), [&] {
                return absl::StrCat("catching up table '",
                                    current.config->name(), "' from ",
                                    view.primary());
              });
        }
        if (!status.ok()) break;
        keys.resize(rows.keys().size() / sizeof(uint64_t));
        std::memcpy(keys.data(), rows.keys().data(), rows.keys().size());
        status = current.table->RestoreRows(
            keys,
            absl::MakeConstSpan(rows.records().data(), rows.records().size()));
        break;
      }
      case proto::CatchUpChunk::kPushLog:
        deduplicator_->ImportApplied(
            chunk.push_log().client_id(),
            {chunk.push_log().sequence().data(),
             static_cast<size_t>(chunk.push_log().sequence_size())});
        break;
      case proto::CatchUpChunk::kEnd:
        ended = true;
        *sequence = chunk.end().sequence();
        *lineage = chunk.end().lineage();
        break;
      default:
        status = absl::DataLossError("an unknown part in the catch-up");
    }
    if (ended) break;
  }
  if (!status.ok()) {
    context.TryCancel();
    reader->Finish().ok();
    return status;
  }
  if (!ended) {
    const grpc::Status finish = reader->Finish();
    return finish.ok() ? absl::DataLossError("the catch-up ended early")
                       : wire::FromGrpcStatus(finish);
  }
  // The primary starts forwarding once we have read everything, and
  // finishes the call once we have applied what it forwarded meanwhile: be
  // a backup from here on.
  {
    MutexLock write_lock(&write_mu_);
    last_sequence_ = *sequence;
    MutexLock lock(&mu_);
    if (role_ == Role::kJoining) {
      role_ = Role::kBackup;
      epoch_ = view.epoch();
      lineage_ = *lineage;
      primary_ = view.primary();
    }
    changed_.SignalAll();
  }
  const grpc::Status finish = reader->Finish();
  // The received chunks and the restore's scratch: back to the kernel.
  ReturnFreedMemory();
  return finish.ok() ? absl::OkStatus() : wire::FromGrpcStatus(finish);
}

absl::Status Replicator::Write(absl::FunctionRef<proto::ReplicatedOp()> make_op,
                               absl::FunctionRef<absl::Status()> apply,
                               uint64_t* epoch) {
  proto::ReplicatedOp op = make_op();
  std::vector<std::shared_ptr<ReplicaSender>> required;
  uint64_t sequence = 0, accepted_in = 0;
  {
    MutexLock write_lock(&write_mu_);
    {
      MutexLock lock(&mu_);
      if (role_ != Role::kPrimary) {
        return absl::UnavailableError(
            absl::StrCat("shard ", options_.shard, ": ", options_.member,
                         " is not the primary (",
                         primary_.empty() ? "not known yet" : primary_, ")"));
      }
      if (absl::Now() >= lease_until_) {
        return absl::UnavailableError(
            absl::StrCat("shard ", options_.shard, ": the lease of primary ",
                         options_.member, " ran out"));
      }
      accepted_in = epoch_;
    }
    const absl::Time apply_start = absl::Now();
    RETURN_IF_ERROR(apply());
    const absl::Duration applied_in = absl::Now() - apply_start;
    sequence = ++last_sequence_;
    op.set_sequence(sequence);
    auto shared = std::make_shared<const proto::ReplicatedOp>(std::move(op));
    MutexLock lock(&mu_);
    for (auto& [member, sender] : senders_) {
      sender->Enqueue(shared, applied_in);
      if (sender->required()) required.push_back(sender);
    }
  }
  for (const std::shared_ptr<ReplicaSender>& sender : required) {
    if (!sender->WaitAcked(sequence)) {
      RETURN_IF_ERROR(ReportFailed(sender->member()));
    }
  }
  if (epoch != nullptr) *epoch = accepted_in;
  return absl::OkStatus();
}

absl::Status Replicator::ReportFailed(const std::string& member) {
  MutexLock report_lock(&report_mu_);
  proto::ReplicaReport report;
  std::shared_ptr<ReplicaSender> sender;
  {
    MutexLock lock(&mu_);
    auto it = senders_.find(member);
    if (it == senders_.end()) return absl::OkStatus();  // reported already
    sender = it->second;
    if (role_ != Role::kPrimary) {
      return absl::UnavailableError(absl::StrCat("shard ", options_.shard, ": ",
                                                 options_.member,
                                                 " is no longer the primary"));
    }
    report.set_epoch(epoch_);
  }
  report.set_shard(options_.shard);
  report.set_primary(options_.member);
  report.set_subject(member);
  report.set_kind(proto::ReplicaReport::FAILED);
  const absl::Status status =
      directory_->Report(report, absl::Now() + absl::Seconds(2)).status();
  MutexLock lock(&mu_);
  // NOT_FOUND: the directory never knew that replica (a CatchUp naming an
  // address that is not one): it was never counted in sync.
  if (!status.ok() && !absl::IsNotFound(status)) {
    Depose(absl::StrCat(
        "backup ", member, " failed (", sender->error(),
        ") and the directory did not record it: ", status.message()));
    return absl::UnavailableError(absl::StrCat(
        "shard ", options_.shard, ": backup ", member,
        " failed and could not be removed; the write is not acknowledged"));
  }
  Logger("replication")
      ->warn("shard {}: backup {} removed ({})", options_.shard, member,
             sender->error());
  senders_.erase(member);
  return absl::OkStatus();
}

absl::Status Replicator::CheckServes() {
  MutexLock lock(&mu_);
  if (role_ == Role::kPrimary && absl::Now() < lease_until_) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "shard ", options_.shard, ": ", options_.member, " is not the primary (",
      primary_.empty() ? "not known yet" : primary_, ")"));
}

uint64_t Replicator::lineage() {
  MutexLock lock(&mu_);
  return lineage_;
}

std::string Replicator::Incarnation() {
  const uint64_t shard_lineage = lineage();
  return shard_lineage == 0 ? std::string()
                            : absl::StrCat(absl::Hex(shard_lineage));
}

absl::Status Replicator::CheckLoad() {
  return absl::FailedPreconditionError(
      "Load refused: this shard is replicated; restore a replicated shard by "
      "starting one replica with --restore (the others join it empty and "
      "catch up)");
}

std::string Replicator::role() {
  MutexLock lock(&mu_);
  switch (role_) {
    case Role::kStarting:
      return "starting";
    case Role::kJoining:
      return "joining";
    case Role::kBackup:
      return "backup";
    case Role::kPrimary:
      return "primary";
    case Role::kDeposed:
      return "deposed";
  }
  return "";
}

uint64_t Replicator::epoch() {
  MutexLock lock(&mu_);
  return epoch_;
}

uint64_t Replicator::applied_sequence() {
  MutexLock lock(&write_mu_);
  return last_sequence_;
}

grpc::Status Replicator::Apply(const proto::ApplyRequest& request,
                               proto::ApplyResponse* response) {
  {
    // A replica that just caught up may hear from the primary before its
    // own bookkeeping is done: wait a little.
    MutexLock lock(&mu_);
    changed_.WaitUntil(&mu_, absl::Now() + options_.forward_timeout / 2,
                       [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                         return role_ != Role::kJoining;
                       });
    if (role_ != Role::kBackup || request.epoch() != epoch_ ||
        request.primary() != primary_) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("shard ", options_.shard, ": ", options_.member,
                       " does not take writes from ", request.primary(),
                       " of epoch ", request.epoch()));
    }
  }
  MutexLock write_lock(&write_mu_);
  for (const proto::ReplicatedOp& op : request.op()) {
    if (op.sequence() != last_sequence_ + 1) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("shard ", options_.shard, ": write ", op.sequence(),
                       " arrived after ", last_sequence_));
    }
    if (const absl::Status status = apply_forwarded_(op); !status.ok()) {
      // The primary applied it: this replica has diverged.
      MutexLock lock(&mu_);
      Depose(absl::StrCat("write ", op.sequence(),
                          " failed here: ", status.message()));
      return wire::ToGrpcStatus(status);
    }
    last_sequence_ = op.sequence();
  }
  response->set_applied_sequence(last_sequence_);
  return grpc::Status::OK;
}

grpc::Status Replicator::CatchUp(
    const proto::CatchUpRequest& request,
    grpc::ServerWriter<proto::CatchUpChunk>* writer) {
  struct TableState {
    proto::CatchUpChunk::Table table;
    std::unique_ptr<embedding::TableSnapshot> snapshot;
  };
  std::vector<TableState> tables;
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> applied;
  std::shared_ptr<ReplicaSender> sender;
  uint64_t sequence = 0, lineage = 0, copied_rows = 0;
  absl::Status taken;
  const absl::Time started = absl::Now();
  absl::Duration paused;
  {
    MutexLock write_lock(&write_mu_);
    {
      MutexLock lock(&mu_);
      if (role_ != Role::kPrimary || request.epoch() != epoch_) {
        return grpc::Status(
            grpc::StatusCode::FAILED_PRECONDITION,
            absl::StrCat("shard ", options_.shard, ": ", options_.member,
                         " is not the primary of epoch ", request.epoch()));
      }
      lineage = lineage_;
      sender = std::make_shared<ReplicaSender>(
          request.member(),
          MakeChannel(request.member(), credentials_, options_.security),
          epoch_, options_.member, options_.forward_timeout,
          options_.max_apply_bytes, /*active=*/false);
      senders_[request.member()] = sender;  // a previous one goes
    }
    checkpointer_->SnapshotOutsideCheckpoints([&] {
      for (const TableRegistry::Entry& entry : registry_->List()) {
        TableState& state = tables.emplace_back();
        state.table.set_table_id(entry.table_id);
        *state.table.mutable_config() = *entry.config;
        absl::StatusOr<std::unique_ptr<embedding::TableSnapshot>> snapshot =
            entry.table->TakeSnapshot(/*incremental=*/false);
        if (!snapshot.ok()) {
          taken.Update(snapshot.status());
          return;
        }
        state.snapshot = *std::move(snapshot);
        paused += state.snapshot->pause();
        for (const std::string& s : state.snapshot->admission_states()) {
          state.table.add_admission_state(s);
        }
        if (entry.synchronizer != nullptr) {
          *state.table.mutable_synchronizer() =
              entry.synchronizer->ExportState();
        }
      }
    });
    applied = deduplicator_->ExportApplied();
    sequence = last_sequence_;
  }
  auto drop_sender = [&] {
    MutexLock lock(&mu_);
    if (auto it = senders_.find(request.member());
        it != senders_.end() && it->second == sender) {
      senders_.erase(it);
    }
  };
  if (!taken.ok()) {
    drop_sender();
    return wire::ToGrpcStatus(taken);
  }
  bool written = true;
  for (TableState& state : tables) {
    proto::CatchUpChunk chunk;
    *chunk.mutable_table() = std::move(state.table);
    const uint32_t id = chunk.table().table_id();
    written = written && writer->Write(chunk);
    proto::CatchUpChunk rows;
    rows.mutable_rows()->set_table_id(id);
    auto flush = [&] {
      if (rows.rows().keys().empty()) return;
      written = written && writer->Write(rows);
      rows.mutable_rows()->clear_keys();
      rows.mutable_rows()->clear_records();
    };
    const size_t record_bytes = state.snapshot->record_bytes();
    const absl::Status visited = state.snapshot->ForEach(
        [&](uint64_t key, const char* record) -> absl::Status {
          if (!written) return absl::CancelledError("the joiner went away");
          if (record == nullptr) return absl::OkStatus();  // full: none
          ++copied_rows;
          rows.mutable_rows()->mutable_keys()->append(
              reinterpret_cast<const char*>(&key), sizeof(key));
          rows.mutable_rows()->mutable_records()->append(record, record_bytes);
          if (rows.rows().keys().size() >= kRowsPerChunk * sizeof(key)) {
            flush();
          }
          return absl::OkStatus();
        });
    flush();
    if (!visited.ok()) {
      drop_sender();
      return wire::ToGrpcStatus(visited);
    }
  }
  tables.clear();  // the copies of the rows (returned at the end)
  for (const auto& [client, sequences] : applied) {
    proto::CatchUpChunk chunk;
    chunk.mutable_push_log()->set_client_id(client);
    chunk.mutable_push_log()->mutable_sequence()->Add(sequences.begin(),
                                                      sequences.end());
    written = written && writer->Write(chunk);
  }
  proto::CatchUpChunk end;
  end.mutable_end()->set_sequence(sequence);
  end.mutable_end()->set_lineage(lineage);
  written = written && writer->Write(end);
  if (!written) {
    drop_sender();
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the catching-up replica went away");
  }
  const absl::Time streamed = absl::Now();
  // The writes after `sequence` follow. The joiner first works off what
  // queued up during the copy while the job's writes do not wait for it;
  // once it is close behind, every later write waits for it, and it counts
  // as in sync when it has every write up to then.
  sender->Activate();
  for (int round = 0; round < kMaxDrainRounds; ++round) {
    uint64_t now = 0;
    {
      MutexLock write_lock(&write_mu_);
      now = last_sequence_;
    }
    // The joiner has every write up to `sequence` (the copy) and those it
    // acknowledged since; with nothing written since, nothing is owed.
    const uint64_t has = std::max(sequence, sender->acked());
    if (now <= has + kCloseBehind) break;
    if (!sender->WaitAcked(now)) break;  // the wait below reports it
  }
  uint64_t target = 0;
  {
    MutexLock write_lock(&write_mu_);
    sender->set_required();
    target = last_sequence_;
  }
  if (target > sequence && !sender->WaitAcked(target)) {
    drop_sender();
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("the catching-up replica failed: ", sender->error()));
  }
  proto::ReplicaReport report;
  {
    MutexLock lock(&mu_);
    report.set_epoch(epoch_);
  }
  report.set_shard(options_.shard);
  report.set_primary(options_.member);
  report.set_subject(request.member());
  report.set_kind(proto::ReplicaReport::IN_SYNC);
  const absl::Status reported =
      directory_->Report(report, absl::Now() + absl::Seconds(2)).status();
  if (!reported.ok()) {
    drop_sender();
    return wire::ToGrpcStatus(reported);
  }
  Logger("replication")
      ->info(
          "shard {}: {} is in sync (sequence {}): copied {} rows in {:.2f} s "
          "({:.2f} s paused), then applied the {} writes made since in {:.2f} "
          "s",
          options_.shard, request.member(), target, copied_rows,
          absl::ToDoubleSeconds(streamed - started),
          absl::ToDoubleSeconds(paused), target - sequence,
          absl::ToDoubleSeconds(absl::Now() - streamed));
  // The copies of the rows and the writes held for the joiner during the
  // copy (hundreds of MB at full rate), freed by now: back to the kernel.
  ReturnFreedMemory();
  return grpc::Status::OK;
}

grpc::Status ReplicationServiceImpl::Apply(grpc::ServerContext*,
                                           const proto::ApplyRequest* request,
                                           proto::ApplyResponse* response) {
  return metrics_->Measure(RpcMethod::kReplicationApply, [&] {
    return replicator_->Apply(*request, response);
  });
}

grpc::Status ReplicationServiceImpl::CatchUp(
    grpc::ServerContext*, const proto::CatchUpRequest* request,
    grpc::ServerWriter<proto::CatchUpChunk>* writer) {
  return metrics_->Measure(RpcMethod::kReplicationCatchUp, [&] {
    return replicator_->CatchUp(*request, writer);
  });
}

}  // namespace embedps::server
