// CountMinSketch: approximate counts of recent sightings of 64-bit hashes,
// in a fixed amount of memory (TinyLFU's frequency sketch).
//
// Depth 4, 8-bit saturating counters, conservative update (only the
// counters at the minimum are raised, which keeps over-counting low). The
// sketch ages: after `aging_period` additions every counter is halved, so
// it reflects recent sightings and never fills up. Estimates never
// under-count the sightings since the last aging (a count-min sketch only
// over-counts); older sightings count half per aging.
//
// Callers pass well-mixed 64-bit hashes (not raw keys): the counters'
// positions are taken from the hash's bits.
//
// Thread safety: none (callers hold their stripe's lock).
#ifndef EMBEDPS_EMBEDDING_INTERNAL_COUNT_MIN_SKETCH_H_
#define EMBEDPS_EMBEDDING_INTERNAL_COUNT_MIN_SKETCH_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/key_hash.h"

namespace embedps::embedding_internal {

class CountMinSketch {
 public:
  static constexpr int kDepth = 4;

  // `width`: counters per row, a power of two.
  CountMinSketch(uint64_t width, uint64_t aging_period)
      : mask_(width - 1),
        aging_period_(std::max<uint64_t>(aging_period, 1)),
        counters_(kDepth * width, 0) {}

  // Counts one sighting; returns the estimate after it (at most 255).
  uint32_t Add(uint64_t hash) {
    const uint64_t h2 = SecondHash(hash);
    size_t at[kDepth];
    uint32_t estimate = 255;
    for (int d = 0; d < kDepth; ++d) {
      at[d] = Index(hash, h2, d);
      estimate = std::min<uint32_t>(estimate, counters_[at[d]]);
    }
    const uint32_t updated = std::min<uint32_t>(estimate + 1, 255);
    for (size_t i : at) {
      if (counters_[i] < updated) counters_[i] = static_cast<uint8_t>(updated);
    }
    if (++additions_ >= aging_period_) Age();
    return updated;
  }

  uint32_t Estimate(uint64_t hash) const {
    const uint64_t h2 = SecondHash(hash);
    uint32_t estimate = 255;
    for (int d = 0; d < kDepth; ++d) {
      estimate = std::min<uint32_t>(estimate, counters_[Index(hash, h2, d)]);
    }
    return estimate;
  }

  uint64_t bytes() const { return counters_.capacity(); }

  // The state, for saving: additions since the last aging, and the
  // counters (kDepth rows of `width`).
  uint64_t additions() const { return additions_; }
  absl::Span<const uint8_t> counters() const { return counters_; }

  // Adds a saved state's counters to these (saturating) and its additions
  // to the aging count. `counters` must have this sketch's size.
  void Merge(absl::Span<const uint8_t> counters, uint64_t additions) {
    for (size_t i = 0; i < counters_.size() && i < counters.size(); ++i) {
      counters_[i] = static_cast<uint8_t>(
          std::min<uint32_t>(255, uint32_t{counters_[i]} + counters[i]));
    }
    additions_ = std::min(additions_ + additions, aging_period_ - 1);
  }

 private:
  // Kirsch–Mitzenmacher: the kDepth counters of a hash from two hashes.
  static uint64_t SecondHash(uint64_t hash) { return Mix64(hash) | 1; }
  size_t Index(uint64_t hash, uint64_t h2, int d) const {
    return d * (mask_ + 1) + ((hash + d * h2) & mask_);
  }

  void Age() {
    for (uint8_t& c : counters_) c >>= 1;
    additions_ = 0;
  }

  const uint64_t mask_;
  const uint64_t aging_period_;
  uint64_t additions_ = 0;
  std::vector<uint8_t> counters_;
};

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_COUNT_MIN_SKETCH_H_
