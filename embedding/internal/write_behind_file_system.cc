#include "embedding/internal/write_behind_file_system.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "common/mutex.h"

namespace embedps::embedding::internal {
namespace {

using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// One thing for the file's thread to do, in order with the others.
struct Operation {
  enum class Kind {
    kAppend,
    kPositionedAppend,
    kAllocate,
    kFlush,
    kInvalidateCache
  };
  Kind kind = Kind::kAppend;
  // Owned copy of the data, aligned as the file underneath requires (direct
  // IO writes from an aligned address).
  std::unique_ptr<char, FreeDeleter> data;
  size_t size = 0;
  // Where a positioned append, an allocation or an invalidated range starts;
  // how long the latter two are.
  uint64_t offset = 0;
  uint64_t length = 0;
};

class WriteBehindFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  WriteBehindFile(std::unique_ptr<FSWritableFile> file,
                  size_t max_pending_bytes)
      : FSWritableFileOwnerWrapper(std::move(file)),
        max_pending_bytes_(max_pending_bytes),
        alignment_(std::max<size_t>(alignof(std::max_align_t),
                                    target()->GetRequiredBufferAlignment())),
        thread_([this] { RunOperations(); }) {}

  // Writes what is pending, then stops the file's thread.
  ~WriteBehindFile() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    changed_.SignalAll();
    thread_.join();
  }

  IOStatus Append(const Slice& data, const IOOptions&,
                  IODebugContext*) override {
    return Enqueue(Operation::Kind::kAppend, data, 0);
  }
  // The verification information is dropped: the default file system does
  // not use it either.
  IOStatus Append(const Slice& data, const IOOptions&,
                  const rocksdb::DataVerificationInfo&,
                  IODebugContext*) override {
    return Enqueue(Operation::Kind::kAppend, data, 0);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions&, IODebugContext*) override {
    return Enqueue(Operation::Kind::kPositionedAppend, data, offset);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions&,
                            const rocksdb::DataVerificationInfo&,
                            IODebugContext*) override {
    return Enqueue(Operation::Kind::kPositionedAppend, data, offset);
  }
  // Preallocation: decided here (FSWritableFile's own logic over this
  // file's block size), the fallocate queued in order with the writes. Its
  // failure is ignored, as the writer ignores it.
  void SetPreallocationBlockSize(size_t size) override {
    FSWritableFile::SetPreallocationBlockSize(size);
  }
  void GetPreallocationStatus(size_t* block_size,
                              size_t* last_allocated_block) override {
    FSWritableFile::GetPreallocationStatus(block_size, last_allocated_block);
  }
  void PrepareWrite(size_t offset, size_t len, const IOOptions& options,
                    IODebugContext* dbg) override {
    FSWritableFile::PrepareWrite(offset, len, options, dbg);
  }
  IOStatus Allocate(uint64_t offset, uint64_t len, const IOOptions&,
                    IODebugContext*) override {
    return Enqueue(Operation::Kind::kAllocate, Slice(), offset, len);
  }

  IOStatus Truncate(uint64_t size, const IOOptions& options,
                    IODebugContext* dbg) override {
    return AfterPending([&] { return target()->Truncate(size, options, dbg); });
  }
  IOStatus Close(const IOOptions& options, IODebugContext* dbg) override {
    const IOStatus pending = WaitForPending();
    const IOStatus closed = target()->Close(options, dbg);
    return pending.ok() ? closed : pending;
  }
  // Queued, not waited for: the writer flushes after every buffer it hands
  // over, and waiting there would write in front of it again.
  IOStatus Flush(const IOOptions&, IODebugContext*) override {
    return Enqueue(Operation::Kind::kFlush, Slice(), 0);
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    return AfterPending([&] { return target()->Sync(options, dbg); });
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return AfterPending([&] { return target()->Fsync(options, dbg); });
  }
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& options,
                     IODebugContext* dbg) override {
    return AfterPending(
        [&] { return target()->RangeSync(offset, nbytes, options, dbg); });
  }
  // Queued: the writer drops the pages of what it wrote every few MiB.
  IOStatus InvalidateCache(size_t offset, size_t length) override {
    return Enqueue(Operation::Kind::kInvalidateCache, Slice(), offset, length);
  }
  uint64_t GetFileSize(const IOOptions& options, IODebugContext* dbg) override {
    WaitForPending().PermitUncheckedError();
    return target()->GetFileSize(options, dbg);
  }

 private:
  // Waits for every pending operation, then calls `call` unless one failed.
  template <typename Call>
  IOStatus AfterPending(Call call) {
    IOStatus pending = WaitForPending();
    if (!pending.ok()) return pending;
    return call();
  }

  IOStatus Enqueue(Operation::Kind kind, const Slice& data, uint64_t offset,
                   uint64_t length = 0) {
    Operation operation;
    operation.kind = kind;
    operation.offset = offset;
    operation.length = length;
    if (!data.empty()) {
      const size_t rounded =
          (data.size() + alignment_ - 1) / alignment_ * alignment_;
      operation.data.reset(
          static_cast<char*>(std::aligned_alloc(alignment_, rounded)));
      if (operation.data == nullptr) {
        return IOStatus::NoSpace("out of memory for a write-behind buffer");
      }
      std::memcpy(operation.data.get(), data.data(), data.size());
      operation.size = data.size();
    }
    const size_t bytes = data.size();
    {
      MutexLock lock(&mu_);
      changed_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !error_.ok() || pending_bytes_ == 0 ||
               pending_bytes_ + bytes <= max_pending_bytes_;
      });
      if (!error_.ok()) return error_;
      pending_bytes_ += bytes;
      ++pending_operations_;
      operations_.push_back(std::move(operation));
    }
    changed_.SignalAll();
    return IOStatus::OK();
  }

  // Waits until every operation made so far ran; the first error of any.
  IOStatus WaitForPending() {
    MutexLock lock(&mu_);
    changed_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return pending_operations_ == 0;
    });
    return error_;
  }

  // The file's thread: runs the operations in order until the file is
  // destroyed and nothing is pending. After a failed one the rest are
  // dropped (counted as done, so that waiters wake and see the error).
  void RunOperations() {
    while (true) {
      Operation operation;
      bool failed;
      {
        MutexLock lock(&mu_);
        changed_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return !operations_.empty() || stopping_;
        });
        if (operations_.empty()) return;
        operation = std::move(operations_.front());
        operations_.pop_front();
        failed = !error_.ok();
      }
      IOStatus status;
      if (!failed) {
        const Slice data(operation.data.get(), operation.size);
        switch (operation.kind) {
          case Operation::Kind::kAppend:
            status = target()->Append(data, IOOptions(), nullptr);
            break;
          case Operation::Kind::kPositionedAppend:
            status = target()->PositionedAppend(data, operation.offset,
                                                IOOptions(), nullptr);
            break;
          case Operation::Kind::kInvalidateCache:
            status =
                target()->InvalidateCache(operation.offset, operation.length);
            break;
          case Operation::Kind::kFlush:
            status = target()->Flush(IOOptions(), nullptr);
            break;
          case Operation::Kind::kAllocate:
            target()
                ->Allocate(operation.offset, operation.length, IOOptions(),
                           nullptr)
                .PermitUncheckedError();
            break;
        }
      }
      {
        MutexLock lock(&mu_);
        pending_bytes_ -= operation.size;
        --pending_operations_;
        if (!status.ok() && error_.ok()) error_ = status;
      }
      changed_.SignalAll();
    }
  }

  const size_t max_pending_bytes_;
  const size_t alignment_;
  // `changed_` is signalled on every change of the state.
  Mutex mu_;
  CondVar changed_;
  std::deque<Operation> operations_ ABSL_GUARDED_BY(mu_);
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t pending_operations_ ABSL_GUARDED_BY(mu_) = 0;
  IOStatus error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Last member: started once everything it uses is constructed.
  std::thread thread_;
};

}  // namespace

WriteBehindFileSystem::WriteBehindFileSystem(
    const std::shared_ptr<rocksdb::FileSystem>& target,
    size_t max_pending_bytes)
    : FileSystemWrapper(target), max_pending_bytes_(max_pending_bytes) {}

rocksdb::IOStatus WriteBehindFileSystem::NewWritableFile(
    const std::string& path, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* dbg) {
  std::unique_ptr<FSWritableFile> file;
  IOStatus status = target()->NewWritableFile(path, options, &file, dbg);
  if (!status.ok()) return status;
  *result =
      std::make_unique<WriteBehindFile>(std::move(file), max_pending_bytes_);
  return IOStatus::OK();
}

std::unique_ptr<rocksdb::Env> NewWriteBehindEnv(
    size_t max_pending_bytes, std::shared_ptr<rocksdb::FileSystem> target) {
  return rocksdb::NewCompositeEnv(std::make_shared<WriteBehindFileSystem>(
      std::move(target), max_pending_bytes));
}

}  // namespace embedps::embedding::internal
