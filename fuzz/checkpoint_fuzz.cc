// Fuzz target: what a restore reads from disk — the MANIFEST (its checksum
// frame, and the manifest inside with a valid checksum, so that the fields
// a restore trusts are reached: table specs, file names, parents) and the
// table files — as ps_server --restore and the Load RPC read them: a real
// ShardCheckpointer confined to a checkpoint root, restoring into a fresh
// table registry.
//
// Input: byte 0 picks what the rest is (0: a MANIFEST file; 1: the
// CheckpointManifest inside one; 2: the entries of a table file of "t",
// dim 4, Adagrad: [key length: 1 byte][key][value length: 2 bytes,
// little-endian][value]..., written as an SST file with the checkpoint
// files' options).
//
// Table files reach RocksDB's SST reader only once their XXH3 equals the
// manifest's (RestoreTableFile); RocksDB trusts the container past that
// (Debian builds it with assertions, which abort on a crafted block), so
// mode 2 fuzzes what embedps reads from a valid container — the keys and
// records — not RocksDB's block format (docs/fuzzing.md).
//
// EMBEDPS_FUZZ_WRITE_SEEDS=DIR: Initialize writes the seed checkpoint's
// MANIFEST, manifest and table file to DIR in those forms, and exits.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "checkpoint/manifest.h"
#include "checkpoint/table_file.h"
#include "common/file_io.h"
#include "embedding/internal/spill_store.h"
#include "embedding/table.h"
#include "fuzz/seed_checkpoint.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/sst_file_writer.h"
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
  std::string original_table_file;
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
  paths->original_table_file = Read(paths->table_file);
}

std::string EntriesOf(const std::string& path);

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
  Write(dir + "/table_file",
        std::string(1, '\2') + EntriesOf(paths->table_file));
}

void Restore() {
  server::TableRegistry registry;
  server::ShardCheckpointer checkpointer(0, 1, &registry, paths->root);
  (void)checkpointer.Restore(paths->checkpoint);
}

// Mode 2's entries, sorted by key (duplicates dropped), as an SST file.
void WriteEntries(const std::string& bytes, const std::string& path) {
  std::map<std::string, std::string> entries;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t key_size = static_cast<uint8_t>(bytes[at++]);
    if (at + key_size + 2 > bytes.size()) break;
    std::string key = bytes.substr(at, key_size);
    at += key_size;
    const size_t value_size =
        static_cast<uint8_t>(bytes[at]) |
        static_cast<size_t>(static_cast<uint8_t>(bytes[at + 1])) << 8;
    at += 2;
    entries.emplace(std::move(key), bytes.substr(at, value_size));
    at += std::min(value_size, bytes.size() - at);
  }
  rocksdb::Options options;
  options.compression = rocksdb::kNoCompression;
  options.table_factory = embedding_internal::NewSpillTableFactory(
      nullptr, embedding_internal::kCheckpointBlockSize);
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options);
  std::filesystem::remove(path);
  if (!writer.Open(path).ok()) return;
  for (const auto& [key, value] : entries) {
    if (key.empty() || !writer.Put(key, value).ok()) return;
  }
  if (entries.empty()) {
    (void)writer.Put("\x01", "");  // SstFileWriter refuses an empty file
  }
  (void)writer.Finish();
}

// A table file's entries in mode 2's form.
std::string EntriesOf(const std::string& path) {
  rocksdb::Options options;
  options.table_factory = embedding_internal::NewSpillTableFactory(
      nullptr, embedding_internal::kCheckpointBlockSize);
  rocksdb::SstFileReader reader(options);
  CheckSetUp(
      reader.Open(path).ok() ? absl::OkStatus() : absl::DataLossError(path),
      "seed table file");
  std::unique_ptr<rocksdb::Iterator> it(
      reader.NewIterator(rocksdb::ReadOptions()));
  std::string out;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key(), value = it->value();
    out.push_back(static_cast<char>(key.size()));
    out.append(key.data(), key.size());
    out.push_back(static_cast<char>(value.size() & 0xff));
    out.push_back(static_cast<char>(value.size() >> 8));
    out.append(value.data(), value.size());
  }
  return out;
}

void RestoreTableFile(const std::string& bytes) {
  WriteEntries(bytes, paths->table_file);
  absl::StatusOr<embedding::TableSpec> spec =
      server::SpecFromConfig(SeedTableConfig("t"));
  CheckSetUp(spec.status(), "spec");
  absl::StatusOr<std::unique_ptr<embedding::Table>> table =
      embedding::Table::Create(*spec);
  CheckSetUp(table.status(), "table");
  absl::StatusOr<uint64_t> xxh3 = checkpoint::TableFileXxh3(paths->table_file);
  if (xxh3.ok()) {
    (void)checkpoint::RestoreTableFile(paths->table_file, *xxh3, **table);
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
  embedps::fuzz::WriteSeedsIfAsked(embedps::fuzz::WriteSeeds);
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
      Write(paths->table_file, paths->original_table_file);
      break;
  }
  return 0;
}
