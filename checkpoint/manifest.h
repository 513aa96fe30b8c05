// The checkpoint directory layout and its manifest (docs/checkpoints.md):
//
//   ROOT/ckpt-000000001000/            one complete checkpoint
//         MANIFEST                     written last (CheckpointManifestFile)
//         shard-00000-of-00002/t-NAME.sst
//         dense.params                 extra files of the trainer
//   ROOT/ckpt-000000002000.tmp/        being written: not a checkpoint
//
// A checkpoint is written under NAME.tmp and renamed to NAME once its
// manifest is in place, so a directory named ckpt-* without ".tmp" always
// holds a complete checkpoint. Knows protobuf and files, not RocksDB.
#ifndef EMBEDPS_CHECKPOINT_MANIFEST_H_
#define EMBEDPS_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/embedps.pb.h"

namespace embedps::checkpoint {

// 2: table files are checked by XXH3-64 (version 1: zlib CRC-32). A build
// reads only its own version.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr char kManifestFileName[] = "MANIFEST";
inline constexpr char kTemporarySuffix[] = ".tmp";
// The dense model's parameters of a training job's checkpoint (an extra
// file of the manifest, written by the job's rank 0).
inline constexpr char kDenseParametersFile[] = "dense.params";

// "ckpt-" and the step in 12 digits, so that names sort by step.
std::string CheckpointName(uint64_t step);
// "shard-00001-of-00003".
std::string ShardDirectoryName(int32_t shard, int32_t num_shards);
// embedding::TableFileStem(table) + ".sst".
std::string TableFileName(const std::string& table);

// Writes dir/MANIFEST atomically (temporary name, fsync, rename).
absl::Status WriteManifest(const std::string& dir,
                           const proto::CheckpointManifest& manifest);

// Reads and checks dir/MANIFEST. NOT_FOUND if there is none; DATA_LOSS
// naming the file if it is truncated or its checksum is wrong;
// FAILED_PRECONDITION for a format this build does not read.
absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& dir);

// `path` itself if it holds a MANIFEST, else the complete checkpoint with
// the highest step under `path`. NOT_FOUND naming `path` if there is none.
// Directories still being written (".tmp") are ignored.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path);

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
