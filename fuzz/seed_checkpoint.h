// The small training state the fuzz targets start from: table "t" (dim 4,
// Adagrad) with a few rows pushed, published, and checkpointed at step 1
// under a checkpoint root (its directory: kSeedCheckpoint).
#ifndef EMBEDPS_FUZZ_SEED_CHECKPOINT_H_
#define EMBEDPS_FUZZ_SEED_CHECKPOINT_H_

#include <string>

#include "absl/status/status.h"
#include "client/client.h"
#include "proto/tables.pb.h"

namespace embedps::fuzz {

inline constexpr char kSeedCheckpoint[] = "ckpt-000000000001";

// Table `name`: dim 4, Adagrad, defaults otherwise.
proto::TableConfig SeedTableConfig(const std::string& name);

// Through `client` (whose servers checkpoint under `root`): creates "t",
// pushes four keys, publishes step 0 and checkpoints step 1 under `root`.
absl::Status WriteSeedCheckpoint(client::Client& client,
                                 const std::string& root);

// With EMBEDPS_FUZZ_WRITE_SEEDS=DIR set: calls write(DIR) (a target's
// seed inputs; how fuzz/corpus was made) and exits. Otherwise nothing.
void WriteSeedsIfAsked(void (*write)(const std::string& dir));

// Aborts the process, printing `what` and `status`, unless it is OK (the
// targets' set-up must work before anything is fuzzed).
void CheckSetUp(const absl::Status& status, const char* what);

}  // namespace embedps::fuzz

#endif  // EMBEDPS_FUZZ_SEED_CHECKPOINT_H_
