#include "dense/unique_rows.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/for_each_part.h"

namespace embedps::dense {
namespace {

// Below this many keys a thread's share is not worth its start (~20 µs).
constexpr size_t kMinKeysPerThread = 16384;

int ThreadsFor(size_t keys, int threads) {
  const size_t useful = std::max<size_t>(1, keys / kMinKeysPerThread);
  return static_cast<int>(
      std::max<size_t>(1, std::min<size_t>(useful, std::max(threads, 1))));
}

size_t TotalKeys(const UniqueRowsBatch& batch) {
  size_t keys = 0;
  for (const UniqueRowsBatch::Slot& slot : batch.slots) {
    keys += slot.index.size();
  }
  return keys;
}

}  // namespace

absl::Status ValidateUniqueRowsBatch(const ModelSpec& spec,
                                     const UniqueRowsBatch& batch,
                                     bool with_labels) {
  const size_t n = static_cast<size_t>(std::max(batch.size, 0));
  if (batch.size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size ", batch.size, " is negative"));
  }
  if (batch.dense.size() != n * spec.num_dense) {
    return absl::InvalidArgumentError(
        absl::StrCat("the batch has ", batch.dense.size(), " dense values; ", n,
                     " samples × ", spec.num_dense, " dense features need ",
                     n * spec.num_dense));
  }
  if (with_labels && batch.labels.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the batch has ", batch.labels.size(), " labels for ", n, " samples"));
  }
  if (batch.slots.size() != spec.slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the batch has ", batch.slots.size(),
                     " slots; the model has ", spec.slots.size()));
  }
  const size_t dim = static_cast<size_t>(spec.embedding_dim);
  for (size_t t = 0; t < batch.tables.size(); ++t) {
    if (batch.tables[t].size() % dim != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", t, " has ", batch.tables[t].size(),
                       " values: not whole rows of ", dim));
    }
  }
  for (size_t s = 0; s < batch.slots.size(); ++s) {
    const UniqueRowsBatch::Slot& slot = batch.slots[s];
    if (slot.table < 0 ||
        static_cast<size_t>(slot.table) >= batch.tables.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, " names table ", slot.table, " of ",
                       batch.tables.size()));
    }
    if (slot.offsets.size() != n + 1 || slot.offsets.front() != 0 ||
        static_cast<size_t>(slot.offsets.back()) != slot.index.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, ": ", slot.offsets.size(), " offsets for ",
                       n, " samples and ", slot.index.size(),
                       " keys (need samples + 1, from 0 to the keys)"));
    }
    for (size_t b = 0; b < n; ++b) {
      if (slot.offsets[b + 1] < slot.offsets[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat("slot ", s, ": offsets decrease at bag ", b));
      }
    }
    if (!slot.weights.empty() && slot.weights.size() != slot.index.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, ": ", slot.weights.size(), " weights for ",
                       slot.index.size(), " keys"));
    }
    const int64_t rows =
        static_cast<int64_t>(batch.tables[slot.table].size() / dim);
    for (size_t k = 0; k < slot.index.size(); ++k) {
      if (slot.index[k] < 0 || slot.index[k] >= rows) {
        return absl::InvalidArgumentError(absl::StrCat(
            "slot ", s, ", key ", k, ": row ", slot.index[k],
            " is outside table ", slot.table, "'s ", rows, " rows"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTableGradients(
    const UniqueRowsBatch& batch,
    absl::Span<const absl::Span<float>> table_gradients) {
  if (table_gradients.size() != batch.tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(table_gradients.size(), " table gradients for ",
                     batch.tables.size(), " tables"));
  }
  for (size_t t = 0; t < table_gradients.size(); ++t) {
    if (table_gradients[t].size() != batch.tables[t].size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table ", t, ": room for ", table_gradients[t].size(),
          " gradient values; its rows have ", batch.tables[t].size()));
    }
  }
  return absl::OkStatus();
}

void GatherSlotRows(const UniqueRowsBatch& batch, int dim,
                    absl::Span<const absl::Span<float>> slot_rows,
                    int threads) {
  const int parts = ThreadsFor(TotalKeys(batch), threads);
  ForEachPart(parts, [&](int p) {
    for (size_t s = 0; s < batch.slots.size(); ++s) {
      const UniqueRowsBatch::Slot& slot = batch.slots[s];
      const float* rows = batch.tables[slot.table].data();
      const size_t keys = slot.index.size();
      const size_t first = keys * p / parts, last = keys * (p + 1) / parts;
      float* out = slot_rows[s].data();
      for (size_t k = first; k < last; ++k) {
        const float* row = rows + static_cast<size_t>(slot.index[k]) * dim;
        float* to = out + k * dim;
        if (slot.weights.empty()) {
          std::copy_n(row, dim, to);
        } else {
          const float w = slot.weights[k];
          for (int d = 0; d < dim; ++d) to[d] = w * row[d];
        }
      }
    }
  });
}

void SumUniqueRowGradients(
    const UniqueRowsBatch& batch, int dim,
    absl::Span<const absl::Span<const float>> slot_gradients, float scale,
    absl::Span<const absl::Span<float>> table_gradients, int threads) {
  // Thread p owns rows [U·p/P, U·(p+1)/P) of every table and walks every
  // key in (slot, key) order, adding those that fall in its rows: the
  // order of the additions per row is the serial one for any P.
  const int parts = ThreadsFor(TotalKeys(batch), threads);
  ForEachPart(parts, [&](int p) {
    for (size_t t = 0; t < table_gradients.size(); ++t) {
      const size_t rows = table_gradients[t].size() / dim;
      const int64_t first = static_cast<int64_t>(rows * p / parts);
      const int64_t last = static_cast<int64_t>(rows * (p + 1) / parts);
      float* out = table_gradients[t].data();
      std::fill(out + first * dim, out + last * dim, 0.0f);
      for (size_t s = 0; s < batch.slots.size(); ++s) {
        const UniqueRowsBatch::Slot& slot = batch.slots[s];
        if (static_cast<size_t>(slot.table) != t) continue;
        const float* g = slot_gradients[s].data();
        for (size_t k = 0; k < slot.index.size(); ++k) {
          const int64_t u = slot.index[k];
          if (u < first || u >= last) continue;
          // The model's gradient is the weighted row's: times the weight
          // for the row itself.
          const float by =
              slot.weights.empty() ? scale : scale * slot.weights[k];
          const float* from = g + k * dim;
          float* target = out + u * dim;
          for (int d = 0; d < dim; ++d) target[d] += by * from[d];
        }
      }
    }
  });
}

}  // namespace embedps::dense
