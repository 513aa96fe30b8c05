#include "dense/cpu_model.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/for_each_part.h"
#include "dense/blas.h"

namespace embedps::dense {

using dense_internal::BinaryCrossEntropy;
using dense_internal::Interact;
using dense_internal::InteractBackward;

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
      gradients_(layout_.num_parameters) {
  InitializeParameters<T>(spec_, layout_, absl::MakeSpan(parameters_));
}

namespace {
// Below this many samples a part's GEMMs are too small to be worth a
// thread (and their kernels lose efficiency): a batch of 512 goes to at
// most 8 threads.
constexpr int kMinPartSamples = 64;
}  // namespace

template <typename T>
void CpuModel<T>::SplitBatch(int n) {
  num_parts_ = std::max(1, std::min(DenseThreads(), n / kMinPartSamples));
  while (parts_.size() < static_cast<size_t>(num_parts_)) {
    parts_.push_back(std::make_unique<Part>(layout_));
  }
  for (int p = 0; p < num_parts_; ++p) {
    parts_[p]->begin =
        static_cast<int>(static_cast<int64_t>(n) * p / num_parts_);
    parts_[p]->end =
        static_cast<int>(static_cast<int64_t>(n) * (p + 1) / num_parts_);
  }
  logits_.resize(n);
}

template <typename T>
void CpuModel<T>::Forward(const Batch<T>& batch, Part& part) {
  const int begin = part.begin, n = part.end - part.begin;
  const int f = layout_.num_features, d = layout_.z0_dim;
  const T* dense =
      batch.dense.data() + static_cast<size_t>(begin) * spec_.num_dense;
  const T* z0 = part.bottom.empty()
                    ? dense
                    : part.bottom.Forward(parameters_.data(), dense, n);
  // Without slots the interaction's input is z0 itself: no copies.
  part.top_input = z0;
  const T* x0 = z0;
  if (!spec_.slots.empty()) {
    const size_t num_slots = spec_.slots.size();
    part.features.resize(static_cast<size_t>(n) * f);
    part.pooled.resize(static_cast<size_t>(n) * num_slots * d);
    dense_internal::GatherFeatures<T>(spec_.slots, batch.slots, begin, n, d, z0,
                                      part.pooled.data(), part.features.data());
    if (part.cross.empty()) {
      part.interaction.resize(static_cast<size_t>(n) * layout_.interaction_dim);
      Interact(part.features.data(), n, f, d, part.interaction.data());
      part.top_input = part.interaction.data();
    } else {
      // The features side by side: x0 of the cross network.
      part.x0.resize(static_cast<size_t>(n) * layout_.interaction_dim);
      for (size_t i = 0; i < part.features.size(); ++i) {
        std::copy(part.features[i], part.features[i] + d,
                  part.x0.data() + i * d);
      }
      x0 = part.x0.data();
    }
  }
  if (!part.cross.empty()) {
    part.top_input = part.cross.Forward(parameters_.data(), x0, n);
  }
  const T* logits = part.top.Forward(parameters_.data(), part.top_input, n);
  std::copy(logits, logits + n, logits_.data() + begin);
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
  SplitBatch(batch.size);
  ForEachPart(num_parts_, [&](int p) { Forward(batch, *parts_[p]); });
  last_logits_ = absl::MakeConstSpan(logits_);
  std::copy(logits_.begin(), logits_.end(), logits.begin());
  return absl::OkStatus();
}

template <typename T>
T* CpuModel<T>::PartGradients(int p) {
  if (p == 0) return gradients_.data();
  Part& part = *parts_[p];
  part.gradients.resize(gradients_.size());
  return part.gradients.data();
}

template <typename T>
void CpuModel<T>::BackwardToRows(const Batch<T>& batch,
                                 absl::Span<const absl::Span<T>> row_gradients,
                                 bool need_dz0, Part& part) {
  const int begin = part.begin, n = part.end - part.begin;
  const int f = layout_.num_features, d = layout_.z0_dim;
  const bool cross = !part.cross.empty();
  part.dinteraction.resize(static_cast<size_t>(n) * layout_.interaction_dim);
  // The cross layers' weights need d loss / d x_L whatever is below.
  part.top.BackwardInputs(
      parameters_.data(), &part.delta, n,
      need_dz0 || cross ? part.dinteraction.data() : nullptr);
  // d loss / d (the interaction's input): dinteraction, or dx0 (kCross).
  std::vector<T>* dinput = &part.dinteraction;
  if (cross) {
    if (need_dz0) part.dx0.resize(part.dinteraction.size());
    part.cross.BackwardInputs(parameters_.data(), &part.dinteraction, n,
                              need_dz0 ? part.dx0.data() : nullptr);
    dinput = &part.dx0;
  }
  if (!need_dz0) return;
  if (spec_.slots.empty()) {
    part.dz0.swap(*dinput);
    return;
  }
  part.dz0.resize(static_cast<size_t>(n) * d);
  part.dpooled.resize(part.pooled.size());
  part.dfeatures.resize(part.features.size());
  dense_internal::FeatureGradientTargets<T>(
      batch.slots, row_gradients, begin, n, d, part.dz0.data(),
      part.dpooled.data(), part.dfeatures.data());
  if (cross) {
    for (size_t i = 0; i < part.dfeatures.size(); ++i) {
      const T* from = part.dx0.data() + i * d;
      std::copy(from, from + d, part.dfeatures[i]);
    }
  } else {
    InteractBackward(part.features.data(), part.dinteraction.data(), n, f, d,
                     part.dfeatures.data());
  }
  dense_internal::UnpoolGradients<T>(spec_.slots, batch.slots, row_gradients,
                                     begin, n, d, part.dpooled.data());
}

template <typename T>
void CpuModel<T>::BackwardWeights(const Batch<T>& batch, bool below,
                                  absl::Span<T> dense_gradients, T* gradients,
                                  Part& part) {
  const int begin = part.begin, n = part.end - part.begin;
  part.top.BackwardWeights(part.top_input, n, gradients);
  part.cross.BackwardWeights(n, gradients);
  if (!below) return;
  T* dx = dense_gradients.empty()
              ? nullptr
              : dense_gradients.data() +
                    static_cast<size_t>(begin) * spec_.num_dense;
  if (part.bottom.empty()) {
    if (dx != nullptr) std::copy(part.dz0.begin(), part.dz0.end(), dx);
  } else {
    part.bottom.Backward(
        parameters_.data(),
        batch.dense.data() + static_cast<size_t>(begin) * spec_.num_dense,
        &part.dz0, n, gradients, dx);
  }
}

template <typename T>
absl::StatusOr<T> CpuModel<T>::TrainStep(
    const Batch<T>& batch, absl::Span<const absl::Span<T>> row_gradients,
    absl::Span<T> dense_gradients,
    const std::function<void()>& row_gradients_ready) {
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
  const int n = batch.size;
  SplitBatch(n);
  // What lies below the interaction: the bottom MLP, the dense features'
  // gradients. d loss / d z0 is not computed at all when nothing below the
  // top MLP needs it (a plain MLP).
  const bool below = !layout_.bottom.empty() || !dense_gradients.empty();
  const bool need_dz0 = !spec_.slots.empty() || below;
  std::vector<T> losses(num_parts_);
  ForEachPart(num_parts_, [&](int p) {
    Part& part = *parts_[p];
    Forward(batch, part);
    const int samples = part.end - part.begin;
    part.delta.resize(samples);
    losses[p] = BinaryCrossEntropy(logits_.data() + part.begin,
                                   batch.labels.data() + part.begin, samples, n,
                                   part.delta.data());
    BackwardToRows(batch, row_gradients, need_dz0, part);
  });
  last_logits_ = absl::MakeConstSpan(logits_);
  // Every row's gradient is written: the caller may send them while the
  // parts compute their weight gradients (part 0's after the callback).
  ForEachPart(num_parts_, [&](int p) {
    if (p == 0 && row_gradients_ready) row_gradients_ready();
    BackwardWeights(batch, below, dense_gradients, PartGradients(p),
                    *parts_[p]);
  });
  // The weight gradients are sums over the batch: add the other parts'
  // into part 0's, each thread over its own range of parameters.
  if (num_parts_ > 1) {
    const size_t size = gradients_.size();
    ForEachPart(num_parts_, [&](int p) {
      const size_t first = size * p / num_parts_;
      const size_t last = size * (p + 1) / num_parts_;
      for (int q = 1; q < num_parts_; ++q) {
        const T* other = parts_[q]->gradients.data();
        for (size_t i = first; i < last; ++i) gradients_[i] += other[i];
      }
    });
  }
  T loss = 0;
  for (T part_loss : losses) loss += part_loss;
  return loss;
}

template class CpuModel<float>;
template class CpuModel<double>;

}  // namespace embedps::dense
