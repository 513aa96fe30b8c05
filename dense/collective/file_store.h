// FileStore: a Store in a directory that every rank can read and write (a
// local or shared file system), for jobs without a cluster to meet in —
// e.g. a purely dense data-parallel job on one machine. Over Gloo's own
// FileStore (atomic write-then-rename per key); keys are escaped into safe
// file names.
//
// Use a fresh directory per job: keys left by an earlier job would be seen
// as this job's.
// Thread safety: thread-safe; processes coordinate through the file system.
#ifndef EMBEDPS_DENSE_COLLECTIVE_FILE_STORE_H_
#define EMBEDPS_DENSE_COLLECTIVE_FILE_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dense/collective/store.h"

namespace embedps::dense {

// Creates `directory` if needed. UNAVAILABLE if it cannot be created.
absl::StatusOr<std::unique_ptr<Store>> CreateFileStore(
    const std::string& directory);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_COLLECTIVE_FILE_STORE_H_
