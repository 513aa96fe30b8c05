#include "worker/hot_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/for_each_part.h"
#include "common/status_macros.h"

namespace embedps::worker {

namespace {

// Rows below which a piece of Gather or Apply is not worth a thread.
constexpr size_t kRowsPerThread = 4096;

}  // namespace

HotRows::HotRows(const std::vector<embedding::TableSpec>& specs, int threads)
    : threads_(std::max(1, threads)) {
  tables_.resize(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    Table& table = tables_[t];
    table.spec = specs[t];
    table.dim = specs[t].dim;
    table.optimizer =
        embedding::RowOptimizer::Create(specs[t].optimizer, specs[t].dim);
    table.record_bytes =
        embedding::RowRecordBytes(table.dim, table.optimizer->state_floats());
    table.record_floats = table.record_bytes / sizeof(float);
  }
}

size_t HotRows::BytesPerRow(const embedding::TableSpec& spec) {
  // The record, a gradient sum and touch count, the key and its map entry.
  return embedding::RowRecordBytes(spec.dim, embedding::OptimizerStateFloats(
                                                 spec.optimizer, spec.dim)) +
         sizeof(float) * (spec.dim + 1) + sizeof(uint64_t) * 3;
}

absl::Status HotRows::Assign(int t, std::vector<uint64_t> keys,
                             absl::Span<const char> records) {
  Table& table = tables_[t];
  if (records.size() != keys.size() * table.record_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot rows of table '", table.spec.name, "': ", keys.size(),
                     " keys need ", keys.size() * table.record_bytes,
                     " bytes of records, got ", records.size()));
  }
  absl::flat_hash_map<uint64_t, int32_t> slot_of_key;
  slot_of_key.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!slot_of_key.emplace(keys[i], static_cast<int32_t>(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat("hot rows of table '",
                                                     table.spec.name, "': key ",
                                                     keys[i], " repeats"));
    }
  }
  std::vector<float> floats(keys.size() * table.record_floats);
  std::memcpy(floats.data(), records.data(), records.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const float* row = floats.data() + i * table.record_floats;
    for (size_t f = 2; f < table.record_floats; ++f) {
      if (!std::isfinite(row[f])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "hot rows of table '", table.spec.name, "': the row of key ",
            keys[i], " holds a NaN or infinite float"));
      }
    }
  }
  table.keys = std::move(keys);
  table.slot_of_key = std::move(slot_of_key);
  table.records = std::move(floats);
  ClearCounts(t);
  return absl::OkStatus();
}

void HotRows::ClearCounts(int t) {
  Table& table = tables_[t];
  for (size_t i = 0; i < table.keys.size(); ++i) {
    float* record = table.records.data() + i * table.record_floats;
    record[0] = 0.0f;  // the bits of uint32 0
    record[1] = 0.0f;
  }
}

void HotRows::UsedRecords(int t, std::vector<uint64_t>& keys,
                          std::vector<char>& records) const {
  const Table& table = tables_[t];
  keys.clear();
  records.clear();
  const size_t bytes = table.record_floats * sizeof(float);
  for (size_t i = 0; i < table.keys.size(); ++i) {
    const float* record = table.records.data() + i * table.record_floats;
    uint32_t count;
    std::memcpy(&count, record + 1, sizeof(count));
    if (count == 0) continue;
    keys.push_back(table.keys[i]);
    const char* begin = reinterpret_cast<const char*>(record);
    records.insert(records.end(), begin, begin + bytes);
  }
}

absl::Span<const char> HotRows::records(int t) const {
  const Table& table = tables_[t];
  return absl::MakeConstSpan(
      reinterpret_cast<const char*>(table.records.data()),
      table.records.size() * sizeof(float));
}

size_t HotRows::Split(int t, std::vector<uint64_t>& unique,
                      std::vector<int32_t>& remap,
                      std::vector<int32_t>& slots) const {
  const Table& table = tables_[t];
  remap.clear();
  slots.clear();
  if (table.keys.empty()) return unique.size();
  // One lookup per key: hot keys' slots in order, and a mark where they
  // were (-1 - j for the j-th hot key).
  // Scratch kept by the thread (the preparing thread, every step).
  thread_local std::vector<int32_t> hot_mark;
  thread_local std::vector<uint64_t> reordered;
  hot_mark.assign(unique.size(), 0);
  for (size_t i = 0; i < unique.size(); ++i) {
    const auto it = table.slot_of_key.find(unique[i]);
    if (it == table.slot_of_key.end()) continue;
    hot_mark[i] = -1 - static_cast<int32_t>(slots.size());
    slots.push_back(it->second);
  }
  if (slots.empty()) return unique.size();
  const size_t cold = unique.size() - slots.size();
  remap.resize(unique.size());
  reordered.resize(unique.size());
  size_t next_cold = 0;
  for (size_t i = 0; i < unique.size(); ++i) {
    const size_t to = hot_mark[i] < 0 ? cold + (-1 - hot_mark[i]) : next_cold++;
    remap[i] = static_cast<int32_t>(to);
    reordered[to] = unique[i];
  }
  unique.swap(reordered);
  return cold;
}

void HotRows::ForEachPiece(
    const std::vector<size_t>& sizes,
    const std::function<void(int, size_t, size_t)>& work) const {
  size_t total = 0;
  for (size_t size : sizes) total += size;
  const int parts = static_cast<int>(
      std::min<size_t>(threads_, std::max<size_t>(1, total / kRowsPerThread)));
  if (parts == 1) {
    for (size_t t = 0; t < sizes.size(); ++t) {
      if (sizes[t] > 0) work(static_cast<int>(t), 0, sizes[t]);
    }
    return;
  }
  // Part p takes the rows [p·total/parts, (p+1)·total/parts) of all
  // tables' rows laid end to end.
  ForEachPart(parts, [&](int p) {
    const size_t from = total * p / parts;
    const size_t to = total * (p + 1) / parts;
    size_t base = 0;
    for (size_t t = 0; t < sizes.size(); ++t) {
      const size_t begin = std::max(from, base);
      const size_t end = std::min(to, base + sizes[t]);
      if (begin < end) work(static_cast<int>(t), begin - base, end - base);
      base += sizes[t];
    }
  });
}

void HotRows::Gather(int t, absl::Span<const int32_t> slots,
                     absl::Span<float> rows) const {
  const Table& table = tables_[t];
  ForEachPiece({slots.size()}, [&](int, size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) {
      std::memcpy(rows.data() + j * table.dim,
                  table.records.data() + slots[j] * table.record_floats + 2,
                  sizeof(float) * table.dim);
    }
  });
}

void HotRows::ApplyRow(Table& table, int32_t slot, const float* grad,
                       uint32_t uses) {
  float* record = table.records.data() + slot * table.record_floats;
  table.optimizer->Apply(record + 2, record + 2 + table.dim, grad);
  uint32_t count;
  std::memcpy(&count, record + 1, sizeof(count));
  count +=
      std::min(uses, embedding::kMaxRecordAccessCount -
                         std::min(count, embedding::kMaxRecordAccessCount));
  std::memcpy(record + 1, &count, sizeof(count));
}

absl::Status HotRows::Apply(absl::Span<const absl::Span<const int32_t>> slots,
                            absl::Span<const absl::Span<const float>> grads,
                            dense::Communicator* communicator) {
  if (communicator == nullptr || communicator->world_size() == 1) {
    std::vector<size_t> sizes;
    for (const absl::Span<const int32_t>& s : slots) sizes.push_back(s.size());
    // Distinct slots: the pieces update different rows.
    ForEachPiece(sizes, [&](int t, size_t begin, size_t end) {
      Table& table = tables_[t];
      for (size_t j = begin; j < end; ++j) {
        ApplyRow(table, slots[t][j], grads[t].data() + j * table.dim, 1);
      }
    });
    return absl::OkStatus();
  }
  // Each worker's touched slots and sums, gathered: first how many each
  // worker touched per table, then the rows, each worker's padded to the
  // most any worker touched (a slot of -1 pads).
  const int world = communicator->world_size();
  const size_t num_tables = tables_.size();
  local_.assign(num_tables, 0.0f);
  for (size_t t = 0; t < num_tables; ++t) {
    local_[t] = static_cast<float>(slots[t].size());  // exact below 2^24
  }
  gathered_.resize(world * num_tables);
  RETURN_IF_ERROR(communicator->AllGather(local_, absl::MakeSpan(gathered_)));
  std::vector<size_t> most(num_tables, 0), offset(num_tables, 0);
  size_t floats = 0;
  for (size_t t = 0; t < num_tables; ++t) {
    for (int r = 0; r < world; ++r) {
      most[t] =
          std::max(most[t], static_cast<size_t>(gathered_[r * num_tables + t]));
    }
    offset[t] = floats;
    floats += most[t] * (tables_[t].dim + 1);
  }
  if (floats == 0) return absl::OkStatus();
  local_.assign(floats, 0.0f);
  for (size_t t = 0; t < num_tables; ++t) {
    const int32_t dim = tables_[t].dim;
    for (size_t j = 0; j < most[t]; ++j) {
      float* entry = local_.data() + offset[t] + j * (dim + 1);
      const int32_t slot = j < slots[t].size() ? slots[t][j] : -1;
      std::memcpy(entry, &slot, sizeof(slot));  // bits, not a number
      if (slot >= 0) {
        std::memcpy(entry + 1, grads[t].data() + j * dim, sizeof(float) * dim);
      }
    }
  }
  gathered_.resize(world * floats);
  RETURN_IF_ERROR(communicator->AllGather(local_, absl::MakeSpan(gathered_)));
  touched_.resize(num_tables);
  std::vector<size_t> sizes(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    const int32_t dim = tables_[t].dim;
    Touched& touched = touched_[t];
    touched.position.resize(tables_[t].keys.size(), -1);
    touched.slots.clear();
    touched.sums.clear();
    touched.uses.clear();
    for (int r = 0; r < world; ++r) {
      const float* part = gathered_.data() + r * floats + offset[t];
      for (size_t j = 0; j < most[t]; ++j) {
        const float* entry = part + j * (dim + 1);
        int32_t slot;
        std::memcpy(&slot, entry, sizeof(slot));
        if (slot < 0) continue;
        if (static_cast<size_t>(slot) >= touched.position.size()) {
          return absl::InternalError(absl::StrCat(
              "hot rows of table '", tables_[t].spec.name, "': worker ", r,
              " updated row ", slot, " of a tier of ", touched.position.size(),
              " rows here (the workers' tiers "
              "differ)"));
        }
        int32_t& at = touched.position[slot];
        if (at < 0) {
          at = static_cast<int32_t>(touched.slots.size());
          touched.slots.push_back(slot);
          touched.sums.insert(touched.sums.end(), entry + 1, entry + 1 + dim);
          touched.uses.push_back(1);
          continue;
        }
        float* sum = touched.sums.data() + size_t(at) * dim;
        for (int32_t d = 0; d < dim; ++d) sum[d] += entry[1 + d];
        ++touched.uses[at];
      }
    }
    sizes[t] = touched.slots.size();
  }
  ForEachPiece(sizes, [&](int t, size_t begin, size_t end) {
    Table& table = tables_[t];
    Touched& touched = touched_[t];
    for (size_t i = begin; i < end; ++i) {
      ApplyRow(table, touched.slots[i], touched.sums.data() + i * table.dim,
               touched.uses[i]);
      touched.position[touched.slots[i]] = -1;
    }
  });
  return absl::OkStatus();
}

}  // namespace embedps::worker
