// Retention: the checkpoints a root keeps, and the deletion of the rest.
//
// PruneCheckpoints keeps the `keep` newest complete checkpoints (by their
// manifests' steps) and every checkpoint their chains build on, and
// deletes the other complete checkpoints under the root — never the
// newest, never a file a kept chain needs. A checkpoint is deleted
// MANIFEST first: from then on it is not complete, and the search of a
// root (manifest.h ResolveCheckpoint) ignores it, so a crash in the middle
// of a deletion leaves every kept checkpoint restorable and the half-gone
// one ignored (the next prune finishes it). Left alone: directories being
// written (".tmp"), names not of the checkpoints' own form, and files
// other than directories.
//
// A serving replica reads a checkpoint while it loads it (then holds its
// rows in memory): keeping at least 2 leaves the checkpoint a replica
// started loading in place for at least one more checkpoint interval.
//
// Thread safety: one prune of a root at a time (the job's chief).
#ifndef EMBEDPS_CHECKPOINT_RETENTION_H_
#define EMBEDPS_CHECKPOINT_RETENTION_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace embedps::checkpoint {

struct PruneResult {
  // Directory names under the root, newest first.
  std::vector<std::string> kept;
  std::vector<std::string> deleted;
};

// INVALID_ARGUMENT if keep < 1; the error of a removal that failed (what
// was deleted before it stays deleted; nothing kept is touched).
// `TEST_after_removal` (tests only): called after each removal of a file
// or directory; returning false stops the prune there, as a crash would.
absl::StatusOr<PruneResult> PruneCheckpoints(
    const std::string& root, int keep,
    const std::function<bool()>& TEST_after_removal = nullptr);

}  // namespace embedps::checkpoint

#endif  // EMBEDPS_CHECKPOINT_RETENTION_H_
