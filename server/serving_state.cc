#include "server/serving_state.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/status_macros.h"
#include "embedding/initializer.h"
#include "embedding/table_spec.h"

namespace embedps::server {

ServingTable::ServingTable(std::shared_ptr<TableRegistry> registry,
                           embedding::Table* table, proto::TableConfig config,
                           std::vector<std::shared_ptr<const Overlay>> overlays)
    : registry_(std::move(registry)),
      table_(table),
      config_(std::move(config)),
      codec_(config_.serving().storage(), config_.dim()),
      overlays_(std::move(overlays)) {}

void ServingTable::Default(uint64_t key, absl::Span<float> out) const {
  if (config_.serving().unknown_keys() == proto::ServingConfig::ZEROS) {
    std::fill(out.begin(), out.end(), 0.0f);
  } else {
    embedding::InitialRow(table_->spec().initializer, table_->spec().seed, key,
                          out);
  }
}

absl::Status ServingTable::Read(absl::Span<const uint64_t> keys,
                                absl::Span<float> values) const {
  const size_t dim = config_.dim();
  // An overlay may hold millions of rows (an incremental checkpoint): each
  // key's probes are prefetched kAhead keys ahead, and a row found is
  // prefetched then and copied once every key was probed.
  constexpr size_t kAhead = 8;
  static constexpr float kRemovedRow = 0;
  std::vector<const float*> answers(keys.size(), nullptr);
  // Keys no overlay answers go to the base in one batch.
  std::vector<uint64_t> base_keys;
  std::vector<uint32_t> base_positions;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kAhead < keys.size()) {
      for (const std::shared_ptr<const Overlay>& overlay : overlays_) {
        overlay->rows.prefetch(keys[i + kAhead]);
      }
    }
    for (const std::shared_ptr<const Overlay>& overlay : overlays_) {
      auto it = overlay->rows.find(keys[i]);
      if (it == overlay->rows.end()) continue;
      if (it->second == Overlay::kRemoved) {
        answers[i] = &kRemovedRow;
        break;
      }
      answers[i] = overlay->values.data() + size_t{it->second} * dim;
      for (size_t line = 0; line < dim; line += 64 / sizeof(float)) {
        __builtin_prefetch(answers[i] + line);
      }
      break;
    }
    if (answers[i] == nullptr) {
      base_keys.push_back(keys[i]);
      base_positions.push_back(static_cast<uint32_t>(i));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (answers[i] == nullptr) continue;
    float* out = values.data() + i * dim;
    if (answers[i] == &kRemovedRow) {
      // A row that training removed reads as a key without a row.
      Default(keys[i], absl::MakeSpan(out, dim));
    } else {
      std::memcpy(out, answers[i], dim * sizeof(float));
    }
  }
  if (base_keys.empty()) return absl::OkStatus();
  const size_t stored = static_cast<size_t>(codec_.stored_floats());
  std::vector<float> rows(base_keys.size() * stored);
  std::unique_ptr<bool[]> found(new bool[base_keys.size()]);
  // Float32 rows come back with their defaults; stored rows are decoded
  // and defaults made for the served dim.
  const auto missing =
      codec_.identity() && config_.serving().unknown_keys() ==
                               proto::ServingConfig::INITIAL_VECTOR
          ? embedding::Table::MissingRows::kInitialValues
          : embedding::Table::MissingRows::kZeros;
  RETURN_IF_ERROR(table_
                      ->Lookup(base_keys, absl::MakeSpan(rows),
                               absl::MakeSpan(found.get(), base_keys.size()),
                               missing)
                      .status());
  for (size_t j = 0; j < base_keys.size(); ++j) {
    float* out = values.data() + size_t{base_positions[j]} * dim;
    if (codec_.identity()) {
      std::memcpy(out, rows.data() + j * dim, dim * sizeof(float));
    } else if (found[j]) {
      codec_.Decode(rows.data() + j * stored, out);
    } else {
      Default(base_keys[j], absl::MakeSpan(out, dim));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<const Overlay> Compact(
    absl::Span<const std::shared_ptr<const Overlay>> overlays, int32_t dim) {
  auto merged = std::make_shared<Overlay>();
  if (!overlays.empty()) {
    merged->step = overlays.front()->step;
    merged->sequence = overlays.front()->sequence;
  }
  // Newest first: the first row seen of a key wins.
  for (const std::shared_ptr<const Overlay>& overlay : overlays) {
    for (const auto& [key, row] : overlay->rows) {
      auto [it, inserted] = merged->rows.try_emplace(key, Overlay::kRemoved);
      if (!inserted || row == Overlay::kRemoved) continue;
      it->second = static_cast<uint32_t>(merged->values.size() / dim);
      merged->values.insert(merged->values.end(),
                            overlay->values.begin() + size_t{row} * dim,
                            overlay->values.begin() + (size_t{row} + 1) * dim);
    }
  }
  return merged;
}

std::shared_ptr<const ServingTable> ServingTable::With(
    std::shared_ptr<const Overlay> overlay) const {
  std::vector<std::shared_ptr<const Overlay>> chain;
  chain.reserve(overlays_.size() + 1);
  chain.push_back(std::move(overlay));
  chain.insert(chain.end(), overlays_.begin(), overlays_.end());
  if (chain.size() > kMaxOverlays) {
    // Keep the newest whole (the publication just applied) and compact the
    // rest, so that compaction work follows publication work.
    std::shared_ptr<const Overlay> rest =
        Compact(absl::MakeConstSpan(chain).subspan(1), config_.dim());
    chain.resize(1);
    chain.push_back(std::move(rest));
  }
  return std::make_shared<const ServingTable>(registry_, table_, config_,
                                              std::move(chain));
}

std::shared_ptr<const ServingTable> ServingTable::WithoutOldest() const {
  std::vector<std::shared_ptr<const Overlay>> chain(overlays_.begin(),
                                                    overlays_.end() - 1);
  return std::make_shared<const ServingTable>(registry_, table_, config_,
                                              std::move(chain));
}

absl::Status ServingTable::WriteIntoBase(const Overlay& overlay) const {
  const int32_t dim = config_.dim();
  const int32_t stored = table_->spec().dim;
  const int32_t state =
      embedding::OptimizerStateFloats(table_->spec().optimizer, stored);
  const size_t record_bytes = embedding::RowRecordBytes(stored, state);
  std::vector<float> encoded(codec_.stored_floats());
  std::vector<uint64_t> keys, removed;
  std::vector<char> records;
  keys.reserve(kWriteBatchRows);
  records.reserve(kWriteBatchRows * record_bytes);
  // In batches: a batch holds each stripe's lock for a few dozen rows, so
  // a Lookup waits at most that long however large the overlay.
  const auto flush = [&]() -> absl::Status {
    if (!keys.empty()) RETURN_IF_ERROR(table_->RestoreRows(keys, records));
    if (!removed.empty()) RETURN_IF_ERROR(table_->Erase(removed).status());
    keys.clear();
    records.clear();
    removed.clear();
    return absl::OkStatus();
  };
  for (const auto& [key, row] : overlay.rows) {
    if (row == Overlay::kRemoved) {
      removed.push_back(key);
    } else {
      keys.push_back(key);
      const size_t at = records.size();
      records.resize(at + record_bytes, 0);  // metadata and state: zeros
      codec_.Encode(overlay.values.data() + size_t{row} * dim, encoded.data());
      std::memcpy(records.data() + at + 8, encoded.data(),
                  encoded.size() * sizeof(float));
    }
    if (keys.size() + removed.size() >= kWriteBatchRows) {
      RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

bool ServingVersion::consistent() const {
  if (dense_parameters == nullptr || dense_step != step) return false;
  for (uint64_t s : source_steps) {
    if (s != step) return false;
  }
  return true;
}

std::shared_ptr<const ServingVersion> BaseVersion(
    std::shared_ptr<TableRegistry> registry, uint64_t step,
    int32_t training_shards) {
  auto version = std::make_shared<ServingVersion>();
  version->registry = registry;
  version->step = step;
  version->source_steps.assign(std::max(training_shards, 1), step);
  for (const TableRegistry::Entry& entry : registry->List()) {
    version->tables[entry.config->name()] =
        std::make_shared<const ServingTable>(
            registry, entry.table, *entry.config,
            std::vector<std::shared_ptr<const Overlay>>());
  }
  return version;
}

}  // namespace embedps::server
