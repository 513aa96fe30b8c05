// Evaluation metrics of a binary classifier: ROC AUC and log loss.
// Thread safety: pure functions.
#ifndef EMBEDPS_DENSE_EVAL_METRICS_H_
#define EMBEDPS_DENSE_EVAL_METRICS_H_

#include "absl/types/span.h"

namespace embedps::dense {

// Area under the ROC curve of `scores` (any monotone scale: logits or
// probabilities) for 0/1 `labels`: the probability that a random positive
// scores above a random negative, ties counting one half. Exact (sorts
// the scores). 0.5 when either class is absent. REQUIRES: equal sizes.
double RocAuc(absl::Span<const float> scores, absl::Span<const float> labels);

// Mean binary cross-entropy of `labels` under sigmoid(`logits`), computed
// from the logits (finite for any finite logit). 0 for empty input.
double MeanLogLoss(absl::Span<const float> logits,
                   absl::Span<const float> labels);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_EVAL_METRICS_H_
