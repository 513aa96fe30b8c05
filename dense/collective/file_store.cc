#include "dense/collective/file_store.h"

#include <chrono>
#include <exception>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gloo/rendezvous/file_store.h"

namespace embedps::dense {
namespace {

// Bytes outside [A-Za-z0-9._-] become %XX: keys like "gloo/rank/0" name
// one file, never a path.
std::string EscapeKey(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// Gloo's FileStore with its key check made reachable.
class GlooFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool Has(const std::vector<std::string>& keys) { return check(keys); }
};

class FileStoreImpl final : public Store {
 public:
  explicit FileStoreImpl(const std::string& directory)
      : directory_(directory), store_(directory) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    try {
      store_.set(EscapeKey(key), std::vector<char>(value.begin(), value.end()));
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "file store ", directory_, ": cannot set '", key, "': ", e.what()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(const std::string& key) override {
    try {
      const std::string name = EscapeKey(key);
      if (!store_.Has({name})) {
        return absl::NotFoundError(
            absl::StrCat("file store ", directory_, " has no key '", key, "'"));
      }
      const std::vector<char> value = store_.get(name);
      return std::string(value.begin(), value.end());
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "file store ", directory_, ": cannot get '", key, "': ", e.what()));
    }
  }

  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override {
    std::vector<std::string> names;
    for (const std::string& key : keys) names.push_back(EscapeKey(key));
    try {
      store_.wait(
          names, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    } catch (const std::exception& e) {
      // Gloo reports a timeout as an exception; say which keys are missing.
      std::vector<std::string> missing;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!store_.Has({names[i]})) missing.push_back(keys[i]);
      }
      if (!missing.empty()) {
        return absl::DeadlineExceededError(
            absl::StrCat("file store ", directory_, ": after ",
                         absl::FormatDuration(timeout), " still missing ",
                         absl::StrJoin(missing, ", ")));
      }
      return absl::UnavailableError(
          absl::StrCat("file store ", directory_, ": ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  const std::string directory_;
  GlooFileStore store_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> CreateFileStore(
    const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create file store directory ", directory, ": ",
                     error.message()));
  }
  return std::unique_ptr<Store>(new FileStoreImpl(directory));
}

}  // namespace embedps::dense
