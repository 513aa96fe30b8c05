// The benchmarks' way out of a step that failed: Die prints
// "<program>: <what>: <status>" on stderr and exits 1; Must does the same
// for a StatusOr and returns its value. For tools, not libraries: the
// servers a benchmark started stop with it (testing::ServerProcess kills
// its children when the process exits).
#ifndef EMBEDPS_BENCH_EXIT_ON_ERROR_H_
#define EMBEDPS_BENCH_EXIT_ON_ERROR_H_

#include <errno.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace embedps::bench {

inline void Die(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what,
               status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Must(absl::StatusOr<T> value, const char* what) {
  Die(value.status(), what);
  return *std::move(value);
}

}  // namespace embedps::bench

#endif  // EMBEDPS_BENCH_EXIT_ON_ERROR_H_
