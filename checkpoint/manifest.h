// Reading and writing checkpoint manifests, finding checkpoints and their
// chains (the format's rules: format.h). Knows protobuf and files, not
// RocksDB: the client, which writes the manifest of a checkpoint its
// shards wrote, uses it too.
//
// Thread safety: pure functions over files.
#ifndef EMBEDPS_CHECKPOINT_MANIFEST_H_
#define EMBEDPS_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/format.h"
#include "proto/checkpoint.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.pb.h"

namespace embedps::checkpoint {

// The manifest of a checkpoint whose shards each wrote their files
// (TrainingService.AwaitSave's answers, `saved[shard]`): every table of
// `tables` with each shard's file, `extra_files` (paths relative to `dir`,
// their sizes and CRC-32s read there), this build's format version, and
// `parent` if any file is incremental. INTERNAL naming the shard and table
// if a shard wrote no file for a table; the error of reading an extra file.
absl::StatusOr<proto::CheckpointManifest> AssembleManifest(
    const std::string& dir, const std::string& name, uint64_t step,
    const std::string& parent, const std::vector<proto::TableConfig>& tables,
    const std::vector<proto::AwaitSaveResponse>& saved,
    const std::vector<std::string>& extra_files);

// Writes dir/MANIFEST atomically (temporary name, fsync, rename).
absl::Status WriteManifest(const std::string& dir,
                           const proto::CheckpointManifest& manifest);

// Reads and checks dir/MANIFEST. NOT_FOUND if there is none; DATA_LOSS
// naming the file if it is truncated or its checksum is wrong;
// FAILED_PRECONDITION for a format version this build does not read.
absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& dir);

// The bytes of the extra file `name` (its path relative to `dir`, as the
// manifest lists it) of the checkpoint at `dir`, checked against the
// CRC-32 `manifest` records; nullopt if the manifest lists no such file.
// DATA_LOSS naming the file if its checksum is wrong; the error of
// reading it.
absl::StatusOr<std::optional<std::string>> ReadExtraFile(
    const std::string& dir, const proto::CheckpointManifest& manifest,
    const std::string& name);

struct CompleteCheckpoint {
  std::string dir;
  uint64_t step = 0;  // its manifest's
};

// The complete checkpoints directly under `root`, newest (highest manifest
// step) first: directories named as CheckpointName names them
// (IsCheckpointName) whose MANIFEST reads and checks. Those whose MANIFEST
// does not are left out and, if `skipped` is given, named there with why.
// NOT_FOUND if `root` cannot be listed.
absl::StatusOr<std::vector<CompleteCheckpoint>> ListCheckpoints(
    const std::string& root, std::vector<std::string>* skipped = nullptr);

// `path` itself if it holds a MANIFEST, else the complete checkpoint of the
// highest step under `path`, by its manifest: among the directories named
// as CheckpointName names them (IsCheckpointName: not ".tmp" ones being
// written, not copies or quarantined ones an operator renamed), those
// whose MANIFEST reads and checks. Those whose MANIFEST does not are left
// out and, if `skipped` is given, named there with why. NOT_FOUND naming
// `path` (and what was skipped) if none is left.
absl::StatusOr<std::string> ResolveCheckpoint(
    const std::string& path, std::vector<std::string>* skipped = nullptr);

// The checksum `manifest` records for one of its table files: XXH3-64 from
// format version 2 on, zlib CRC-32 in version 1.
FileChecksum ExpectedChecksum(const proto::CheckpointManifest& manifest,
                              const proto::CheckpointShardFile& file);

struct ChainLink {
  std::string dir;
  proto::CheckpointManifest manifest;
};

// The checkpoint at `dir` and the parents its incremental files build on,
// newest first, down to the first checkpoint whose files are all full.
// DATA_LOSS naming the missing or damaged parent if the chain is broken.
absl::StatusOr<std::vector<ChainLink>> ReadChain(const std::string& dir);

}  // namespace embedps::checkpoint

#endif  // EMBEDPS_CHECKPOINT_MANIFEST_H_
