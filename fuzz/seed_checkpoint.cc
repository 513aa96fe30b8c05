#include "fuzz/seed_checkpoint.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace embedps::fuzz {

proto::TableConfig SeedTableConfig(const std::string& name) {
  proto::TableConfig config;
  config.set_name(name);
  config.set_dim(4);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  return config;
}

absl::Status WriteSeedCheckpoint(client::Client& client,
                                 const std::string& root) {
  absl::StatusOr<client::TableHandle> table =
      client.CreateTable(SeedTableConfig("t"));
  if (!table.ok()) return table.status();
  const std::vector<uint64_t> keys = {1, 2, 3, uint64_t{1} << 40};
  const std::vector<float> grads(keys.size() * 4, 0.5f);
  if (absl::Status s = client.Publish(0, "").status(); !s.ok()) return s;
  if (absl::Status s = client.Push(*table, keys, grads); !s.ok()) return s;
  client::Client::CheckpointOptions checkpoint;
  checkpoint.root = root;
  checkpoint.step = 1;
  return client.Checkpoint(checkpoint).status();
}

void WriteSeedsIfAsked(void (*write)(const std::string& dir)) {
  if (const char* dir = std::getenv("EMBEDPS_FUZZ_WRITE_SEEDS")) {
    write(dir);
    std::exit(0);
  }
}

void CheckSetUp(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "fuzz set-up: %s: %s\n", what,
                 status.ToString().c_str());
    std::abort();
  }
}

}  // namespace embedps::fuzz
