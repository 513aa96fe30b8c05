#include "dense/eval_metrics.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

// O(n²) definition: P(score+ > score-) + ½ P(tie).
double PairwiseAuc(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[i] == 1 && y[j] == 0) {
        pairs += 1;
        wins += s[i] > s[j] ? 1 : (s[i] == s[j] ? 0.5 : 0);
      }
    }
  }
  return wins / pairs;
}

TEST(RocAucTest, MatchesThePairwiseDefinitionWithTies) {
  std::mt19937 rng(3);
  std::vector<float> scores(500), labels(500);
  for (size_t i = 0; i < scores.size(); ++i) {
    scores[i] = static_cast<float>(rng() % 20);  // many ties
    labels[i] = (rng() % 100) < 30 + 2 * scores[i] ? 1.0f : 0.0f;
  }
  EXPECT_NEAR(RocAuc(scores, labels), PairwiseAuc(scores, labels), 1e-12);
}

TEST(RocAucTest, PerfectReversedAndDegenerate) {
  EXPECT_DOUBLE_EQ(
      RocAuc(std::vector<float>{1, 2, 3, 4}, std::vector<float>{0, 0, 1, 1}),
      1.0);
  EXPECT_DOUBLE_EQ(
      RocAuc(std::vector<float>{1, 2, 3, 4}, std::vector<float>{1, 1, 0, 0}),
      0.0);
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{1, 2}, std::vector<float>{1, 1}),
                   0.5);
}

TEST(MeanLogLossTest, StableForLargeLogits) {
  EXPECT_NEAR(MeanLogLoss(std::vector<float>{0}, std::vector<float>{1}),
              std::log(2.0), 1e-12);
  EXPECT_NEAR(MeanLogLoss(std::vector<float>{-100}, std::vector<float>{1}),
              100.0, 1e-9);
  EXPECT_NEAR(MeanLogLoss(std::vector<float>{100}, std::vector<float>{1}), 0.0,
              1e-9);
}

}  // namespace
}  // namespace embedps::dense
