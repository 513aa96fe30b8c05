// Admission: which keys that have no row yet get one.
//
// kCount keeps a count-min sketch (depth 4, 8-bit saturating counters,
// conservative update) of Pulls of keys without a row. A key is admitted on
// the Pull at which its estimated count reaches min_count. The sketch ages:
// after width/2 sightings all counters are halved (as in TinyLFU), so it
// remembers roughly the last `sketch_counters / 8` sightings and never
// fills up. A count-min sketch only over-counts: a key is never admitted
// late, but may be admitted early. The chance that a key seen min_count-1
// times is admitted early is at most (1 - e^(-1/2))^4 ≈ 2.4% at the end of
// an aging window and lower on average (admission_test measures it).
//
// kProbability admits each sighting with probability p, drawn from a hash
// of (seed, key, sighting number): deterministic for a given order of Pulls.
//
// Thread safety: none; each lock stripe owns one filter and calls it under
// its lock.
#ifndef EMBEDPS_EMBEDDING_ADMISSION_H_
#define EMBEDPS_EMBEDDING_ADMISSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "embedding/table_spec.h"

namespace embedps::embedding {

class AdmissionFilter {
 public:
  // One filter of a table with `num_stripes` stripes (the sketch's counters
  // are divided among the stripes). REQUIRES: a validated spec.
  static std::unique_ptr<AdmissionFilter> Create(const AdmissionSpec& spec,
                                                 uint64_t seed,
                                                 int32_t num_stripes);
  virtual ~AdmissionFilter() = default;

  // Records one sighting of `key` (a Pull of a key that has no row) and
  // returns whether the key is admitted by it.
  virtual bool RecordSighting(uint64_t key) = 0;

  // Bytes the filter holds in memory.
  virtual uint64_t bytes() const = 0;

  // The filter's state for a checkpoint (empty for stateless filters).
  virtual std::string SaveState() const = 0;

  // Adds a saved state to this filter's (counters add, saturating), so
  // that the states of several shards' filters combine into one.
  // INVALID_ARGUMENT if `state` is not of this filter's kind and size.
  virtual absl::Status MergeState(absl::string_view state) = 0;
};

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_ADMISSION_H_
