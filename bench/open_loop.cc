#include "bench/open_loop.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace embedps::bench {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  return v[i];
}

LoadResult OpenLoop(double rate, double seconds, int threads,
                    const std::function<absl::Status(uint64_t)>& request) {
  LoadResult result;
  result.rate = rate;
  const uint64_t total = static_cast<uint64_t>(rate * seconds);
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> errors{0};
  Mutex mu;
  std::vector<double> latencies;
  latencies.reserve(total);
  const absl::Time start = absl::Now() + absl::Milliseconds(50);
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&] {
      std::vector<double> mine;
      while (true) {
        const uint64_t i = next.fetch_add(1);
        if (i >= total) break;
        const absl::Time due = start + absl::Seconds(i / rate);
        const absl::Time now = absl::Now();
        if (due > now) absl::SleepFor(due - now);
        if (!request(i).ok()) errors.fetch_add(1);
        mine.push_back(absl::ToDoubleMilliseconds(absl::Now() - due));
      }
      MutexLock lock(&mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (std::thread& s : senders) s.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  result.achieved = elapsed > 0 ? latencies.size() / elapsed : 0;
  result.errors = errors.load();
  result.latencies_ms = std::move(latencies);
  return result;
}

}  // namespace embedps::bench
