#include "common/file_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace embedps {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int error = errno;
  return ErrnoStatus(error, absl::StrCat("cannot ", what, " '", path,
                                         "': ", std::strerror(error)));
}

// Closes a file descriptor on scope exit.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::Status ErrnoStatus(int error, absl::string_view message) {
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case ENOTDIR:
    case EISDIR:
    case EROFS:
    case EEXIST:
    case ENAMETOOLONG:
    case ELOOP:
    case EXDEV:
    case EINVAL:
      return absl::FailedPreconditionError(message);
    default:
      return absl::UnavailableError(message);
  }
}

uint32_t Crc32(absl::string_view bytes, uint32_t crc) {
  // zlib takes uInt lengths: feed large inputs in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  while (!bytes.empty()) {
    const size_t n = std::min(bytes.size(), kPiece);
    crc = static_cast<uint32_t>(
        crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()),
              static_cast<uInt>(n)));
    bytes.remove_prefix(n);
  }
  return crc;
}

absl::Status ReadFileInChunks(
    const std::string& path,
    absl::FunctionRef<void(absl::string_view chunk)> visit,
    PageCache page_cache) {
  // Direct IO wants buffer, offsets and lengths aligned to the logical
  // block size; 4 KiB covers every common disk. Every read but the file's
  // last returns a whole chunk, so offsets stay aligned.
  constexpr size_t kAlignment = 4096;
  constexpr size_t kChunk = size_t{8} << 20;
  int fd = -1;
  if (page_cache == PageCache::kBypass) {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    // EINVAL: the file system has no direct IO (tmpfs, some FUSE).
    if (fd < 0 && errno != EINVAL) return ErrnoError("open", path);
  }
  const bool direct = fd >= 0;
  if (!direct) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FileDescriptor file(fd);
  if (file.get() < 0) return ErrnoError("open", path);
  if (!direct) posix_fadvise(file.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<char, decltype(&std::free)> buffer(
      static_cast<char*>(std::aligned_alloc(kAlignment, kChunk)), &std::free);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory for a read buffer of '", path, "'"));
  }
  while (true) {
    const ssize_t n = read(file.get(), buffer.get(), kChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read", path);
    }
    if (n == 0) return absl::OkStatus();
    visit(absl::string_view(buffer.get(), static_cast<size_t>(n)));
  }
}

absl::StatusOr<uint32_t> FileCrc32(const std::string& path) {
  uint32_t crc = 0;
  const absl::Status status = ReadFileInChunks(
      path, [&](absl::string_view chunk) { crc = Crc32(chunk, crc); });
  if (!status.ok()) return status;
  return crc;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  FileDescriptor fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("open", path);
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read", path);
    }
    if (n == 0) return contents;
    contents.append(buffer, static_cast<size_t>(n));
  }
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes) {
  const std::string temporary = path + ".tmp";
  {
    FileDescriptor fd(open(temporary.c_str(),
                           O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return ErrnoError("create", temporary);
    while (!bytes.empty()) {
      const ssize_t n = write(fd.get(), bytes.data(), bytes.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("write", temporary);
      }
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    if (fsync(fd.get()) != 0) return ErrnoError("sync", temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return ErrnoError(absl::StrCat("rename '", temporary, "' to"), path);
  }
  return absl::OkStatus();
}

absl::Status SyncPath(const std::string& path) {
  FileDescriptor fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("open", path);
  if (fsync(fd.get()) != 0) return ErrnoError("sync", path);
  return absl::OkStatus();
}

}  // namespace embedps
