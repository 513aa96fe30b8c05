#include "dense/synthetic_task.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/hash_random.h"
#include "common/key_hash.h"

namespace embedps::dense {
namespace {

constexpr double kTwoPi = 6.28318530717958647692;

}  // namespace

absl::StatusOr<std::unique_ptr<SyntheticTask>> SyntheticTask::Create(
    const SyntheticTaskSpec& spec) {
  if (!(spec.teacher_scale > 0) || !std::isfinite(spec.teacher_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic task teacher_scale must be finite and > 0, got ",
        spec.teacher_scale));
  }
  absl::StatusOr<std::unique_ptr<CpuModel<float>>> teacher =
      CpuModel<float>::Create(MlpModelSpec(spec.input_dim, spec.teacher_hidden,
                                           MixPair(spec.seed, 0x7eac4e7)));
  if (!teacher.ok()) return teacher.status();
  return std::unique_ptr<SyntheticTask>(
      new SyntheticTask(spec, std::move(*teacher)));
}

void SyntheticTask::Fill(int64_t first, int count, absl::Span<float> dense,
                         absl::Span<float> labels,
                         absl::Span<float> true_logits) {
  const int dim = spec_.input_dim;
  const uint64_t feature_seed = MixPair(spec_.seed, 1);
  const uint64_t label_seed = MixPair(spec_.seed, 2);
  for (int r = 0; r < count; ++r) {
    const uint64_t sample = static_cast<uint64_t>(first + r);
    for (int j = 0; j < dim; j += 2) {
      // Box–Muller: two normals from two uniforms.
      const uint64_t index = (sample * ((dim + 1) / 2) + j / 2) * 2;
      const double radius =
          std::sqrt(-2.0 * std::log(HashUnit(feature_seed, index)));
      const double angle = kTwoPi * HashUnit(feature_seed, index + 1);
      dense[static_cast<size_t>(r) * dim + j] =
          static_cast<float>(radius * std::cos(angle));
      if (j + 1 < dim) {
        dense[static_cast<size_t>(r) * dim + j + 1] =
            static_cast<float>(radius * std::sin(angle));
      }
    }
  }
  logits_.resize(count);
  Batch<float> batch;
  batch.size = count;
  batch.dense = dense.subspan(0, static_cast<size_t>(count) * dim);
  // The shapes are the task's own: Predict cannot fail.
  (void)teacher_->Predict(batch, absl::MakeSpan(logits_));
  for (int r = 0; r < count; ++r) {
    const double z = spec_.teacher_scale * logits_[r];
    const double p = 1.0 / (1.0 + std::exp(-z));
    labels[r] = HashUnit(label_seed, static_cast<uint64_t>(first + r)) <= p
                    ? 1.0f
                    : 0.0f;
    if (!true_logits.empty()) true_logits[r] = static_cast<float>(z);
  }
}

}  // namespace embedps::dense
