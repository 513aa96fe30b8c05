// Fuzz target: what a restore reads from disk — the MANIFEST (its checksum
// frame, and the manifest inside with a valid checksum, so that the fields
// a restore trusts are reached: table specs, file names, parents) and the
// table files — as ps_server --restore and the Load RPC read them: a real
// ShardCheckpointer confined to a checkpoint root, restoring into a fresh
// table registry.
//
// Input: byte 0 picks what the rest is (0: a MANIFEST file; 1: the
// CheckpointManifest inside one; 2: a table file of "t", dim 4, Adagrad).
//
// EMBEDPS_FUZZ_WRITE_SEEDS=DIR: Initialize writes the seed checkpoint's
// MANIFEST, manifest and table file to DIR in those forms, and exits.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "checkpoint/manifest.h"
#include "common/file_io.h"
#include "embedding/checkpoint_file.h"
#include "embedding/table.h"
#include "fuzz/seed_checkpoint.h"
#include "server/checkpointer.h"
#include "server/shard.h"
#include "server/table_config.h"
#include "server/table_registry.h"

namespace embedps::fuzz {
namespace {

struct Paths {
  std::string dir;         // everything, removed at exit
  std::string root;        // the checkpoint root
  std::string checkpoint;  // root/kSeedCheckpoint
  std::string manifest;    // its MANIFEST
  std::string table_file;  // its table file of "t"
  std::string original_manifest;
};

Paths* paths = nullptr;

std::string Read(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  CheckSetUp(bytes.status(), "reading the seed checkpoint");
  return *bytes;
}

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void SetUp() {
  char dir[] = "/tmp/embedps-checkpoint-fuzz-XXXXXX";
  CheckSetUp(mkdtemp(dir) != nullptr ? absl::OkStatus()
                                     : absl::InternalError("mkdtemp"),
             "temporary directory");
  paths = new Paths;
  paths->dir = dir;
  paths->root = paths->dir + "/root";
  std::filesystem::create_directories(paths->root);
  {
    server::ShardOptions options;
    options.checkpoint_root = paths->root;
    absl::StatusOr<std::unique_ptr<server::Shard>> shard =
        server::Shard::Start(options);
    CheckSetUp(shard.status(), "shard");
    client::ClientOptions client_options;
    client_options.servers = {(*shard)->address()};
    absl::StatusOr<std::unique_ptr<client::Client>> client =
        client::Client::Connect(client_options);
    CheckSetUp(client.status(), "client");
    CheckSetUp(WriteSeedCheckpoint(**client, paths->root), "seed checkpoint");
  }
  paths->checkpoint = paths->root + "/" + kSeedCheckpoint;
  paths->manifest = paths->checkpoint + "/" + checkpoint::kManifestFileName;
  paths->original_manifest = Read(paths->manifest);
  absl::StatusOr<proto::CheckpointManifest> manifest =
      checkpoint::ReadManifest(paths->checkpoint);
  CheckSetUp(manifest.status(), "seed manifest");
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(paths->checkpoint)) {
    if (entry.path().extension() == ".sst") {
      paths->table_file = entry.path();
    }
  }
  CheckSetUp(paths->table_file.empty() ? absl::NotFoundError("no .sst")
                                       : absl::OkStatus(),
             "seed table file");
}

void WriteSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  Write(dir + "/manifest_file",
        std::string(1, '\0') + paths->original_manifest);
  proto::CheckpointManifestFile file;
  CheckSetUp(file.ParseFromString(paths->original_manifest)
                 ? absl::OkStatus()
                 : absl::DataLossError("seed MANIFEST"),
             "seed MANIFEST");
  Write(dir + "/manifest", std::string(1, '\1') + file.manifest());
  Write(dir + "/table_file", std::string(1, '\2') + Read(paths->table_file));
}

void Restore() {
  server::TableRegistry registry;
  server::ShardCheckpointer checkpointer(0, 1, &registry, paths->root);
  (void)checkpointer.Restore(paths->checkpoint);
}

void RestoreTableFile(const std::string& bytes) {
  Write(paths->table_file, bytes);
  absl::StatusOr<embedding::TableSpec> spec =
      server::SpecFromConfig(SeedTableConfig("t"));
  CheckSetUp(spec.status(), "spec");
  absl::StatusOr<std::unique_ptr<embedding::Table>> table =
      embedding::Table::Create(*spec);
  CheckSetUp(table.status(), "table");
  absl::StatusOr<uint64_t> xxh3 = embedding::TableFileXxh3(paths->table_file);
  if (xxh3.ok()) {
    (void)embedding::RestoreTableFile(paths->table_file, *xxh3, **table);
  }
}

}  // namespace
}  // namespace embedps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  embedps::fuzz::SetUp();
  std::atexit([] {
    std::error_code error;
    std::filesystem::remove_all(embedps::fuzz::paths->dir, error);
  });
  if (const char* seeds = std::getenv("EMBEDPS_FUZZ_WRITE_SEEDS")) {
    embedps::fuzz::WriteSeeds(seeds);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace embedps::fuzz;
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      Write(paths->manifest, bytes);
      Restore();
      break;
    case 1: {
      embedps::proto::CheckpointManifestFile file;
      file.set_manifest(bytes);
      file.set_crc32(embedps::Crc32(bytes));
      Write(paths->manifest, file.SerializeAsString());
      Restore();
      break;
    }
    default:
      RestoreTableFile(bytes);
      Write(paths->manifest, paths->original_manifest);
      break;
  }
  return 0;
}
