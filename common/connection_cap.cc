#include "common/connection_cap.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace embedps {
namespace {

std::atomic<uint64_t> g_reserve{0};  // 0: the default
std::atomic<uint64_t> g_shed{0};
std::atomic<int64_t> g_last_said_ns{0};

// The most descriptors the kernel lets a process have (fs.nr_open).
uint64_t MostDescriptors() {
  std::ifstream nr_open("/proc/sys/fs/nr_open");
  uint64_t most = 0;
  return nr_open >> most ? most : uint64_t{1} << 20;
}

uint64_t ReserveAt(uint64_t limit) {
  const uint64_t set = g_reserve.load(std::memory_order_relaxed);
  const uint64_t reserve =
      set != 0 ? set : std::clamp<uint64_t>(limit / 8, 32, 4096);
  return std::min(reserve, limit / 2);
}

// A descriptor held for the one purpose of taking a pending connection
// when no other is left (the listener must see it go, or it closes).
struct Spare {
  std::mutex mu;
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
};
Spare& TheSpare() {
  static Spare* const spare = new Spare();
  return *spare;
}
// Taken at load, while descriptors are plentiful.
[[maybe_unused]] const Spare& kSpareAtLoad = TheSpare();

// Logs at most once a second (a burst sheds thousands).
void SayShed(uint64_t limit, const char* why) {
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t last = g_last_said_ns.load(std::memory_order_relaxed);
  if (now - last < 1'000'000'000 ||
      !g_last_said_ns.compare_exchange_strong(last, now)) {
    return;
  }
  static const auto log = Logger("net");
  log->warn(
      "closing new connections at once ({}; {} so far): the process may "
      "hold {} descriptors (its limit {} less a reserve of {}); raise the "
      "limit (ulimit -n, the container's nofile)",
      why, g_shed.load(std::memory_order_relaxed), limit - ReserveAt(limit),
      limit, ReserveAt(limit));
}

using Accept4Function = int (*)(int, sockaddr*, socklen_t*, int);

int NextAccept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  static const Accept4Function next =
      reinterpret_cast<Accept4Function>(dlsym(RTLD_NEXT, "accept4"));
  if (next != nullptr) return next(fd, address, length, flags);
  return static_cast<int>(syscall(SYS_accept4, fd, address, length, flags));
}

int CappedAccept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  while (true) {
    const int connection = NextAccept4(fd, address, length, flags);
    if (connection >= 0) {
      const uint64_t limit = DescriptorLimit();
      if (static_cast<uint64_t>(connection) + ReserveAt(limit) < limit) {
        return connection;
      }
      close(connection);
      g_shed.fetch_add(1, std::memory_order_relaxed);
      SayShed(limit, "over the cap");
      continue;  // the next pending one, until EAGAIN
    }
    if (errno != EMFILE && errno != ENFILE) return connection;
    // No descriptor left (files took the reserve): take one pending
    // connection with the spare and close it, and say "try again" rather
    // than the error that would close gRPC's listener.
    Spare& spare = TheSpare();
    {
      std::lock_guard<std::mutex> lock(spare.mu);
      if (spare.fd >= 0) {
        close(spare.fd);
        const int taken = NextAccept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (taken >= 0) {
          close(taken);
          g_shed.fetch_add(1, std::memory_order_relaxed);
        }
        spare.fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      }
    }
    SayShed(DescriptorLimit(), "no descriptor left");
    errno = EAGAIN;
    return -1;
  }
}

}  // namespace

void SetConnectionReserve(uint64_t reserve) {
  g_reserve.store(reserve, std::memory_order_relaxed);
}

uint64_t ConnectionReserve() { return ReserveAt(DescriptorLimit()); }

uint64_t ConnectionsShed() { return g_shed.load(std::memory_order_relaxed); }

uint64_t DescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  return limit.rlim_cur == RLIM_INFINITY ? MostDescriptors() : limit.rlim_cur;
}

uint64_t OpenDescriptors(uint64_t enough) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t open = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    if (++open > enough) break;  // the directory's own one is in the count
  }
  closedir(dir);
  return open == 0 ? 0 : open - 1;
}

absl::StatusOr<DescriptorLimits> RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(
        absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  DescriptorLimits limits;
  limits.before = DescriptorLimit();
  if (limit.rlim_cur != limit.rlim_max) {
    limit.rlim_cur =
        limit.rlim_max == RLIM_INFINITY ? MostDescriptors() : limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      return absl::InternalError(absl::StrCat("setrlimit(RLIMIT_NOFILE, ",
                                              limit.rlim_cur,
                                              "): ", std::strerror(errno)));
    }
  }
  limits.after = DescriptorLimit();
  return limits;
}

void RaiseServerDescriptorLimit() {
  static const auto log = Logger("net");
  absl::StatusOr<DescriptorLimits> limits = RaiseDescriptorLimit();
  if (!limits.ok()) {
    log->warn("{}: connections stay capped below the limit {}",
              limits.status().message(), DescriptorLimit());
    return;
  }
  const uint64_t reserve = ConnectionReserve();
  if (limits->after != limits->before) {
    log->info(
        "descriptor limit raised from {} to {}: connections past {} open "
        "descriptors are closed at once",
        limits->before, limits->after, limits->after - reserve);
  } else {
    log->info(
        "descriptor limit {}: connections past {} open descriptors are "
        "closed at once",
        limits->after, limits->after - reserve);
  }
}

}  // namespace embedps

// Interposes libc's accept4 (connection_cap.h).
extern "C" int accept4(int fd, sockaddr* address, socklen_t* length,
                       int flags) {
  return embedps::CappedAccept4(fd, address, length, flags);
}
