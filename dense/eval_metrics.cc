#include "dense/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "dense/log_loss.h"

namespace embedps::dense {

double RocAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  const size_t n = scores.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Mann–Whitney: sum of the positives' ranks (ties get their mean rank).
  double positive_rank_sum = 0, positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = 0.5 * (static_cast<double>(i + 1) + j);
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positive_rank_sum += mean_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (positive_rank_sum - positives * (positives + 1) / 2) /
         (positives * negatives);
}

double MeanLogLoss(absl::Span<const float> logits,
                   absl::Span<const float> labels) {
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    sum += LogLossOfLogit<double>(logits[i], labels[i]);
  }
  return logits.empty() ? 0.0 : sum / static_cast<double>(logits.size());
}

}  // namespace embedps::dense
