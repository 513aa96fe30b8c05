#include "embedding/admission.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/key_hash.h"

namespace embedps::embedding {
namespace {

absl::Status MergeNothing(absl::string_view state) {
  if (state.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "saved admission state has ", state.size(),
      " bytes but this table's admission policy keeps no state (was the "
      "admission kind changed?)"));
}

class AlwaysAdmit final : public AdmissionFilter {
 public:
  bool RecordSighting(uint64_t) override { return true; }
  uint64_t bytes() const override { return 0; }
  std::string SaveState() const override { return ""; }
  absl::Status MergeState(absl::string_view state) override {
    return MergeNothing(state);
  }
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

  // Layout: sightings since the last aging (uint64, little-endian), then
  // the counters.
  std::string SaveState() const override {
    std::string state(sizeof(uint64_t) + counters_.size(), '\0');
    std::memcpy(state.data(), &sightings_, sizeof(uint64_t));
    std::memcpy(state.data() + sizeof(uint64_t), counters_.data(),
                counters_.size());
    return state;
  }

  absl::Status MergeState(absl::string_view state) override {
    if (state.size() != sizeof(uint64_t) + counters_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("saved count-min admission state has ", state.size(),
                       " bytes; this table's sketch needs ",
                       sizeof(uint64_t) + counters_.size(),
                       " (was sketch_counters or num_stripes changed?)"));
    }
    uint64_t sightings;
    std::memcpy(&sightings, state.data(), sizeof(sightings));
    const uint8_t* saved =
        reinterpret_cast<const uint8_t*>(state.data()) + sizeof(uint64_t);
    for (size_t i = 0; i < counters_.size(); ++i) {
      counters_[i] = static_cast<uint8_t>(
          std::min<uint32_t>(255, uint32_t{counters_[i]} + saved[i]));
    }
    sightings_ = std::min(sightings_ + sightings, aging_period_ - 1);
    return absl::OkStatus();
  }

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
  std::string SaveState() const override { return ""; }
  absl::Status MergeState(absl::string_view state) override {
    return MergeNothing(state);
  }

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
