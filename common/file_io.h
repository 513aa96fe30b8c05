// Checksums and atomic writes of whole files, for everything embedps
// persists (checkpoints, manifests, dense parameters).
#ifndef EMBEDPS_COMMON_FILE_IO_H_
#define EMBEDPS_COMMON_FILE_IO_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace embedps {

// zlib's CRC-32 of `bytes`, continuing from `crc` (0 to start).
uint32_t Crc32(absl::string_view bytes, uint32_t crc = 0);

// How ReadFileInChunks reads.
enum class PageCache {
  // Through the page cache: what is cached is not read from the disk.
  kUse,
  // Around it (O_DIRECT, large aligned reads) where the file system allows
  // it, else through it: for a file read once, not cached, and not needed
  // in memory afterwards (the checksum of a checkpoint file before its
  // restore). Reads at the disk's sequential rate, without the copy into
  // and the eviction from the page cache that buffered reads cost.
  kBypass,
};

// Reads `path` front to back in large chunks, calling `visit` on each (the
// chunks together are the file's bytes, in order).
// NOT_FOUND / UNAVAILABLE naming the file if it cannot be read.
absl::Status ReadFileInChunks(
    const std::string& path,
    absl::FunctionRef<void(absl::string_view chunk)> visit,
    PageCache page_cache = PageCache::kUse);

// CRC-32 of a whole file, read in large chunks. NOT_FOUND / UNAVAILABLE
// naming the file if it cannot be read.
absl::StatusOr<uint32_t> FileCrc32(const std::string& path);

// The status of a failed file operation from its errno: NOT_FOUND
// (ENOENT), PERMISSION_DENIED (EACCES, EPERM), RESOURCE_EXHAUSTED (ENOSPC,
// EDQUOT), FAILED_PRECONDITION for what no retry changes (ENOTDIR,
// EISDIR, EROFS, EEXIST, ENAMETOOLONG, ELOOP, EXDEV, EINVAL), UNAVAILABLE
// for the rest (EIO, EAGAIN, ...: may pass). `message` says what failed.
absl::Status ErrnoStatus(int error, absl::string_view message);

// Reads a whole file. NOT_FOUND naming the file if it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Writes `bytes` to `path + ".tmp"`, flushes it to disk (fsync) and renames
// it to `path`: readers see the old file or the whole new one, never a part.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes);

// fsync of a file or a directory (after a rename, the directory holds the
// new name durably only once it is synced).
absl::Status SyncPath(const std::string& path);

}  // namespace embedps

#endif  // EMBEDPS_COMMON_FILE_IO_H_
