// Follower: loading checkpoints and applying incremental ones (the
// stream of publications is follower.cc's).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/format.h"
#include "checkpoint/manifest.h"
#include "checkpoint/table_file.h"
#include "common/file_io.h"
#include "common/key_hash.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_priority.h"
#include "embedding/table.h"
#include "embedding/table_spec.h"
#include "grpcpp/grpcpp.h"
#include "proto/checkpoint.pb.h"
#include "proto/serving.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.grpc.pb.h"
#include "server/checkpointer.h"
#include "server/follower.h"
#include "server/table_config.h"

namespace embedps::server {
namespace {

// The dense model in checkpoint `dir`, checked against its manifest; null
// if the checkpoint has none.
absl::StatusOr<std::shared_ptr<const std::string>> ReadDense(
    const std::string& dir, const proto::CheckpointManifest& manifest) {
  ASSIGN_OR_RETURN(std::optional<std::string> bytes,
                   checkpoint::ReadExtraFile(dir, manifest,
                                             checkpoint::kDenseParametersFile));
  if (!bytes.has_value()) return std::shared_ptr<const std::string>();
  return std::make_shared<const std::string>(*std::move(bytes));
}

// A serving version's tables: one worker, its own spill directory, and no
// memory committed for expected_rows (a load creates exactly a
// checkpoint's rows).
TableRegistry::Options FollowerRegistryOptions(const std::string& spill_dir) {
  TableRegistry::Options options;
  options.spill_root = spill_dir;
  options.num_shards = 0;
  options.serving_rows = true;
  return options;
}

// An incremental checkpoint's rows of one table, read straight from its
// files into the overlay the replica serves them from (no table between):
// a later link's row replaces an earlier one's, a removal marks its key.
class OverlayBuilder : public checkpoint::ValuesSink {
 public:
  // Sized for `expected_rows` (a guess: more grows it).
  OverlayBuilder(int32_t dim, size_t expected_rows)
      : dim_(static_cast<size_t>(dim)), overlay_(std::make_shared<Overlay>()) {
    overlay_->rows.reserve(expected_rows);
    overlay_->values.reserve(expected_rows * dim_);
  }

  absl::Status Rows(absl::Span<const uint64_t> keys,
                    absl::Span<const float> embeddings) override {
    for (size_t i = 0; i < keys.size(); ++i) {
      const float* row = embeddings.data() + i * dim_;
      auto [it, added] = overlay_->rows.try_emplace(keys[i], 0);
      if (!added && it->second != Overlay::kRemoved) {
        std::copy(row, row + dim_,
                  overlay_->values.begin() + it->second * dim_);
        continue;
      }
      const size_t index = overlay_->values.size() / dim_;
      if (index >= Overlay::kRemoved) {
        return absl::ResourceExhaustedError(
            "an incremental checkpoint of over 4G rows for one replica");
      }
      it->second = static_cast<uint32_t>(index);
      overlay_->values.insert(overlay_->values.end(), row, row + dim_);
    }
    return absl::OkStatus();
  }

  absl::Status Removed(absl::Span<const uint64_t> keys) override {
    for (uint64_t key : keys) overlay_->rows[key] = Overlay::kRemoved;
    return absl::OkStatus();
  }

  std::shared_ptr<Overlay> Take() { return std::move(overlay_); }

 private:
  const size_t dim_;
  std::shared_ptr<Overlay> overlay_;
};

// The rows and removals of table `name` in the links of `chain` newer than
// `base` (their manifests' counts, at most what their files' sizes can
// hold), this serving shard's share of them.
size_t ExpectedOverlayRows(const std::vector<checkpoint::ChainLink>& chain,
                           size_t base, const std::string& name, int32_t dim,
                           int32_t num_shards) {
  uint64_t rows = 0;
  for (size_t i = 0; i < base; ++i) {
    for (const proto::CheckpointTable& table : chain[i].manifest.table()) {
      if (table.config().name() != name) continue;
      for (const proto::CheckpointShardFile& file : table.file()) {
        std::error_code error;
        const uintmax_t bytes = std::filesystem::file_size(
            std::filesystem::path(chain[i].dir) / file.path(), error);
        if (error) continue;
        rows += std::min<uint64_t>(file.rows() + file.removed(),
                                   bytes / embedding::RowRecordBytes(dim, 0));
      }
    }
  }
  return static_cast<size_t>(
      rows / static_cast<uint64_t>(std::max<int32_t>(num_shards, 1)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ServingVersion>> Follower::LoadCheckpoint(
    const std::string& path, std::string* name) {
  ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest,
                   checkpoint::ReadManifest(path));
  std::string spill_dir;
  if (!options_.spill_root.empty()) {
    spill_dir = absl::StrCat(options_.spill_root, "/load-", loads_.load());
  }
  // The registry, and its spill tiers on disk, go with the last version
  // that uses them.
  std::shared_ptr<TableRegistry> registry(
      new TableRegistry(FollowerRegistryOptions(spill_dir)),
      [spill_dir](TableRegistry* r) {
        delete r;
        if (!spill_dir.empty()) {
          std::error_code error;
          std::filesystem::remove_all(spill_dir, error);
        }
      });
  {
    ShardCheckpointer checkpointer(options_.shard_index, options_.num_shards,
                                   registry.get());
    checkpointer.RestoreValuesOnly(options_.storage);
    RETURN_IF_ERROR(checkpointer.Restore(path).status());
  }
  // The base is done growing (publications add few rows): what its
  // arenas committed past its rows goes back.
  for (const TableRegistry::Entry& entry : registry->List()) {
    entry.table->ReleaseUnusedMemory();
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const std::string> dense,
                   ReadDense(path, manifest));
  auto base = std::const_pointer_cast<ServingVersion>(
      BaseVersion(registry, manifest.step(),
                  static_cast<int32_t>(
                      std::max<size_t>(options_.training_servers.size(), 1))));
  if (dense != nullptr) {
    base->dense_parameters = std::move(dense);
    base->dense_step = manifest.step();
  }
  base->sequence = ++sequence_;
  ++loads_;
  *name = manifest.name();
  return std::shared_ptr<const ServingVersion>(std::move(base));
}

void Follower::FoldIntoBase(ServingVersion& next) {
  // Every overlay added at or before the least sequence of a live version
  // on next's base is held by all of them (nothing reads the base under
  // it): those can be written into the base.
  uint64_t least = next.sequence;
  for (auto it = made_.begin(); it != made_.end();) {
    const std::shared_ptr<const ServingVersion> made = it->lock();
    if (made == nullptr) {
      it = made_.erase(it);
      continue;
    }
    if (made->registry == next.registry) {
      least = std::min(least, made->sequence);
    }
    ++it;
  }
  for (auto& [name, table] : next.tables) {
    std::shared_ptr<const ServingTable> t = table;
    while (!t->overlays().empty() && t->overlays().back()->sequence <= least) {
      if (absl::Status s = t->WriteIntoBase(*t->overlays().back()); !s.ok()) {
        Logger("follower")
            ->warn("table '{}': keeping an overlay: {}", name, s.ToString());
        break;
      }
      t = t->WithoutOldest();
    }
    table = std::move(t);
  }
}

void Follower::ReportBadCheckpoint(std::string report) {
  MutexLock lock(&mu_);
  if (std::find(bad_checkpoints_.begin(), bad_checkpoints_.end(), report) !=
      bad_checkpoints_.end()) {
    return;
  }
  Logger("follower")->warn("{}", report);
  bad_checkpoints_.push_back(report);
  while (bad_checkpoints_.size() > 16) bad_checkpoints_.pop_front();
  last_error_ = std::move(report);
}

absl::StatusOr<Follower::Candidates> Follower::ListCandidates() {
  const std::string& root = options_.checkpoint_root;
  Candidates found;
  if (std::filesystem::exists(std::filesystem::path(root) /
                              checkpoint::kManifestFileName)) {
    found.root_is_checkpoint = true;
    absl::StatusOr<proto::CheckpointManifest> manifest =
        checkpoint::ReadManifest(root);
    if (!manifest.ok()) {
      found.skipped.push_back(
          absl::StrCat(root, ": ", manifest.status().message()));
    } else {
      found.checkpoints.push_back({root, manifest->step()});
    }
  } else {
    ASSIGN_OR_RETURN(found.checkpoints,
                     checkpoint::ListCheckpoints(root, &found.skipped));
  }
  for (const std::string& why : found.skipped) {
    ReportBadCheckpoint(absl::StrCat("checkpoint ", why, " (skipped)"));
  }
  return found;
}

absl::StatusOr<std::shared_ptr<const ServingVersion>> Follower::LoadNewest(
    uint64_t after, const Candidates& candidates, std::string* name) {
  const std::vector<std::string>& skipped = candidates.skipped;
  std::vector<std::string> failures;
  for (const checkpoint::CompleteCheckpoint& candidate :
       candidates.checkpoints) {
    if (candidate.step <= after && after > 0) break;
    if (failed_dirs_.contains(candidate.dir)) continue;
    absl::StatusOr<std::shared_ptr<const ServingVersion>> loaded =
        LoadCheckpoint(candidate.dir, name);
    if (loaded.ok()) return loaded;
    failed_dirs_.insert(candidate.dir);
    failures.push_back(
        absl::StrCat(candidate.dir, ": ", loaded.status().ToString()));
    ReportBadCheckpoint(
        absl::StrCat("checkpoint ", candidate.dir,
                     " cannot be loaded: ", loaded.status().ToString()));
  }
  return absl::NotFoundError(absl::StrCat(
      "no complete checkpoint in '", options_.checkpoint_root, "'",
      after > 0 ? absl::StrCat(" newer than step ", after) : "", " that loads",
      failures.empty() && skipped.empty()
          ? ""
          : absl::StrCat(
                "; passed over: ",
                absl::StrJoin(failures.empty() ? skipped : failures, "; "))));
}

absl::StatusOr<bool> Follower::ApplyNewestIncrement(
    uint64_t after, const Candidates& candidates) {
  // A root that is one checkpoint has nothing newer to come.
  if (candidates.root_is_checkpoint) return false;
  const std::vector<checkpoint::CompleteCheckpoint>& found =
      candidates.checkpoints;
  if (found.empty() || found.front().step <= after ||
      failed_dirs_.contains(found.front().dir)) {
    return false;
  }
  const std::string& dir = found.front().dir;
  absl::StatusOr<std::vector<checkpoint::ChainLink>> chain =
      checkpoint::ReadChain(dir);
  if (!chain.ok()) return false;  // a whole load reports it
  std::string base_name;
  {
    MutexLock lock(&apply_mu_);
    base_name = base_name_;
  }
  size_t base = 0;
  while (base < chain->size() && (*chain)[base].manifest.name() != base_name) {
    ++base;
  }
  if (base == 0 || base == chain->size()) return false;
  // Only increments of served tables, rows of the served width, or a whole
  // load (which checks it all). One overlay per table.
  const std::shared_ptr<const ServingVersion> current = Current();
  absl::flat_hash_map<std::string, std::unique_ptr<OverlayBuilder>> changed;
  for (size_t i = 0; i < base; ++i) {
    for (const proto::CheckpointTable& table : (*chain)[i].manifest.table()) {
      const std::string& name = table.config().name();
      auto served = current->tables.find(name);
      if (served == current->tables.end() ||
          table.config().dim() != served->second->dim()) {
        return false;
      }
      for (const proto::CheckpointShardFile& file : table.file()) {
        if (!file.incremental()) return false;
      }
      std::unique_ptr<OverlayBuilder>& into = changed[name];
      if (into == nullptr) {
        into = std::make_unique<OverlayBuilder>(
            table.config().dim(),
            ExpectedOverlayRows(*chain, base, name, table.config().dim(),
                                options_.num_shards));
      }
    }
  }
  // The links newer than the base, oldest first, straight into the
  // overlays: later rows replace earlier ones, removals mark their keys.
  const std::function<bool(uint64_t)> keep =
      options_.num_shards == 1
          ? std::function<bool(uint64_t)>()
          : [this](uint64_t key) {
              return ShardOfKey(key, options_.num_shards) ==
                     options_.shard_index;
            };
  // Reading is the bulk of the work and touches nothing a Lookup reads:
  // it runs only on cores the Lookups leave idle.
  const absl::Status read = RunAtIdlePriority([&]() -> absl::Status {
    for (size_t i = base; i-- > 0;) {
      const checkpoint::ChainLink& link = (*chain)[i];
      for (const proto::CheckpointTable& table : link.manifest.table()) {
        for (const proto::CheckpointShardFile& file : table.file()) {
          RETURN_IF_ERROR(
              checkpoint::ReadTableFileValues(
                  (std::filesystem::path(link.dir) / file.path()).string(),
                  checkpoint::ExpectedChecksum(link.manifest, file),
                  table.config().dim(), *changed.at(table.config().name()),
                  keep)
                  .status());
        }
      }
    }
    return absl::OkStatus();
  });
  if (!read.ok()) {
    failed_dirs_.insert(dir);
    ReportBadCheckpoint(absl::StrCat("checkpoint ", dir,
                                     " cannot be applied: ", read.ToString()));
    return read;
  }
  const proto::CheckpointManifest& manifest = chain->front().manifest;
  ASSIGN_OR_RETURN(std::shared_ptr<const std::string> dense,
                   ReadDense(dir, manifest));

  MutexLock lock(&apply_mu_);
  const std::shared_ptr<const ServingVersion> now = Current();
  if (now->step >= manifest.step()) return true;  // the stream overtook
  if (base_name_ != base_name) return false;      // another base meanwhile
  // A training shard whose stream is past the checkpoint had rows newer
  // than it, which the checkpoint's rows now cover: its publications after
  // the checkpoint's step come again. The others go on where they are (the
  // publications up to the step are passed over; a fresh subscription
  // would be sent the whole history again).
  const bool overtaken =
      std::any_of(now->source_steps.begin(), now->source_steps.end(),
                  [&](uint64_t step) { return step > manifest.step(); });
  auto next = std::make_shared<ServingVersion>(*now);
  next->sequence = ++sequence_;
  for (auto& [name, builder] : changed) {
    std::shared_ptr<Overlay> overlay = builder->Take();
    overlay->step = manifest.step();
    overlay->sequence = next->sequence;
    auto it = next->tables.find(name);
    it->second = it->second->With(std::move(overlay));
  }
  next->source_steps.assign(next->source_steps.size(), manifest.step());
  next->step = manifest.step();
  next->published_unix_micros = manifest.created_unix_micros();
  if (dense != nullptr) {
    next->dense_parameters = std::move(dense);
    next->dense_step = manifest.step();
  }
  base_step_ = manifest.step();
  base_name_ = manifest.name();
  if (needs_checkpoint_at_ != 0 && base_step_ >= needs_checkpoint_at_) {
    needs_checkpoint_at_ = 0;
  }
  ++loads_;
  ++increments_applied_;
  FoldIntoBase(*next);
  Install(std::move(next));
  if (overtaken) ResubscribeAll();
  Logger("follower")
      ->info("applied incremental checkpoint '{}' (step {}) in place",
             manifest.name(), base_step_);
  return true;
}

}  // namespace embedps::server
