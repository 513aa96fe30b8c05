// The binary cross-entropy of sigmoid(z) against a label y in {0, 1},
// computed from the logit z: max(z, 0) − z·y + log(1 + e^−|z|), finite for
// every finite z (no overflow of e^z). The one formula behind the training
// loss (dense_internal::BinaryCrossEntropy) and the evaluation metric
// (MeanLogLoss).
#ifndef EMBEDPS_DENSE_LOG_LOSS_H_
#define EMBEDPS_DENSE_LOG_LOSS_H_

#include <algorithm>
#include <cmath>

namespace embedps::dense {

template <typename T>
T LogLossOfLogit(T z, T y) {
  return std::max(z, T{0}) - z * y + std::log1p(std::exp(-std::abs(z)));
}

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_LOG_LOSS_H_
