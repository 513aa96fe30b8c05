// Paths that come from the network (a Save's directory, a Load's path, the
// files a checkpoint's manifests name) resolved inside a root directory
// the operator chose (ps_server --checkpoint_root), so that no request can
// make a server read or write anywhere else.
//
// Thread safety: a pure function (it reads the file system).
#ifndef EMBEDPS_SERVER_PATH_CONFINEMENT_H_
#define EMBEDPS_SERVER_PATH_CONFINEMENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace embedps::server {

// `requested` (absolute, or relative to `root`) as an absolute path with
// "." and ".." resolved and every symbolic link of its existing part
// followed; PERMISSION_DENIED, naming `what` and both paths, unless that
// is `root` (itself canonical: links followed) or below it — so "..", an
// absolute path elsewhere and a link that leaves the root are refused.
// FAILED_PRECONDITION if `root` does not exist. `requested` need not
// exist. A link created inside the root after this check is not seen:
// the root must not be writable by whoever could send the request.
absl::StatusOr<std::string> ResolveInside(const std::string& root,
                                          const std::string& requested,
                                          absl::string_view what);

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_PATH_CONFINEMENT_H_
