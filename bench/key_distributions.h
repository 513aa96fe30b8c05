// Key streams for benchmarks: Zipf-distributed ranks and a scramble from
// rank to key, so hot keys spread over shards, stripes and hash slots like
// real feature ids. Header-only; not for production code.
#ifndef EMBEDPS_BENCH_KEY_DISTRIBUTIONS_H_
#define EMBEDPS_BENCH_KEY_DISTRIBUTIONS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/key_hash.h"

namespace embedps::bench {

// The key of the row with rank `rank` (bijective).
inline uint64_t KeyOfRank(uint64_t rank) { return Mix64(rank ^ 0x5bd1e995ull); }

// Draws ranks in [0, n) with P(r) ∝ 1/(r+1)^s, by inverting the CDF
// (8 bytes of table per rank).
class ZipfRanks {
 public:
  ZipfRanks(uint64_t n, double s) : cdf_(n) {
    double sum = 0;
    for (uint64_t r = 0; r < n; ++r) {
      sum += std::pow(static_cast<double>(r + 1), -s);
      cdf_[r] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }

  uint64_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return std::min<uint64_t>(
        std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin(),
        cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

}  // namespace embedps::bench

#endif  // EMBEDPS_BENCH_KEY_DISTRIBUTIONS_H_
