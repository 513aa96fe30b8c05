// The checkpoint format, in one place: the layout of a checkpoint
// directory, the names of its files, the versions a build writes and
// reads, and the keys of a table file. The manifest's fields are in
// proto/checkpoint.proto; reading and writing manifests is manifest.h,
// table files table_file.h. docs/checkpoints.md is the user's account.
//
// Layout:
//   ROOT/ckpt-000000001000/            one complete checkpoint (step 1000)
//         MANIFEST                     written last (CheckpointManifestFile)
//         shard-00000-of-00002/t-NAME.sst    a table's file of one shard
//         dense.params                 extra files of the trainer
//   ROOT/ckpt-000000002000.tmp/        being written: not a checkpoint
//
// Rules:
// - A checkpoint is written under NAME.tmp and renamed to NAME once its
//   manifest is in place: a directory named ckpt-* without ".tmp" whose
//   MANIFEST reads and checks is a complete checkpoint; nothing else is.
// - The manifest file is a CheckpointManifestFile: the serialized
//   CheckpointManifest and its CRC-32. It names every table file with its
//   size and XXH3-64, and every extra file with its size and CRC-32.
// - An incremental file holds the rows changed and the keys removed since
//   the same shard's file in the manifest's `parent`; a chain of them ends
//   at a checkpoint whose files are all full (manifest.h ReadChain).
// - Versions: the manifest's format_version says the format of the whole
//   checkpoint. A build writes kFormatVersion and reads it and the one
//   before, back to kOldestReadFormatVersion; another is refused with
//   FAILED_PRECONDITION naming both. Version 1 differs from 2 only in the
//   table files' checksum in the manifest: a zlib CRC-32 (field crc32)
//   where version 2 keeps an XXH3-64 (xxh3); the files are the same.
//   checkpoint/testdata holds a checkpoint of each version that every
//   later build must restore to the same rows (tests read them).
//
// A table file is a RocksDB SST file (sorted, block-checksummed):
//   row key (8 bytes, big-endian) -> the row's record
//                                    (embedding::RowRecordBytes), or an
//                                    empty value: the key was removed
//                                    (incremental files only)
//   TableFileInfoKey()             -> kTableFileTag + " record_bytes=R
//                                    incremental=0|1 stripes=S"
//   TableFileStripeRowsKey()       -> full files: the rows of each lock
//                                    stripe, S big-endian uint64s
//   TableFileAdmissionKey(stripe)  -> that stripe's admission state
// The metadata keys start with eight 0xFF bytes and are longer than 8
// bytes, so they sort after every row key.
//
// Thread safety: pure functions and constants.
#ifndef EMBEDPS_CHECKPOINT_FORMAT_H_
#define EMBEDPS_CHECKPOINT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace embedps::checkpoint {

// The version this build writes (CheckpointManifest.format_version), and
// the oldest it reads.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kOldestReadFormatVersion = 1;

// How a whole table file is checked: its XXH3-64 (format version 2) or its
// zlib CRC-32 (format version 1; manifest.h ExpectedChecksum).
struct FileChecksum {
  enum class Kind { kXxh3, kCrc32 };
  Kind kind = Kind::kXxh3;
  uint64_t value = 0;
};

inline constexpr char kManifestFileName[] = "MANIFEST";
inline constexpr char kTemporarySuffix[] = ".tmp";
inline constexpr char kCheckpointPrefix[] = "ckpt-";
// The dense model's parameters of a training job's checkpoint (an extra
// file of the manifest, written by the job's rank 0).
inline constexpr char kDenseParametersFile[] = "dense.params";

// "ckpt-" and the step in 12 digits, so that names sort by step.
std::string CheckpointName(uint64_t step);
// True for a name CheckpointName makes ("ckpt-" and exactly 12 digits):
// the only directories a checkpoint root's search considers (not
// "ckpt-backup-of-first", not an operator's "ckpt-000000000039.bad").
bool IsCheckpointName(absl::string_view name);
// "shard-00001-of-00003".
std::string ShardDirectoryName(int32_t shard, int32_t num_shards);
// A file-name form of a valid table name: "t-" + the name with every '/'
// written as "%2F". One-to-one (names never hold '%'), and never "." or
// "..". (Also names a table's spill directory.)
std::string TableFileStem(const std::string& table_name);
// TableFileStem(table) + ".sst".
std::string TableFileName(const std::string& table);

// ---- Table files.

// The first words of the info value.
inline constexpr char kTableFileTag[] = "embedps-table-file v1";
// Bytes of the metadata keys' prefix (eight 0xFF).
inline constexpr size_t kTableFileMetaPrefixBytes = 8;

std::string TableFileInfoKey();
std::string TableFileStripeRowsKey();
// TableFileAdmissionPrefix() + the stripe as 4 big-endian bytes.
std::string TableFileAdmissionKey(uint32_t stripe);
std::string TableFileAdmissionPrefix();
// True for the metadata keys above (any key longer than a row key).
inline bool IsTableFileMetaKey(absl::string_view key) { return key.size() > 8; }

}  // namespace embedps::checkpoint

#endif  // EMBEDPS_CHECKPOINT_FORMAT_H_
