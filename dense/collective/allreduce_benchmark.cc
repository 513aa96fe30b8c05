// allreduce_benchmark: Gloo AllReduce (sum) bus bandwidth between two
// processes on loopback, next to a raw TCP transfer between the same two
// processes in the same run.
//
// Bus bandwidth = bytes · 2(n-1)/n / time (n = 2: bytes / time): the bytes
// each rank must send and receive, per second. The raw figure moves the
// same bytes the same way — each process sends `bytes` to the other while
// receiving `bytes` from it over one TCP connection — so the ratio says
// what Gloo keeps of the loopback link.
//
// Not a test: forks one child (rank 1), prints a table, exits.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "dense/collective/file_store.h"
#include "dense/collective/gloo_communicator.h"

ABSL_FLAG(std::string, sizes_mb, "1,4,16,64", "buffer sizes in MiB");
ABSL_FLAG(double, seconds, 1.0, "about this long per size and method");

namespace embedps::dense {
namespace {

int Rounds(size_t bytes) {
  // ~seconds at a few GB/s; at least 5.
  const double target = absl::GetFlag(FLAGS_seconds) * 3e9 / bytes;
  return std::max(5, static_cast<int>(target));
}

bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t sent = send(fd, data, n, 0);
    if (sent <= 0) return false;
    data += sent;
    n -= sent;
  }
  return true;
}

bool RecvAll(int fd, char* data, size_t n) {
  while (n > 0) {
    const ssize_t got = recv(fd, data, n, 0);
    if (got <= 0) return false;
    data += got;
    n -= got;
  }
  return true;
}

// Both processes: stream `rounds` × `bytes` to the other while receiving
// as much, full duplex, after one untimed round that also touches every
// page. Returns seconds per round.
double RawExchange(int fd, size_t bytes, int rounds) {
  std::vector<char> out(bytes, 1), in(bytes);
  const auto exchange = [&](int n) {
    std::thread sender([&] {
      for (int r = 0; r < n; ++r) {
        if (!SendAll(fd, out.data(), bytes)) std::abort();
      }
    });
    for (int r = 0; r < n; ++r) {
      if (!RecvAll(fd, in.data(), bytes)) std::abort();
    }
    sender.join();
  };
  exchange(1);
  const absl::Time start = absl::Now();
  exchange(rounds);
  return absl::ToDoubleSeconds(absl::Now() - start) / rounds;
}

double GlooAllReduce(Communicator& comm, size_t bytes, int rounds) {
  std::vector<float> buffer(bytes / sizeof(float), 1.0f);
  if (!comm.AllReduce(absl::MakeSpan(buffer), ReduceOp::kSum).ok()) {
    std::abort();
  }
  if (!comm.Barrier().ok()) std::abort();
  const absl::Time start = absl::Now();
  for (int r = 0; r < rounds; ++r) {
    if (!comm.AllReduce(absl::MakeSpan(buffer), ReduceOp::kSum).ok()) {
      std::abort();
    }
  }
  return absl::ToDoubleSeconds(absl::Now() - start) / rounds;
}

int Run() {
  std::vector<size_t> sizes;
  for (absl::string_view mb :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes_mb), ',')) {
    sizes.push_back(std::stoul(std::string(mb)) << 20);
  }
  const std::string dir = absl::StrCat("/tmp/allreduce_benchmark_", getpid());

  // The raw link: a listening socket made before the fork.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) !=
          0) {
    std::perror("listen");
    return 1;
  }

  const pid_t child = fork();
  const int rank = child == 0 ? 1 : 0;
  int fd = -1;
  if (rank == 1) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
      std::perror("connect");
      _exit(1);
    }
  } else {
    fd = accept(listener, nullptr, nullptr);
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  auto store = CreateFileStore(dir);
  if (!store.ok()) return 1;
  GlooOptions options;
  options.rank = rank;
  options.world_size = 2;
  auto comm = CreateGlooCommunicator(options, store->get());
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  if (rank == 0) {
    std::printf("%10s %8s %18s %18s %8s\n", "bytes", "rounds",
                "gloo busbw MB/s", "raw TCP MB/s", "ratio");
  }
  for (size_t bytes : sizes) {
    const int rounds = Rounds(bytes);
    const double raw = RawExchange(fd, bytes, rounds);
    const double gloo = GlooAllReduce(**comm, bytes, rounds);
    if (rank == 0) {
      const double raw_mbs = bytes / raw / 1e6, gloo_mbs = bytes / gloo / 1e6;
      std::printf("%10zu %8d %18.0f %18.0f %8.2f\n", bytes, rounds, gloo_mbs,
                  raw_mbs, gloo_mbs / raw_mbs);
      std::fflush(stdout);
    }
  }
  close(fd);
  if (rank == 1) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return 0;
}

}  // namespace
}  // namespace embedps::dense

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::dense::Run();
}
