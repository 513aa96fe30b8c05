#include "server/follower.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/format.h"
#include "checkpoint/manifest.h"
#include "checkpoint/table_file.h"
#include "common/file_io.h"
#include "common/key_hash.h"
#include "common/logging.h"
#include "common/malloc_options.h"
#include "common/status_macros.h"
#include "common/thread_priority.h"
#include "embedding/table.h"
#include "grpcpp/grpcpp.h"
#include "proto/checkpoint.pb.h"
#include "proto/serving.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.grpc.pb.h"
#include "server/checkpointer.h"
#include "server/table_config.h"

namespace embedps::server {
// One training shard: its replicas ("a|b": a replicated shard), of which
// the subscription follows the one that serves it (the primary).
struct Follower::Source {
  int32_t shard = 0;
  std::string address;  // as given, for messages
  // With find_primary: the primary found last (one replica, one stub).
  std::vector<std::string> replicas;
  std::vector<std::unique_ptr<proto::TrainingService::Stub>> stubs;
  size_t current = 0;      // FollowStream's thread only
  std::string find_error;  // the last find_primary error, logged once
  Mutex mu;
  grpc::ClientContext* active ABSL_GUARDED_BY(mu) = nullptr;
};

namespace {

// A publication's rows of one table, kept to this serving shard's keys.
struct TableRows {
  proto::TableConfig config;
  std::vector<uint64_t> keys;
  std::vector<float> values;
  std::vector<uint64_t> removed;
};

}  // namespace

Follower::Follower(FollowerOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Follower>> Follower::Start(
    FollowerOptions options) {
  if (options.checkpoint_root.empty()) {
    return absl::InvalidArgumentError(
        "a serving replica needs the checkpoint root it follows");
  }
  if (options.num_shards < 1 || options.shard_index < 0 ||
      options.shard_index >= options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("serving shard ", options.shard_index, " must be in [0, ",
                     options.num_shards, ")"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   security::MakeChannelCredentials(options.security));
  std::unique_ptr<Follower> follower(new Follower(std::move(options)));
  const FollowerOptions& o = follower->options_;
  std::string path;
  if (o.pinned_step > 0) {
    path = (std::filesystem::path(o.checkpoint_root) /
            checkpoint::CheckpointName(o.pinned_step))
               .string();
  }
  std::string name;
  std::shared_ptr<const ServingVersion> base;
  if (!path.empty()) {
    ASSIGN_OR_RETURN(base, follower->LoadCheckpoint(path, &name));
  } else {
    ASSIGN_OR_RETURN(const Candidates candidates, follower->ListCandidates());
    ASSIGN_OR_RETURN(base, follower->LoadNewest(0, candidates, &name));
  }
  std::vector<std::string> reports;
  {
    MutexLock lock(&follower->mu_);
    reports.assign(follower->bad_checkpoints_.begin(),
                   follower->bad_checkpoints_.end());
  }
  {
    MutexLock lock(&follower->apply_mu_);
    follower->base_step_ = base->step;
    follower->base_name_ = name;
    follower->Install(std::move(base));
  }
  // What the load allocated on the way (read batches, the files' blocks):
  // back to the kernel (malloc_options.h).
  ReturnFreedMemory();
  if (!reports.empty()) {
    follower->SetError(
        absl::StrCat("serving checkpoint ", name,
                     "; passed over: ", absl::StrJoin(reports, "; ")));
  }
  if (o.pinned_step > 0) return follower;
  follower->threads_.emplace_back(
      [f = follower.get()] { f->PollCheckpoints(); });
  grpc::ChannelArguments args = security::ChannelArgumentsFor(o.security);
  args.SetMaxReceiveMessageSize(o.max_message_bytes);
  follower->channel_credentials_ = credentials;
  follower->channel_args_ = args;
  if (o.find_primary) {
    if (!o.training_servers.empty() || o.training_shards < 1) {
      return absl::InvalidArgumentError(
          "a serving replica that finds the training primaries in the "
          "control plane needs their shard count and no training servers");
    }
    for (int32_t shard = 0; shard < o.training_shards; ++shard) {
      auto source = std::make_unique<Source>();
      source->shard = shard;
      source->address = absl::StrCat("training shard ", shard);
      follower->sources_.push_back(std::move(source));
    }
  }
  for (const std::string& address : o.training_servers) {
    auto source = std::make_unique<Source>();
    source->shard = static_cast<int32_t>(follower->sources_.size());
    source->address = address;
    for (absl::string_view replica :
         absl::StrSplit(address, '|', absl::SkipEmpty())) {
      source->replicas.emplace_back(replica);
      source->stubs.push_back(proto::TrainingService::NewStub(
          grpc::CreateCustomChannel(std::string(replica), credentials, args)));
    }
    if (source->stubs.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("training server '", address, "' names no address"));
    }
    follower->sources_.push_back(std::move(source));
  }
  for (size_t s = 0; s < follower->sources_.size(); ++s) {
    follower->threads_.emplace_back(
        [f = follower.get(), s] { f->FollowStream(s); });
  }
  return follower;
}

Follower::~Follower() {
  stopping_ = true;
  for (auto& source : sources_) {
    MutexLock lock(&source->mu);
    if (source->active != nullptr) source->active->TryCancel();
  }
  {
    MutexLock lock(&stop_mu_);
    stop_cv_.SignalAll();
  }
  for (std::thread& thread : threads_) thread.join();
}

void Follower::Install(std::shared_ptr<const ServingVersion> version) {
  made_.push_back(version);
  MutexLock lock(&mu_);
  last_error_.clear();  // following again
  current_ = version;
  retained_.push_back(std::move(version));
  while (retained_.size() > std::max<size_t>(options_.retained_versions, 1)) {
    retained_.pop_front();
  }
  changed_.SignalAll();
}

void Follower::SetError(std::string error) {
  Logger("follower")->warn("{}", error);
  MutexLock lock(&mu_);
  last_error_ = std::move(error);
}

std::shared_ptr<const ServingVersion> Follower::Current() const {
  MutexLock lock(&mu_);
  return current_;
}

absl::StatusOr<std::shared_ptr<const ServingVersion>> Follower::AtStep(
    uint64_t step, absl::Duration wait) const {
  MutexLock lock(&mu_);
  const auto find = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::shared_ptr<const ServingVersion> hit;
    for (const auto& v : retained_) {
      if (v->step == step) hit = v;  // the newest of that step
    }
    return hit;
  };
  if (!retained_.empty() && step < retained_.front()->step) {
    return absl::FailedPreconditionError(
        absl::StrCat("version ", step, " is no longer held (the oldest is ",
                     retained_.front()->step, ")"));
  }
  std::shared_ptr<const ServingVersion> hit;
  changed_.WaitUntil(&mu_, absl::Now() + wait,
                     [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                       hit = find();
                       return hit != nullptr;
                     });
  if (hit == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("version ", step, " is not held here (serving ",
                     current_ == nullptr ? 0 : current_->step, ")"));
  }
  return hit;
}

proto::ServingVersionResponse Follower::Describe() const {
  proto::ServingVersionResponse out;
  {
    MutexLock lock(&mu_);
    if (current_ != nullptr) {
      out.set_step(current_->step);
      out.set_published_unix_micros(current_->published_unix_micros);
      out.set_has_dense_model(current_->dense_parameters != nullptr);
      out.set_dense_step(current_->dense_step);
      for (const auto& [name, table] : current_->tables) {
        out.set_overlays(std::max<uint32_t>(
            out.overlays(), static_cast<uint32_t>(table->overlays().size())));
      }
    }
    for (const auto& v : retained_) out.add_retained_steps(v->step);
    out.set_last_error(last_error_);
    for (const std::string& report : bad_checkpoints_) {
      out.add_bad_checkpoints(report);
    }
  }
  MutexLock lock(&apply_mu_);
  out.set_base_checkpoint(base_name_);
  out.set_base_step(base_step_);
  out.set_publications_applied(publications_applied_);
  out.set_publications_passed_over(publications_passed_over_);
  out.set_checkpoints_loaded(loads_.load());
  out.set_increments_applied(increments_applied_.load());
  out.set_pinned(options_.pinned_step > 0);
  return out;
}

void Follower::PollCheckpoints() {
  // Background work (Lookups wait on it for nothing): the cores go to
  // them when both want them.
  ToBackgroundPriority();
  while (!stopping_) {
    {
      MutexLock lock(&stop_mu_);
      stop_cv_.WaitWithTimeout(&stop_mu_, options_.checkpoint_poll);
    }
    if (stopping_) break;
    // Only a checkpoint newer than everything served replaces the base:
    // with a healthy stream the replica is ahead of every checkpoint.
    absl::StatusOr<Candidates> candidates = ListCandidates();
    if (!candidates.ok()) continue;
    absl::StatusOr<bool> applied =
        ApplyNewestIncrement(Current()->step, *candidates);
    if (applied.ok() && *applied) continue;
    if (!applied.ok()) {
      Logger("follower")
          ->warn(
              "an incremental checkpoint could not be applied in place "
              "({}); loading the newest whole",
              applied.status().ToString());
    }
    std::string name;
    absl::StatusOr<std::shared_ptr<const ServingVersion>> loaded =
        LoadNewest(Current()->step, *candidates, &name);
    if (!loaded.ok()) continue;
    MutexLock lock(&apply_mu_);
    if ((*loaded)->step <= Current()->step) continue;  // the stream overtook
    base_step_ = (*loaded)->step;
    base_name_ = name;
    if (needs_checkpoint_at_ != 0 && base_step_ >= needs_checkpoint_at_) {
      needs_checkpoint_at_ = 0;
    }
    Install(*std::move(loaded));
    ResubscribeAll();
    Logger("follower")
        ->info("serving checkpoint '{}' (step {})", name, base_step_);
    // The base this one replaced (once no Lookup holds it) and what its
    // load allocated on the way: back to the kernel (malloc_options.h).
    ReturnFreedMemory();
  }
}

void Follower::ResubscribeAll() {
  ++rebased_;
  for (auto& source : sources_) {
    MutexLock lock(&source->mu);
    if (source->active != nullptr) source->active->TryCancel();
  }
}

void Follower::FollowStream(size_t index) {
  ToBackgroundPriority();
  Source& source = *sources_[index];
  uint64_t publisher_id = 0, after = 0;
  uint64_t rebased = rebased_.load();
  while (!stopping_) {
    if (const uint64_t now = rebased_.load(); now != rebased) {
      rebased = now;
      publisher_id = 0;
      after = 0;
    }
    bool waiting = false;
    {
      // After a gap, wait until a new enough checkpoint is the base.
      MutexLock lock(&apply_mu_);
      waiting = needs_checkpoint_at_ != 0;
    }
    if (waiting) {
      MutexLock stop(&stop_mu_);
      stop_cv_.WaitWithTimeout(&stop_mu_, absl::Milliseconds(200));
      continue;
    }
    if (options_.find_primary && !FindPrimary(source)) {
      MutexLock stop(&stop_mu_);
      stop_cv_.WaitWithTimeout(&stop_mu_, absl::Milliseconds(200));
      continue;
    }
    grpc::ClientContext context;
    {
      MutexLock lock(&source.mu);
      if (stopping_) break;
      source.active = &context;
    }
    proto::SubscribeRequest request;
    request.set_publisher_id(publisher_id);
    request.set_after_sequence(after);
    if (publisher_id == 0) {
      // Afresh: the publications after the base's step (older ones hold
      // nothing the base lacks; the history may hold hundreds of MB).
      MutexLock lock(&apply_mu_);
      request.set_after_step(base_step_);
    }
    std::unique_ptr<grpc::ClientReader<proto::Publication>> reader =
        source.stubs[source.current]->Subscribe(&context, request);
    bool first = publisher_id == 0;
    std::vector<proto::Publication> parts;
    proto::Publication message;
    while (reader->Read(&message)) {
      if (!parts.empty() && message.sequence() != parts.front().sequence()) {
        parts.clear();  // an incomplete publication: cannot happen in order
      }
      parts.push_back(std::move(message));
      if (parts.size() < parts.front().parts()) continue;
      bool gap = false;
      absl::Status applied = Apply(parts, first, &gap);
      if (gap) {
        publisher_id = 0;
        after = 0;
        context.TryCancel();
        break;
      }
      if (!applied.ok()) {
        SetError(absl::StrCat("publication ", parts.front().sequence(), " of ",
                              source.address,
                              " not applied: ", applied.ToString()));
      }
      first = false;
      publisher_id = parts.front().publisher_id();
      after = parts.front().sequence();
      parts.clear();
    }
    const grpc::Status status = reader->Finish();
    {
      MutexLock lock(&source.mu);
      source.active = nullptr;
    }
    if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // The publisher restarted or dropped what we need: subscribe afresh
      // (the gap check then decides whether a checkpoint must come first).
      publisher_id = 0;
      after = 0;
    }
    if (!status.ok() && !stopping_ &&
        status.error_code() != grpc::StatusCode::CANCELLED) {
      Logger("follower")
          ->info("the publication stream of {} ended: {}",
                 source.replicas[source.current], status.error_message());
    }
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        source.stubs.size() > 1) {
      // Not (or no longer) the primary, or down: the shard's next replica.
      source.current = (source.current + 1) % source.stubs.size();
    }
    if (stopping_) break;
    MutexLock stop(&stop_mu_);
    stop_cv_.WaitWithTimeout(&stop_mu_, absl::Milliseconds(200));
  }
}

bool Follower::FindPrimary(Source& source) {
  absl::StatusOr<std::string> primary = options_.find_primary(source.shard);
  if (!primary.ok()) {
    if (primary.status().ToString() != source.find_error) {
      source.find_error = primary.status().ToString();
      Logger("follower")
          ->info("the primary of training shard {} is not known now: {}",
                 source.shard, source.find_error);
    }
    return false;
  }
  source.find_error.clear();
  if (source.replicas.empty() || source.replicas[0] != *primary) {
    source.replicas = {*primary};
    source.stubs.clear();
    source.stubs.push_back(
        proto::TrainingService::NewStub(grpc::CreateCustomChannel(
            *primary, channel_credentials_, channel_args_)));
    source.current = 0;
  }
  return true;
}

absl::Status Follower::TEST_Apply(
    const std::vector<proto::Publication>& publication) {
  bool gap = false;
  return Apply(publication, /*first_of_subscription=*/false, &gap);
}

absl::Status Follower::Apply(const std::vector<proto::Publication>& parts,
                             bool first_of_subscription, bool* gap) {
  const proto::Publication& head = parts.front();
  const uint64_t step = head.step();
  MutexLock lock(&apply_mu_);
  if (first_of_subscription && head.previous_step() > base_step_) {
    // This publication holds the changes after the previous one's step;
    // those between the base and that step are gone (the publications
    // holding them left the history). Only a checkpoint at least that new
    // closes the gap.
    needs_checkpoint_at_ = head.previous_step();
    *gap = true;
    SetError(absl::StrCat("publications of training shard ", head.shard_index(),
                          " before step ", head.previous_step(),
                          " are gone (serving ", base_step_,
                          "); waiting for a checkpoint of step ",
                          head.previous_step(), " or later"));
    return absl::OkStatus();
  }
  if (step <= base_step_) {  // the base is newer
    ++publications_passed_over_;
    return absl::OkStatus();
  }
  // This serving shard's rows, by table.
  absl::flat_hash_map<std::string, TableRows> tables;
  for (const proto::Publication& part : parts) {
    for (const proto::PublishedTable& published : part.table()) {
      TableRows& rows = tables[published.config().name()];
      rows.config = published.config();
      const size_t dim = published.config().dim();
      const size_t n = published.keys().size() / sizeof(uint64_t);
      if (published.keys().size() % sizeof(uint64_t) != 0 ||
          published.values().size() != n * dim * sizeof(float) ||
          published.removed().size() % sizeof(uint64_t) != 0) {
        return absl::DataLossError(absl::StrCat(
            "publication ", head.sequence(), " has a malformed table '",
            published.config().name(), "'"));
      }
      const char* keys = published.keys().data();
      const char* values = published.values().data();
      for (size_t i = 0; i < n; ++i) {
        uint64_t key;
        std::memcpy(&key, keys + i * sizeof(uint64_t), sizeof(key));
        if (ShardOfKey(key, options_.num_shards) != options_.shard_index) {
          continue;
        }
        rows.keys.push_back(key);
        const size_t at = rows.values.size();
        rows.values.resize(at + dim);
        std::memcpy(rows.values.data() + at, values + i * dim * sizeof(float),
                    dim * sizeof(float));
      }
      const size_t removed = published.removed().size() / sizeof(uint64_t);
      for (size_t i = 0; i < removed; ++i) {
        uint64_t key;
        std::memcpy(&key, published.removed().data() + i * sizeof(uint64_t),
                    sizeof(key));
        if (ShardOfKey(key, options_.num_shards) == options_.shard_index) {
          rows.removed.push_back(key);
        }
      }
    }
  }
  const std::shared_ptr<const ServingVersion> current = Current();
  auto next = std::make_shared<ServingVersion>(*current);
  next->sequence = ++sequence_;
  for (auto& [name, rows] : tables) {
    auto overlay = std::make_shared<Overlay>();
    overlay->step = step;
    overlay->sequence = next->sequence;
    overlay->values = std::move(rows.values);
    overlay->rows.reserve(rows.keys.size() + rows.removed.size());
    for (size_t i = 0; i < rows.keys.size(); ++i) {
      overlay->rows[rows.keys[i]] = static_cast<uint32_t>(i);
    }
    for (uint64_t key : rows.removed) overlay->rows[key] = Overlay::kRemoved;
    auto it = next->tables.find(name);
    if (it != next->tables.end()) {
      it->second = it->second->With(std::move(overlay));
      continue;
    }
    // A table training created after the base's checkpoint.
    ASSIGN_OR_RETURN(TableRegistry::CreateResult created,
                     next->registry->Create(
                         ValuesOnlyConfig(rows.config, options_.storage)));
    ASSIGN_OR_RETURN(TableRegistry::Entry entry,
                     next->registry->Find(created.table_id));
    next->tables[name] = std::make_shared<const ServingTable>(
        next->registry, entry.table, *entry.config,
        std::vector<std::shared_ptr<const Overlay>>{std::move(overlay)});
  }
  const size_t source = static_cast<size_t>(std::max(head.shard_index(), 0));
  const size_t sources =
      std::max<size_t>(static_cast<size_t>(std::max(head.num_shards(), 1)),
                       next->source_steps.size());
  next->source_steps.resize(sources, base_step_);
  next->source_steps[source] = step;
  next->step =
      *std::min_element(next->source_steps.begin(), next->source_steps.end());
  next->published_unix_micros = head.published_unix_micros();
  if (!head.dense_parameters().empty()) {
    next->dense_parameters =
        std::make_shared<const std::string>(head.dense_parameters());
    next->dense_step = step;
  }
  ++publications_applied_;
  FoldIntoBase(*next);
  Install(std::move(next));
  return absl::OkStatus();
}

}  // namespace embedps::server
