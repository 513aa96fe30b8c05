// An open-loop load generator: requests leave at a fixed rate whatever
// the server does, and a request's latency counts from the time it was
// meant to leave, so queueing is not hidden (tools/serve_bench).
//
// Thread safety: OpenLoop calls `request` from its sender threads at once.
#ifndef EMBEDPS_BENCH_OPEN_LOOP_H_
#define EMBEDPS_BENCH_OPEN_LOOP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"

namespace embedps::bench {

// The q-quantile (0..1) of `v` (by rank); NaN for none.
double Percentile(std::vector<double> v, double q);

struct LoadResult {
  double rate = 0;      // requests/s asked for
  double achieved = 0;  // completed/s
  uint64_t errors = 0;
  std::vector<double> latencies_ms;  // from the intended send time
};

// Request i is meant to leave at start + i / rate, for `seconds`;
// `threads` senders take the next request when free, wait for its time,
// and record completion − intended time. A request that returns an error
// counts in `errors` (its latency too).
LoadResult OpenLoop(double rate, double seconds, int threads,
                    const std::function<absl::Status(uint64_t)>& request);

}  // namespace embedps::bench

#endif  // EMBEDPS_BENCH_OPEN_LOOP_H_
