#include "embedding/admission.h"

#include <algorithm>

#include "common/key_hash.h"

namespace embedps::embedding {
namespace {

class AlwaysAdmit final : public AdmissionFilter {
 public:
  bool RecordSighting(uint64_t) override { return true; }
  uint64_t bytes() const override { return 0; }
};

class CountMinAdmission final : public AdmissionFilter {
 public:
  static constexpr int kDepth = 4;

  CountMinAdmission(uint32_t min_count, uint64_t width, uint64_t seed)
      : min_count_(min_count),
        mask_(width - 1),
        seed_(seed),
        aging_period_(width / 2),
        counters_(kDepth * width, 0) {}

  bool RecordSighting(uint64_t key) override {
    // Kirsch–Mitzenmacher: kDepth indices from two hashes.
    const uint64_t h1 = MixPair(seed_, key);
    const uint64_t h2 = Mix64(h1) | 1;
    uint8_t* cells[kDepth];
    uint32_t estimate = 255;
    for (int d = 0; d < kDepth; ++d) {
      cells[d] = &counters_[d * (mask_ + 1) + ((h1 + d * h2) & mask_)];
      estimate = std::min<uint32_t>(estimate, *cells[d]);
    }
    // Conservative update: raise only the counters at the minimum.
    const uint32_t updated = std::min<uint32_t>(estimate + 1, 255);
    for (uint8_t* cell : cells) {
      if (*cell < updated) *cell = static_cast<uint8_t>(updated);
    }
    if (++sightings_ >= aging_period_) Age();
    return updated >= min_count_;
  }

  uint64_t bytes() const override { return counters_.capacity(); }

 private:
  void Age() {
    for (uint8_t& c : counters_) c >>= 1;
    sightings_ = 0;
  }

  const uint32_t min_count_;
  const uint64_t mask_;
  const uint64_t seed_;
  const uint64_t aging_period_;
  uint64_t sightings_ = 0;
  std::vector<uint8_t> counters_;
};

class ProbabilityAdmission final : public AdmissionFilter {
 public:
  ProbabilityAdmission(double probability, uint64_t seed)
      : threshold_(
            probability >= 1.0
                ? UINT64_MAX
                : static_cast<uint64_t>(probability * 18446744073709551616.0)),
        seed_(seed) {}

  bool RecordSighting(uint64_t key) override {
    return MixPair(seed_ ^ key, ++sightings_) <= threshold_;
  }
  uint64_t bytes() const override { return 0; }

 private:
  const uint64_t threshold_;
  const uint64_t seed_;
  uint64_t sightings_ = 0;
};

uint64_t FloorPowerOfTwo(uint64_t x) {
  uint64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

}  // namespace

std::unique_ptr<AdmissionFilter> AdmissionFilter::Create(
    const AdmissionSpec& spec, uint64_t seed, int32_t num_stripes) {
  switch (spec.kind) {
    case AdmissionSpec::Kind::kAlways:
      return std::make_unique<AlwaysAdmit>();
    case AdmissionSpec::Kind::kCount: {
      const uint64_t per_stripe =
          spec.sketch_counters / CountMinAdmission::kDepth / num_stripes;
      const uint64_t width =
          std::max<uint64_t>(64, FloorPowerOfTwo(per_stripe));
      return std::make_unique<CountMinAdmission>(spec.min_count, width, seed);
    }
    case AdmissionSpec::Kind::kProbability:
      return std::make_unique<ProbabilityAdmission>(spec.probability, seed);
  }
  return nullptr;
}

}  // namespace embedps::embedding
