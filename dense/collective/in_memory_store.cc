#include "dense/collective/in_memory_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace embedps::dense {

absl::Status InMemoryStore::Set(const std::string& key,
                                const std::string& value) {
  {
    MutexLock lock(&mu_);
    values_[key] = value;
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(const std::string& key) {
  MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end())
    return absl::NotFoundError(
        absl::StrCat("store key '", key, "' is not set"));
  return it->second;
}

absl::Status InMemoryStore::Wait(const std::vector<std::string>& keys,
                                 absl::Duration timeout) {
  MutexLock lock(&mu_);
  const auto all_set = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return false;
    }
    return true;
  };
  if (changed_.WaitUntil(&mu_, absl::Now() + timeout, all_set)) {
    return absl::OkStatus();
  }
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!values_.contains(key)) missing.push_back(key);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("waited ", absl::FormatDuration(timeout),
                   " for store keys; missing: ", absl::StrJoin(missing, ", ")));
}

}  // namespace embedps::dense
