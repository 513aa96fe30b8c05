#include "checkpoint/retention.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/format.h"
#include "checkpoint/manifest.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace embedps::checkpoint {
namespace {

struct Found {
  std::string name;
  uint64_t step = 0;
  bool complete = false;  // its MANIFEST reads and checks
};

}  // namespace

absl::StatusOr<PruneResult> PruneCheckpoints(
    const std::string& root, int keep,
    const std::function<bool()>& TEST_after_removal) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep must be at least 1 (the newest checkpoint is "
                     "never deleted), not ",
                     keep));
  }
  namespace fs = std::filesystem;
  std::error_code error;
  std::vector<Found> found;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (!IsCheckpointName(name) || !entry.is_directory(error)) continue;
    Found f;
    f.name = name;
    absl::StatusOr<proto::CheckpointManifest> manifest =
        ReadManifest(entry.path().string());
    if (manifest.ok()) {
      f.complete = true;
      f.step = manifest->step();
    }
    found.push_back(std::move(f));
  }
  if (error) {
    return ErrnoStatus(error.value(),
                       absl::StrCat("cannot list checkpoints in '", root,
                                    "': ", error.message()));
  }
  std::vector<const Found*> complete;
  for (const Found& f : found) {
    if (f.complete) complete.push_back(&f);
  }
  std::sort(complete.begin(), complete.end(),
            [](const Found* a, const Found* b) {
              return a->step != b->step ? a->step > b->step : a->name > b->name;
            });
  PruneResult result;
  absl::flat_hash_set<std::string> needed;
  for (size_t i = 0; i < complete.size() && i < static_cast<size_t>(keep);
       ++i) {
    result.kept.push_back(complete[i]->name);
    // The chain it builds on stays whole (a broken chain is DATA_LOSS
    // when restored anyway; what it names is kept).
    absl::StatusOr<std::vector<ChainLink>> chain =
        ReadChain((fs::path(root) / complete[i]->name).string());
    needed.insert(complete[i]->name);
    if (chain.ok()) {
      for (const ChainLink& link : *chain) {
        needed.insert(fs::path(link.dir).filename().string());
      }
    } else {
      // Keep every older one: which it needs cannot be told.
      for (const Found* older : complete) needed.insert(older->name);
    }
  }
  if (result.kept.empty()) return result;  // nothing complete: touch nothing
  const uint64_t oldest_kept_step = complete[result.kept.size() - 1]->step;
  const auto removed = [&]() {
    return TEST_after_removal == nullptr || TEST_after_removal();
  };
  for (const Found& f : found) {
    if (needed.contains(f.name)) continue;
    // Incomplete ones (a deletion a crash interrupted) go once older than
    // every kept checkpoint; complete ones not needed go.
    if (!f.complete) {
      uint64_t step_of_name = 0;
      for (char c : f.name.substr(sizeof(kCheckpointPrefix) - 1)) {
        step_of_name = step_of_name * 10 + static_cast<uint64_t>(c - '0');
      }
      if (step_of_name >= oldest_kept_step) continue;
    }
    const fs::path dir = fs::path(root) / f.name;
    // MANIFEST first: from here on the checkpoint is not complete.
    fs::remove(dir / kManifestFileName, error);
    if (error) {
      return ErrnoStatus(
          error.value(),
          absl::StrCat("cannot delete '", (dir / kManifestFileName).string(),
                       "': ", error.message()));
    }
    RETURN_IF_ERROR(SyncPath(dir.string()));
    if (!removed()) return result;
    fs::remove_all(dir, error);
    if (error) {
      return ErrnoStatus(error.value(),
                         absl::StrCat("cannot delete '", dir.string(),
                                      "': ", error.message()));
    }
    result.deleted.push_back(f.name);
    if (!removed()) return result;
  }
  RETURN_IF_ERROR(SyncPath(root));
  return result;
}

}  // namespace embedps::checkpoint
