#include "dense/cpu_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "dense/blas.h"

namespace embedps::dense {

using dense_internal::BinaryCrossEntropy;
using dense_internal::Interact;
using dense_internal::InteractBackward;
using dense_internal::PoolBags;
using dense_internal::UnpoolBags;

template <typename T>
absl::StatusOr<std::unique_ptr<CpuModel<T>>> CpuModel<T>::Create(
    const ModelSpec& spec) {
  if (absl::Status s = ValidateModelSpec(spec); !s.ok()) return s;
  return std::unique_ptr<CpuModel>(new CpuModel(spec));
}

template <typename T>
CpuModel<T>::CpuModel(const ModelSpec& spec)
    : spec_(spec),
      layout_(LayoutOf(spec)),
      parameters_(layout_.num_parameters),
      gradients_(layout_.num_parameters),
      bottom_(layout_.bottom),
      top_(layout_.top) {
  InitializeParameters<T>(spec_, layout_, absl::MakeSpan(parameters_));
}

template <typename T>
const T* CpuModel<T>::Forward(const Batch<T>& batch) {
  const int n = batch.size, f = layout_.num_features, d = layout_.z0_dim;
  const T* z0 = bottom_.empty() ? batch.dense.data()
                                : bottom_.Forward(parameters_.data(),
                                                  batch.dense.data(), n);
  // Without slots the interaction is z0 itself: no copies.
  top_input_ = z0;
  if (!spec_.slots.empty()) {
    features_.resize(static_cast<size_t>(n) * f * d);
    interaction_.resize(static_cast<size_t>(n) * layout_.interaction_dim);
    // Per sample range: its features (z0 and the pooled bags), then their
    // interaction, while they are in cache.
    dense_internal::ForEachSampleRange(
        n, BlasThreads(), [&](int begin, int end) {
          T* features = features_.data() + static_cast<size_t>(begin) * f * d;
          for (int b = begin; b < end; ++b) {
            std::copy(z0 + static_cast<size_t>(b) * d,
                      z0 + static_cast<size_t>(b + 1) * d,
                      features_.data() + static_cast<size_t>(b) * f * d);
          }
          for (size_t s = 0; s < spec_.slots.size(); ++s) {
            PoolBags(spec_.slots[s], batch.slots[s].rows.data(),
                     batch.slots[s].offsets.data() + begin, end - begin, d,
                     static_cast<int>(s), f, features);
          }
          Interact(features, end - begin, f, d,
                   interaction_.data() +
                       static_cast<size_t>(begin) * layout_.interaction_dim);
        });
    top_input_ = interaction_.data();
  }
  const T* logits = top_.Forward(parameters_.data(), top_input_, n);
  last_logits_ = absl::MakeConstSpan(logits, n);
  return logits;
}

template <typename T>
absl::Status CpuModel<T>::Predict(const Batch<T>& batch, absl::Span<T> logits) {
  if (absl::Status s = ValidateBatch(spec_, batch, /*with_labels=*/false);
      !s.ok()) {
    return s;
  }
  if (logits.size() != static_cast<size_t>(batch.size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Predict needs room for ", batch.size, " logits, got ", logits.size()));
  }
  const T* out = Forward(batch);
  std::copy(out, out + batch.size, logits.begin());
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<T> CpuModel<T>::TrainStep(
    const Batch<T>& batch, absl::Span<const absl::Span<T>> row_gradients,
    absl::Span<T> dense_gradients) {
  if (absl::Status s = ValidateBatch(spec_, batch, /*with_labels=*/true);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateRowGradients(batch, row_gradients); !s.ok()) {
    return s;
  }
  if (!dense_gradients.empty() &&
      dense_gradients.size() != batch.dense.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense_gradients needs ", batch.dense.size(),
                     " values, got ", dense_gradients.size()));
  }
  const int n = batch.size, f = layout_.num_features, d = layout_.z0_dim;
  const T* logits = Forward(batch);
  delta_.resize(n);
  const T loss =
      BinaryCrossEntropy(logits, batch.labels.data(), n, delta_.data());

  // d loss / d z0: from the interaction's gradient, or directly the top
  // input's gradient when there are no slots. Not computed at all when
  // nothing below the top MLP needs it (a plain MLP).
  const bool need_dz0 =
      !spec_.slots.empty() || !bottom_.empty() || !dense_gradients.empty();
  dinteraction_.resize(static_cast<size_t>(n) * layout_.interaction_dim);
  top_.Backward(parameters_.data(), top_input_, &delta_, n, gradients_.data(),
                need_dz0 ? dinteraction_.data() : nullptr);
  if (!need_dz0) return loss;
  if (spec_.slots.empty()) {
    dz0_.swap(dinteraction_);
  } else {
    dfeatures_.resize(features_.size());
    dz0_.resize(static_cast<size_t>(n) * d);
    dense_internal::ForEachSampleRange(
        n, BlasThreads(), [&](int begin, int end) {
          const size_t first = static_cast<size_t>(begin) * f * d;
          InteractBackward(features_.data() + first,
                           dinteraction_.data() + static_cast<size_t>(begin) *
                                                      layout_.interaction_dim,
                           end - begin, f, d, dfeatures_.data() + first);
          for (size_t s = 0; s < spec_.slots.size(); ++s) {
            UnpoolBags(spec_.slots[s], dfeatures_.data() + first,
                       batch.slots[s].offsets.data() + begin, end - begin, d,
                       static_cast<int>(s), f, row_gradients[s].data());
          }
          // d loss / d z0 is feature 0 of every sample.
          for (int b = begin; b < end; ++b) {
            const T* src = dfeatures_.data() + static_cast<size_t>(b) * f * d;
            std::copy(src, src + d, dz0_.data() + static_cast<size_t>(b) * d);
          }
        });
  }
  if (bottom_.empty()) {
    if (!dense_gradients.empty()) {
      std::copy(dz0_.begin(), dz0_.end(), dense_gradients.begin());
    }
  } else {
    bottom_.Backward(
        parameters_.data(), batch.dense.data(), &dz0_, n, gradients_.data(),
        dense_gradients.empty() ? nullptr : dense_gradients.data());
  }
  return loss;
}

template class CpuModel<float>;
template class CpuModel<double>;

}  // namespace embedps::dense
