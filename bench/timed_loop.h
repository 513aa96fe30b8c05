// A closed loop for single-thread throughput benchmarks: calls a function
// again and again for a while and says how often it ran.
#ifndef EMBEDPS_BENCH_TIMED_LOOP_H_
#define EMBEDPS_BENCH_TIMED_LOOP_H_

#include <chrono>
#include <cstddef>

#include "absl/functional/function_ref.h"

namespace embedps::bench {

// Calls call(0), call(1), ... for `seconds` (the clock read every 64
// calls, so a call may be short) and returns calls per second times
// `units_per_call` (e.g. the keys of one call: keys/s).
inline double TimedLoop(double seconds, double units_per_call,
                        absl::FunctionRef<void(size_t)> call) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point begin = Clock::now();
  const Clock::time_point until =
      begin + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(seconds));
  size_t calls = 0;
  for (Clock::time_point now = begin; now < until;) {
    call(calls);
    if (++calls % 64 == 0) now = Clock::now();
  }
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - begin).count();
  return static_cast<double>(calls) * units_per_call / elapsed;
}

}  // namespace embedps::bench

#endif  // EMBEDPS_BENCH_TIMED_LOOP_H_
