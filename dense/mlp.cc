#include "dense/mlp.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "dense/blas.h"

namespace embedps::dense {
namespace {

// A double in [0, 1) from 53 bits of a hash: portable, unlike <random>'s
// distributions.
double Unit(uint64_t seed, uint64_t index) {
  return static_cast<double>(MixPair(seed, index) >> 11) *
         (1.0 / 9007199254740992.0);
}

}  // namespace

template <typename T>
absl::StatusOr<std::unique_ptr<Mlp<T>>> Mlp<T>::Create(const MlpSpec& spec) {
  if (spec.input_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MLP input_dim must be > 0, got ", spec.input_dim));
  }
  for (size_t i = 0; i < spec.hidden.size(); ++i) {
    if (spec.hidden[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MLP hidden[", i, "] must be > 0, got ", spec.hidden[i]));
    }
  }
  return std::unique_ptr<Mlp>(new Mlp(spec));
}

template <typename T>
Mlp<T>::Mlp(const MlpSpec& spec) {
  widths_.push_back(spec.input_dim);
  widths_.insert(widths_.end(), spec.hidden.begin(), spec.hidden.end());
  widths_.push_back(1);
  size_t total = 0;
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    offsets_.push_back(total);
    total += static_cast<size_t>(widths_[l + 1]) * widths_[l] + widths_[l + 1];
  }
  parameters_.assign(total, T{0});
  gradients_.assign(total, T{0});
  activations_.resize(widths_.size() - 1);
  // Xavier (Glorot) uniform weights, zero biases.
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    const int in = widths_[l], out = widths_[l + 1];
    const double limit = std::sqrt(6.0 / (in + out));
    for (size_t i = 0; i < static_cast<size_t>(in) * out; ++i) {
      const size_t index = offsets_[l] + i;
      parameters_[index] =
          static_cast<T>(limit * (2.0 * Unit(spec.seed, index) - 1.0));
    }
  }
}

template <typename T>
absl::Status Mlp<T>::CheckBatch(absl::Span<const T> x, int batch) const {
  if (batch <= 0 || x.size() != static_cast<size_t>(batch) * widths_[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLP batch of ", batch, " rows of ", widths_[0], " inputs needs ",
        static_cast<int64_t>(batch) * widths_[0], " values, got ", x.size()));
  }
  return absl::OkStatus();
}

template <typename T>
void Mlp<T>::Forward(const T* x, int batch) {
  const T* input = x;
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    const int in = widths_[l], out = widths_[l + 1];
    const T* w = parameters_.data() + offsets_[l];
    const T* b = w + static_cast<size_t>(out) * in;
    std::vector<T>& z = activations_[l];
    z.resize(static_cast<size_t>(batch) * out);
    for (int r = 0; r < batch; ++r) std::copy(b, b + out, z.begin() + r * out);
    // Z = X · Wᵀ + b
    Gemm<T>(false, true, batch, out, in, T{1}, input, w, T{1}, z.data());
    if (l + 2 < widths_.size()) {
      for (T& v : z) v = std::max(v, T{0});
    }
    input = z.data();
  }
}

template <typename T>
absl::Status Mlp<T>::Predict(absl::Span<const T> x, int batch,
                             absl::Span<T> logits) {
  if (absl::Status s = CheckBatch(x, batch); !s.ok()) return s;
  if (logits.size() != static_cast<size_t>(batch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLP Predict needs room for ", batch, " logits, got ", logits.size()));
  }
  Forward(x.data(), batch);
  std::copy(activations_.back().begin(), activations_.back().end(),
            logits.begin());
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<T> Mlp<T>::TrainStep(absl::Span<const T> x,
                                    absl::Span<const T> labels, int batch,
                                    absl::Span<T> input_gradient) {
  if (absl::Status s = CheckBatch(x, batch); !s.ok()) return s;
  if (labels.size() != static_cast<size_t>(batch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLP batch of ", batch, " rows has ", labels.size(), " labels"));
  }
  for (T y : labels) {
    if (!(y >= T{0} && y <= T{1})) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", y, " is outside [0, 1]"));
    }
  }
  if (!input_gradient.empty() && input_gradient.size() != x.size()) {
    return absl::InvalidArgumentError(absl::StrCat("input_gradient needs ",
                                                   x.size(), " values, got ",
                                                   input_gradient.size()));
  }
  Forward(x.data(), batch);

  // Loss and its gradient at the logits: mean over the batch of
  // max(z, 0) - z·y + log(1 + e^-|z|), whose derivative is σ(z) - y.
  const std::vector<T>& logits = activations_.back();
  std::vector<T> delta(batch);
  T loss = 0;
  for (int r = 0; r < batch; ++r) {
    const T z = logits[r], y = labels[r];
    loss += std::max(z, T{0}) - z * y + std::log1p(std::exp(-std::abs(z)));
    const T sigmoid = z >= 0 ? T{1} / (T{1} + std::exp(-z))
                             : std::exp(z) / (T{1} + std::exp(z));
    delta[r] = (sigmoid - y) / static_cast<T>(batch);
  }
  loss /= static_cast<T>(batch);

  // Backward, last layer first: dW = dZᵀ · X, db = Σ dZ, dX = dZ · W.
  std::vector<T> delta_in;
  for (size_t l = widths_.size() - 1; l-- > 0;) {
    const int in = widths_[l], out = widths_[l + 1];
    const T* input = l == 0 ? x.data() : activations_[l - 1].data();
    const T* w = parameters_.data() + offsets_[l];
    T* dw = gradients_.data() + offsets_[l];
    T* db = dw + static_cast<size_t>(out) * in;
    Gemm<T>(true, false, out, in, batch, T{1}, delta.data(), input, T{0}, dw);
    std::fill(db, db + out, T{0});
    for (int r = 0; r < batch; ++r) {
      for (int o = 0; o < out; ++o)
        db[o] += delta[static_cast<size_t>(r) * out + o];
    }
    if (l == 0 && input_gradient.empty()) break;
    delta_in.assign(static_cast<size_t>(batch) * in, T{0});
    Gemm<T>(false, false, batch, in, out, T{1}, delta.data(), w, T{0},
            delta_in.data());
    if (l == 0) {
      std::copy(delta_in.begin(), delta_in.end(), input_gradient.begin());
      break;
    }
    // Through the ReLU of layer l-1's output.
    const std::vector<T>& a = activations_[l - 1];
    for (size_t i = 0; i < delta_in.size(); ++i) {
      if (a[i] <= T{0}) delta_in[i] = T{0};
    }
    delta.swap(delta_in);
  }
  return loss;
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace embedps::dense
