#include "server/path_confinement.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace embedps::server {

absl::StatusOr<std::string> ResolveInside(const std::string& root,
                                          const std::string& requested,
                                          absl::string_view what) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path base = fs::canonical(root, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint root '", root,
                     "' cannot be resolved: ", error.message()));
  }
  const fs::path given(requested);
  const fs::path resolved =
      fs::weakly_canonical(given.is_absolute() ? given : base / given, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, " '", requested, "' cannot be resolved: ", error.message()));
  }
  // Component by component: "/a/bc" is not inside "/a/b".
  auto r = resolved.begin();
  for (auto b = base.begin(); b != base.end(); ++b, ++r) {
    if (r == resolved.end() || *r != *b) {
      return absl::PermissionDeniedError(absl::StrCat(
          what, " '", requested, "' resolves to '", resolved.string(),
          "', outside the checkpoint root '", base.string(),
          "' (ps_server --checkpoint_root): refused"));
    }
  }
  return resolved.string();
}

}  // namespace embedps::server
