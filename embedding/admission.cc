#include "embedding/admission.h"

#include <algorithm>
#include <cstring>

#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "embedding/internal/count_min_sketch.h"

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
  static constexpr int kDepth = embedding_internal::CountMinSketch::kDepth;

  CountMinAdmission(uint32_t min_count, uint64_t width, uint64_t seed)
      : min_count_(min_count),
        seed_(seed),
        sketch_(width, /*aging_period=*/width / 2) {}

  bool RecordSighting(uint64_t key) override {
    return sketch_.Add(MixPair(seed_, key)) >= min_count_;
  }

  uint64_t bytes() const override { return sketch_.bytes(); }

  // Layout: sightings since the last aging (uint64, little-endian), then
  // the counters.
  std::string SaveState() const override {
    const absl::Span<const uint8_t> counters = sketch_.counters();
    std::string state(sizeof(uint64_t) + counters.size(), '\0');
    const uint64_t sightings = sketch_.additions();
    std::memcpy(state.data(), &sightings, sizeof(uint64_t));
    std::memcpy(state.data() + sizeof(uint64_t), counters.data(),
                counters.size());
    return state;
  }

  absl::Status MergeState(absl::string_view state) override {
    const size_t expected = sizeof(uint64_t) + sketch_.counters().size();
    if (state.size() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("saved count-min admission state has ", state.size(),
                       " bytes; this table's sketch needs ", expected,
                       " (was sketch_counters or num_stripes changed?)"));
    }
    uint64_t sightings;
    std::memcpy(&sightings, state.data(), sizeof(sightings));
    sketch_.Merge(
        absl::MakeConstSpan(
            reinterpret_cast<const uint8_t*>(state.data()) + sizeof(uint64_t),
            state.size() - sizeof(uint64_t)),
        sightings);
    return absl::OkStatus();
  }

 private:
  const uint32_t min_count_;
  const uint64_t seed_;
  embedding_internal::CountMinSketch sketch_;
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
          std::max<uint64_t>(64, absl::bit_floor(per_stripe));
      return std::make_unique<CountMinAdmission>(spec.min_count, width, seed);
    }
    case AdmissionSpec::Kind::kProbability:
      return std::make_unique<ProbabilityAdmission>(spec.probability, seed);
  }
  return nullptr;
}

}  // namespace embedps::embedding
