#include "checkpoint/manifest.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace embedps::checkpoint {
namespace {

std::string Join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace

absl::StatusOr<proto::CheckpointManifest> AssembleManifest(
    const std::string& dir, const std::string& name, uint64_t step,
    const std::string& parent, const std::vector<proto::TableConfig>& tables,
    const std::vector<proto::AwaitSaveResponse>& saved,
    const std::vector<std::string>& extra_files) {
  const int32_t shards = static_cast<int32_t>(saved.size());
  proto::CheckpointManifest manifest;
  manifest.set_format_version(kFormatVersion);
  manifest.set_step(step);
  manifest.set_name(name);
  manifest.set_num_shards(shards);
  manifest.set_created_unix_micros(absl::ToUnixMicros(absl::Now()));
  bool any_incremental = false;
  for (const proto::TableConfig& config : tables) {
    proto::CheckpointTable* table = manifest.add_table();
    *table->mutable_config() = config;
    for (int32_t shard = 0; shard < shards; ++shard) {
      bool found = false;
      for (const auto& file : saved[shard].file()) {
        if (file.table() != config.name()) continue;
        *table->add_file() = file.file();
        any_incremental |= file.file().incremental();
        found = true;
      }
      if (!found) {
        return absl::InternalError(
            absl::StrCat("shard ", shard, " wrote no file for table '",
                         config.name(), "' in checkpoint '", dir, "'"));
      }
    }
  }
  if (any_incremental) manifest.set_parent(parent);
  for (const std::string& extra : extra_files) {
    const std::string path = Join(dir, extra);
    ASSIGN_OR_RETURN(const uint32_t crc, FileCrc32(path));
    std::error_code error;
    const uint64_t bytes = std::filesystem::file_size(path, error);
    proto::CheckpointExtraFile* file = manifest.add_extra_file();
    file->set_path(extra);
    file->set_bytes(bytes);
    file->set_crc32(crc);
  }
  return manifest;
}

absl::Status WriteManifest(const std::string& dir,
                           const proto::CheckpointManifest& manifest) {
  proto::CheckpointManifestFile file;
  file.set_manifest(manifest.SerializeAsString());
  file.set_crc32(Crc32(file.manifest()));
  RETURN_IF_ERROR(WriteFileAtomically(Join(dir, kManifestFileName),
                                      file.SerializeAsString()));
  return SyncPath(dir);
}

absl::StatusOr<std::optional<std::string>> ReadExtraFile(
    const std::string& dir, const proto::CheckpointManifest& manifest,
    const std::string& name) {
  for (const proto::CheckpointExtraFile& file : manifest.extra_file()) {
    if (file.path() != name) continue;
    const std::string path = (std::filesystem::path(dir) / name).string();
    ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
    if (Crc32(bytes) != file.crc32()) {
      return absl::DataLossError(absl::StrCat(
          path, " fails the checksum its checkpoint's manifest records"));
    }
    return std::optional<std::string>(std::move(bytes));
  }
  return std::optional<std::string>();
}

absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = Join(dir, kManifestFileName);
  ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(path));
  proto::CheckpointManifestFile file;
  if (!file.ParseFromString(bytes) || Crc32(file.manifest()) != file.crc32()) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint manifest '", path,
        "' is truncated or corrupt (checksum mismatch); restore an earlier "
        "checkpoint by naming its directory"));
  }
  proto::CheckpointManifest manifest;
  if (!manifest.ParseFromString(file.manifest())) {
    return absl::DataLossError(
        absl::StrCat("checkpoint manifest '", path, "' does not parse"));
  }
  if (manifest.format_version() < kOldestReadFormatVersion ||
      manifest.format_version() > kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint manifest '", path, "' has format version ",
                     manifest.format_version(), "; this build reads versions ",
                     kOldestReadFormatVersion, " to ", kFormatVersion));
  }
  return manifest;
}

absl::StatusOr<std::vector<CompleteCheckpoint>> ListCheckpoints(
    const std::string& root, std::vector<std::string>* skipped) {
  std::error_code error;
  std::vector<CompleteCheckpoint> found;
  std::vector<std::string> left_out;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (!IsCheckpointName(name)) continue;
    if (!std::filesystem::exists(entry.path() / kManifestFileName, error)) {
      continue;  // never completed: not a checkpoint
    }
    absl::StatusOr<proto::CheckpointManifest> manifest =
        ReadManifest(entry.path().string());
    if (!manifest.ok()) {
      left_out.push_back(absl::StrCat(name, ": ", manifest.status().message()));
      continue;
    }
    found.push_back({entry.path().string(), manifest->step()});
  }
  if (skipped != nullptr) *skipped = left_out;
  if (error) {
    return absl::NotFoundError(absl::StrCat("cannot list checkpoints in '",
                                            root, "': ", error.message()));
  }
  std::sort(found.begin(), found.end(),
            [](const CompleteCheckpoint& a, const CompleteCheckpoint& b) {
              return a.step != b.step ? a.step > b.step : a.dir > b.dir;
            });
  return found;
}

absl::StatusOr<std::string> ResolveCheckpoint(
    const std::string& path, std::vector<std::string>* skipped) {
  std::error_code error;
  if (std::filesystem::exists(Join(path, kManifestFileName), error)) {
    return path;
  }
  std::vector<std::string> left_out;
  ASSIGN_OR_RETURN(const std::vector<CompleteCheckpoint> found,
                   ListCheckpoints(path, &left_out));
  if (skipped != nullptr) *skipped = left_out;
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no complete checkpoint in '", path,
        "' (neither a MANIFEST there nor a ckpt-NNNNNNNNNNNN directory with "
        "one that reads)",
        left_out.empty()
            ? ""
            : absl::StrCat("; left out: ", absl::StrJoin(left_out, "; "))));
  }
  return found.front().dir;
}

FileChecksum ExpectedChecksum(const proto::CheckpointManifest& manifest,
                              const proto::CheckpointShardFile& file) {
  if (manifest.format_version() == 1) {
    return FileChecksum{FileChecksum::Kind::kCrc32, file.crc32()};
  }
  return FileChecksum{FileChecksum::Kind::kXxh3, file.xxh3()};
}

absl::StatusOr<std::vector<ChainLink>> ReadChain(const std::string& dir) {
  std::vector<ChainLink> chain;
  std::string current = dir;
  while (true) {
    absl::StatusOr<proto::CheckpointManifest> manifest = ReadManifest(current);
    if (!manifest.ok()) {
      if (chain.empty()) return manifest.status();
      return absl::DataLossError(absl::StrCat(
          "checkpoint '", chain.back().dir, "' builds on '", current,
          "', which cannot be read: ", manifest.status().message()));
    }
    const std::string parent = manifest->parent();
    if (!chain.empty() &&
        manifest->num_shards() != chain.front().manifest.num_shards()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint '", current, "' has ", manifest->num_shards(),
          " shards but its incremental successor has ",
          chain.front().manifest.num_shards()));
    }
    chain.push_back(ChainLink{current, *std::move(manifest)});
    if (parent.empty()) return chain;
    if (chain.size() > 100000) {
      return absl::DataLossError(
          absl::StrCat("checkpoint chain from '", dir, "' does not end"));
    }
    current = (std::filesystem::path(current).parent_path() / parent).string();
  }
}

}  // namespace embedps::checkpoint
