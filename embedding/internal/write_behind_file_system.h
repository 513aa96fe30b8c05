#ifndef EMBEDPS_EMBEDDING_INTERNAL_WRITE_BEHIND_FILE_SYSTEM_H_
#define EMBEDPS_EMBEDDING_INTERNAL_WRITE_BEHIND_FILE_SYSTEM_H_

#include <cstddef>
#include <memory>
#include <string>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace embedps::embedding::internal {

// A RocksDB file system whose writable files write behind their writer: each
// Append/PositionedAppend copies the data and returns while a thread of the
// file's own writes it to the file underneath. The writer (an SstFileWriter)
// builds its next blocks while the disk takes the last ones, which matters
// with direct IO, where a write returns only when the device has the data.
//
// Contract of each writable file it opens:
//  - writes reach the file in the order they were made;
//  - at most `max_pending_bytes` wait to be written (more blocks the writer);
//  - Flush, InvalidateCache and Allocate are queued in order with the
//    writes (the data reaches the operating system by Sync, Fsync or Close,
//    not by Flush); a failed Allocate is ignored, as RocksDB ignores it;
//  - Sync, Fsync, RangeSync, Truncate, Close and GetFileSize first wait for
//    everything pending;
//  - the first failed write fails every later call on the file, with that
//    write's error: nothing after a failed write is reported as written.
// Every other kind of file is the wrapped file system's own.
class WriteBehindFileSystem : public rocksdb::FileSystemWrapper {
 public:
  WriteBehindFileSystem(const std::shared_ptr<rocksdb::FileSystem>& target,
                        size_t max_pending_bytes);

  static const char* kClassName() { return "embedps.WriteBehindFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(
      const std::string& path, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;

 private:
  const size_t max_pending_bytes_;
};

// An Env over `target` (default: the operating system's file system) whose
// writable files write behind their writer (WriteBehindFileSystem). Set it
// as rocksdb::Options::env of an SstFileWriter; it must outlive every file
// it opened.
std::unique_ptr<rocksdb::Env> NewWriteBehindEnv(
    size_t max_pending_bytes, std::shared_ptr<rocksdb::FileSystem> target =
                                  rocksdb::FileSystem::Default());

}  // namespace embedps::embedding::internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_WRITE_BEHIND_FILE_SYSTEM_H_
