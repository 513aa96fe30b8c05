#include "common/connection_cap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/mutex.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps {
namespace {

// A listening socket on a free loopback port and a thread that accepts
// from it as a server does (what gRPC's listener does), remembering
// whether accept ever failed for want of descriptors.
class Acceptor {
 public:
  Acceptor() {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(
        bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
        0);
    EXPECT_EQ(listen(listener_, 4096), 0);
    socklen_t length = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        pollfd ready{listener_, POLLIN, 0};
        if (poll(&ready, 1, 20) <= 0) continue;
        const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        MutexLock lock(&mu_);
        if (fd >= 0) {
          accepted_.push_back(fd);
        } else if (errno == EMFILE || errno == ENFILE) {
          ran_out_ = true;
        }
      }
    });
  }
  ~Acceptor() {
    stop_.store(true);
    thread_.join();
    CloseAccepted();
    close(listener_);
  }
  int port() const { return port_; }
  size_t accepted() {
    MutexLock lock(&mu_);
    return accepted_.size();
  }
  // Whether accept ever failed for want of descriptors.
  bool ran_out() {
    MutexLock lock(&mu_);
    return ran_out_;
  }
  void CloseAccepted() {
    MutexLock lock(&mu_);
    for (int fd : accepted_) close(fd);
    accepted_.clear();
  }

 private:
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  Mutex mu_;
  std::vector<int> accepted_ ABSL_GUARDED_BY(mu_);
  bool ran_out_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Starts a connect without waiting for it; -1 if no descriptor is left.
int StartConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  return fd;
}

bool WaitFor(absl::FunctionRef<bool()> condition, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

TEST(ConnectionCapTest, CountsAndRaisesTheLimit) {
  const uint64_t before = OpenDescriptors();
  const int extra = open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_EQ(OpenDescriptors(), before + 1);
  EXPECT_GE(OpenDescriptors(/*enough=*/2), 2u);
  close(extra);
  ASSERT_OK_AND_ASSIGN(DescriptorLimits limits, RaiseDescriptorLimit());
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  EXPECT_EQ(limits.after, DescriptorLimit());
  EXPECT_GE(limits.after, limits.before);
  EXPECT_TRUE(limit.rlim_cur == limit.rlim_max ||
              limit.rlim_max == RLIM_INFINITY);
}

// Runs 300 connects to `port` in a child process (its descriptors are not
// this process's) and leaves them open until the child is killed.
pid_t ConnectFromAnotherProcess(int port, const rlimit& limit) {
  const pid_t child = fork();
  if (child == 0) {
    setrlimit(RLIMIT_NOFILE, &limit);
    for (int i = 0; i < 300; ++i) StartConnect(port);
    pause();
    _exit(0);
  }
  return child;
}

void Kill(pid_t child) {
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// The process's descriptor limit lowered to what it has open plus 100
// while in scope (restored however the test ends).
class LowLimit {
 public:
  LowLimit() {
    getrlimit(RLIMIT_NOFILE, &original_);
    low_ = original_;
    low_.rlim_cur = OpenDescriptors() + 100;
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &low_), 0);
  }
  ~LowLimit() { EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &original_), 0); }
  const rlimit& original() const { return original_; }
  const rlimit& low() const { return low_; }

 private:
  rlimit original_{};
  rlimit low_{};
};

// A burst of connections past the limit: those beyond the cap are closed
// at once, accept never fails for want of descriptors (gRPC 1.51 would
// close its listener), and the next connection after the burst is taken.
TEST(ConnectionCapTest, ABurstPastTheLimitIsCappedAndAcceptGoesOn) {
  Acceptor acceptor;
  const LowLimit limit;
  SetConnectionReserve(32);
  const uint64_t shed_before = ConnectionsShed();
  const pid_t clients =
      ConnectFromAnotherProcess(acceptor.port(), limit.original());
  ASSERT_GT(clients, 0);
  // Accepting all 300 would take 300 descriptors here.
  EXPECT_TRUE(WaitFor(
      [&] {
        return acceptor.accepted() + (ConnectionsShed() - shed_before) >= 300;
      },
      absl::Seconds(10)));
  EXPECT_FALSE(acceptor.ran_out());
  EXPECT_LE(acceptor.accepted(), 100u - 32u);
  EXPECT_GT(ConnectionsShed() - shed_before, 200u);
  EXPECT_GT(OpenDescriptors(), 30u);
  EXPECT_LT(OpenDescriptors(), limit.low().rlim_cur - 32 + 1);

  Kill(clients);
  acceptor.CloseAccepted();
  const int late = StartConnect(acceptor.port());
  ASSERT_GE(late, 0);
  EXPECT_TRUE(
      WaitFor([&] { return acceptor.accepted() >= 1; }, absl::Seconds(5)));
  close(late);
  acceptor.CloseAccepted();
  SetConnectionReserve(0);
}

// Files took every descriptor: a pending connection is taken with the
// spare and closed, accept says EAGAIN (never EMFILE), and once files
// close connections are accepted again.
TEST(ConnectionCapTest, NoDescriptorLeftClosesAPendingConnection) {
  Acceptor acceptor;
  const LowLimit limit;
  std::vector<int> files;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
    files.push_back(fd);
  }
  const uint64_t shed_before = ConnectionsShed();
  const pid_t clients =
      ConnectFromAnotherProcess(acceptor.port(), limit.original());
  ASSERT_GT(clients, 0);
  EXPECT_TRUE(WaitFor([&] { return ConnectionsShed() > shed_before; },
                      absl::Seconds(10)));
  EXPECT_FALSE(acceptor.ran_out());
  EXPECT_EQ(acceptor.accepted(), 0u);
  Kill(clients);
  for (int fd : files) close(fd);
  // The child's connections that were still queued, then a new one.
  const int late = StartConnect(acceptor.port());
  ASSERT_GE(late, 0);
  EXPECT_TRUE(
      WaitFor([&] { return acceptor.accepted() >= 1; }, absl::Seconds(5)));
  close(late);
  EXPECT_FALSE(acceptor.ran_out());
}

}  // namespace
}  // namespace embedps
