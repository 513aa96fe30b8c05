#include "server/coordination_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace embedps::server {
namespace {

absl::Status CheckKey(const std::string& key) {
  if (key.empty())
    return absl::InvalidArgumentError("coordination key is empty");
  if (key.size() > CoordinationStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordination key of ", key.size(), " bytes; at most ",
                     CoordinationStore::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Time Deadline(absl::Duration timeout) { return absl::Now() + timeout; }

}  // namespace

absl::Status CoordinationStore::Set(const std::string& key, std::string value) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value for '", key, "' is ", value.size(),
                     " bytes; at most ", kMaxValueBytes));
  }
  {
    MutexLock lock(&mu_);
    auto it = values_.find(key);
    if (it == values_.end()) {
      RETURN_IF_ERROR(CheckRoomLocked(1, key.size() + value.size()));
      bytes_ += key.size() + value.size();
      values_.emplace(key, std::move(value));
    } else {
      if (value.size() > it->second.size()) {
        RETURN_IF_ERROR(CheckRoomLocked(0, value.size() - it->second.size()));
      }
      bytes_ = bytes_ - it->second.size() + value.size();
      it->second = std::move(value);
    }
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status CoordinationStore::CheckRoomLocked(size_t new_entries,
                                                size_t bytes) const {
  const size_t entries = values_.size() + barriers_.size();
  if (entries + new_entries > limits_.max_entries ||
      bytes_ + bytes > limits_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the coordination store is full: ", entries, " keys and barriers, ",
        bytes_, " bytes; this server keeps at most ", limits_.max_entries,
        " and ", limits_.max_bytes,
        " bytes (--max_coordination_keys, --max_coordination_mb)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CoordinationStore::Get(
    const std::string& key) const {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::NotFoundError(
        absl::StrCat("coordination key '", key, "' is not set"));
  }
  return it->second;
}

absl::StatusOr<std::vector<std::string>> CoordinationStore::Wait(
    absl::Span<const std::string> keys, absl::Duration timeout) const {
  for (const std::string& key : keys) {
    if (absl::Status s = CheckKey(key); !s.ok()) return s;
  }
  MutexLock lock(&mu_);
  const auto all_set = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return false;
    }
    return true;
  };
  if (!changed_.WaitUntil(&mu_, Deadline(timeout), all_set)) {
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (!values_.contains(key)) missing.push_back(key);
    }
    return absl::DeadlineExceededError(
        absl::StrCat("waited ", absl::FormatDuration(timeout),
                     " for coordination keys; still missing: ",
                     absl::StrJoin(missing, ", ")));
  }
  std::vector<std::string> values;
  for (const std::string& key : keys) values.push_back(values_.at(key));
  return values;
}

absl::StatusOr<uint64_t> CoordinationStore::Barrier(const std::string& name,
                                                    uint32_t participants,
                                                    absl::Duration timeout) {
  if (absl::Status s = CheckKey(name); !s.ok()) return s;
  if (participants == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("barrier '", name, "' needs at least one participant"));
  }
  MutexLock lock(&mu_);
  if (!barriers_.contains(name)) {
    RETURN_IF_ERROR(CheckRoomLocked(1, name.size()));
    bytes_ += name.size();
  }
  BarrierState& state = barriers_[name];
  if (state.arrived > 0 && state.participants != participants) {
    return absl::InvalidArgumentError(
        absl::StrCat("barrier '", name, "' is waiting for ", state.participants,
                     " participants; this caller says ", participants));
  }
  state.participants = participants;
  const uint64_t generation = state.generation;
  if (++state.arrived == participants) {
    state.arrived = 0;
    ++state.generation;
    changed_.SignalAll();
    return generation + 1;
  }
  if (!changed_.WaitUntil(&mu_, Deadline(timeout),
                          [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                            return barriers_[name].generation != generation;
                          })) {
    BarrierState& now = barriers_[name];
    const uint32_t arrived = now.arrived;
    --now.arrived;  // withdraw, so that a retry starts from a clean count
    return absl::DeadlineExceededError(absl::StrCat(
        "barrier '", name, "': ", arrived, " of ", participants,
        " participants arrived within ", absl::FormatDuration(timeout)));
  }
  return generation + 1;
}

}  // namespace embedps::server
