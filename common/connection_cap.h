// Keeps a server accepting connections whatever bursts of them arrive: the
// connections it accepts are capped below the process's descriptor limit.
//
// gRPC 1.51 stops accepting on a port for good once accept4 fails with
// EMFILE (grpc/grpc#20418, fixed upstream in later releases): after one
// burst of connections past the descriptor limit the server never takes a
// new connection again, even once the burst is gone, while its existing
// connections keep working (it looks healthy to them). gRPC 1.51 has no
// setting for a connection cap, so this library takes the call it makes:
// it defines `accept4`, which the dynamic linker binds in place of libc's
// for every library of a binary that links this one (gRPC's listener
// included; cpp-httplib calls accept, which is left alone), and calls the
// next definition (libc's, or a sanitizer's) through dlsym(RTLD_NEXT). On
// top of it:
//  - a connection whose descriptor lands among the top `reserve` numbers
//    of the limit (descriptors are handed out lowest first, so at least
//    limit - reserve are open) is closed at once and the next one is
//    taken: the client sees its connection closed and retries, and the
//    reserve stays free for files, outgoing channels and the next
//    connection;
//  - should accept still fail for want of descriptors (files took the
//    reserve), one pending connection is taken with a descriptor kept for
//    that purpose and closed at once, and EAGAIN is returned: the
//    listener stays armed instead of closing.
// The limit is read at every accept, so a limit changed while the server
// runs (prlimit --pid) is followed. Linux only.
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_COMMON_CONNECTION_CAP_H_
#define EMBEDPS_COMMON_CONNECTION_CAP_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace embedps {

// Descriptors kept free of connections: `reserve` (0: limit / 8, within
// [32, 4096], the default).
void SetConnectionReserve(uint64_t reserve);
// The reserve at the current limit.
uint64_t ConnectionReserve();

// Connections closed at once since the process started (over the cap, or
// taken to keep the listener alive when no descriptor was left).
uint64_t ConnectionsShed();

// The process's limit of open descriptors (RLIMIT_NOFILE's soft value;
// fs.nr_open where it is unlimited).
uint64_t DescriptorLimit();

// Descriptors this process has open. Exact below `enough`; at or above it,
// some number >= `enough` (counting stops early).
uint64_t OpenDescriptors(uint64_t enough = UINT64_MAX);

// Raises the soft limit of open descriptors to the hard limit (a server's
// connections are capped by it). Returns the limit before and after;
// INTERNAL if setrlimit fails.
struct DescriptorLimits {
  uint64_t before = 0;
  uint64_t after = 0;
};
absl::StatusOr<DescriptorLimits> RaiseDescriptorLimit();

// What a server does at start: RaiseDescriptorLimit, and logs the limit
// and the connection cap (a warning if the limit could not be raised).
void RaiseServerDescriptorLimit();

}  // namespace embedps

#endif  // EMBEDPS_COMMON_CONNECTION_CAP_H_
