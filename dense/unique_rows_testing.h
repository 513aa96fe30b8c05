// Tests' random UniqueRowsBatch for a spec: slots alternate over two
// tables of 40 and 9 unique rows, bags of 0..3 keys (rows repeat within
// and across bags), every third slot weighted. Owns its buffers;
// Batch() borrows them. Also the same batch in bag layout (the rows
// gathered), for comparisons with Model::TrainStep.
#ifndef EMBEDPS_DENSE_UNIQUE_ROWS_TESTING_H_
#define EMBEDPS_DENSE_UNIQUE_ROWS_TESTING_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "dense/model.h"
#include "dense/model_spec.h"
#include "dense/unique_rows.h"

namespace embedps::dense {

class RandomUniqueRows {
 public:
  RandomUniqueRows(const ModelSpec& spec, int n, uint32_t seed)
      : dim_(spec.embedding_dim), n_(n) {
    std::mt19937 random(seed);
    std::normal_distribution<float> normal(0, 1);
    dense_.resize(static_cast<size_t>(n) * spec.num_dense);
    for (float& x : dense_) x = normal(random);
    for (int b = 0; b < n; ++b)
      labels_.push_back(static_cast<float>(random() % 2));
    const int rows[2] = {40, 9};
    for (int t = 0; t < 2; ++t) {
      tables_[t].resize(static_cast<size_t>(rows[t]) * dim_);
      for (float& x : tables_[t]) x = 0.1f * normal(random);
    }
    const size_t slots = spec.slots.size();
    index_.resize(slots);
    offsets_.resize(slots);
    weights_.resize(slots);
    for (size_t s = 0; s < slots; ++s) {
      const int t = static_cast<int>(s % 2);
      table_of_.push_back(t);
      offsets_[s].push_back(0);
      for (int b = 0; b < n; ++b) {
        const int keys = static_cast<int>(random() % 4);
        for (int k = 0; k < keys; ++k) {
          index_[s].push_back(static_cast<int32_t>(random() % rows[t]));
          if (s % 3 == 2) weights_[s].push_back(0.5f + 0.25f * (random() % 5));
        }
        offsets_[s].push_back(static_cast<int32_t>(index_[s].size()));
      }
    }
    // The bag layout.
    gathered_.resize(slots);
    for (size_t s = 0; s < slots; ++s) {
      for (size_t k = 0; k < index_[s].size(); ++k) {
        for (int d = 0; d < dim_; ++d) {
          const float v = tables_[table_of_[s]][index_[s][k] * dim_ + d];
          gathered_[s].push_back(weights_[s].empty() ? v : weights_[s][k] * v);
        }
      }
    }
  }

  UniqueRowsBatch Batch() const {
    UniqueRowsBatch batch;
    batch.size = n_;
    batch.dense = dense_;
    batch.labels = labels_;
    batch.tables = {tables_[0], tables_[1]};
    for (size_t s = 0; s < index_.size(); ++s) {
      batch.slots.push_back(
          {table_of_[s], index_[s], offsets_[s], weights_[s]});
    }
    return batch;
  }

  dense::Batch<float> BagLayout() const {
    dense::Batch<float> batch;
    batch.size = n_;
    batch.dense = dense_;
    batch.labels = labels_;
    for (size_t s = 0; s < index_.size(); ++s) {
      batch.slots.push_back({gathered_[s], offsets_[s]});
    }
    return batch;
  }

  // The bag-layout step on `model`, its rows' gradients summed per unique
  // row on the host (what a unique-rows step must equal): the loss, and
  // the sums in `tables` (one per table).
  absl::StatusOr<float> BagStepWithHostSums(
      Model& model, float scale,
      std::vector<std::vector<float>>& tables) const {
    std::vector<std::vector<float>> rows(index_.size());
    std::vector<absl::Span<float>> row_spans;
    std::vector<absl::Span<const float>> summed;
    for (size_t s = 0; s < index_.size(); ++s) {
      rows[s].resize(index_[s].size() * dim_);
      row_spans.push_back(absl::MakeSpan(rows[s]));
      summed.push_back(rows[s]);
    }
    absl::StatusOr<float> loss = model.TrainStep(BagLayout(), row_spans);
    if (!loss.ok()) return loss;
    tables = {std::vector<float>(tables_[0].size()),
              std::vector<float>(tables_[1].size())};
    SumUniqueRowGradients(
        Batch(), dim_, summed, scale,
        {absl::MakeSpan(tables[0]), absl::MakeSpan(tables[1])}, 1);
    return loss;
  }

  size_t keys(size_t slot) const { return index_[slot].size(); }
  size_t table_floats(int t) const { return tables_[t].size(); }

 private:
  int dim_, n_;
  std::vector<float> dense_, labels_, tables_[2];
  std::vector<int> table_of_;
  std::vector<std::vector<int32_t>> index_, offsets_;
  std::vector<std::vector<float>> weights_, gathered_;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_UNIQUE_ROWS_TESTING_H_
