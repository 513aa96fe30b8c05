// capacity: memory and disk per shard for a table of N keys, measured
// rather than guessed: it builds the table in this process with the
// engine's own code, fills a sample of keys, reads the table's resident
// bytes (TableStats: rows, index, optimizer state) and writes a real
// checkpoint file of it, and scales both to N keys over the shards.
//
//   capacity --table='name: "emb" dim: 64 optimizer { kind: ADAGRAD }'
//            --keys=1000000000 --shards=16 --replicas=1
//
// Prints one JSON object: per-shard and total memory and checkpoint bytes,
// the bytes per row they come from, and with --replicas the serving
// replicas' memory (a replica holds its serving shard's rows, values only,
// in the table's serving.storage or --serving_storage: measured on a table
// made as a replica makes it). A table with a memory
// budget keeps at most the budget in memory per shard; the rest goes to
// its spill tier on disk (about a checkpoint row's size each).
// Peaks, on top of the steady figures: a training shard writing a full
// checkpoint holds a copy of its resident rows (a checkpoint record each)
// until the file is written; a shard that publishes keeps up to
// --publish_history_mb of publications; a serving replica loading a newer
// checkpoint holds it beside the one it serves (two copies).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/table_file.h"
#include "common/program_usage.h"
#include "common/status_macros.h"
#include "common/text_proto.h"
#include "embedding/table.h"
#include "embedding/values_table.h"
#include "nlohmann/json.hpp"
#include "server/serving_storage.h"
#include "server/table_config.h"

ABSL_FLAG(std::string, table, "",
          "the table: a text-format embedps.proto.TableConfig");
ABSL_FLAG(std::string, table_file, "", "or a file holding it");
ABSL_FLAG(uint64_t, keys, 0, "distinct keys the table will hold");
ABSL_FLAG(int32_t, shards, 1, "training shards (keys spread evenly)");
ABSL_FLAG(int32_t, replicas, 0,
          "serving replicas of each shard's rows (0: no serving)");
ABSL_FLAG(uint64_t, sample, 200000, "keys filled to measure");
ABSL_FLAG(std::string, serving_storage, "",
          "the replicas' --serving_storage (float32, float16, int8); empty: "
          "the table's serving.storage");
ABSL_FLAG(uint64_t, publish_history_mb, 0,
          "ps_server --publish_history_mb of a job that publishes to serving "
          "replicas (the server's default is 512); 0: the job does not "
          "publish");

namespace embedps::tools {
namespace {

absl::StatusOr<proto::TableConfig> ReadConfig() {
  std::string text = absl::GetFlag(FLAGS_table);
  proto::TableConfig config;
  if (const std::string path = absl::GetFlag(FLAGS_table_file); !path.empty()) {
    RETURN_IF_ERROR(
        ReadTextProtoFile(path, absl::StrCat("--table_file ", path), &config));
    return config;
  }
  if (text.empty()) {
    return absl::InvalidArgumentError(
        "--table (or --table_file) must be a text-format TableConfig");
  }
  RETURN_IF_ERROR(ParseTextProto(text, "--table", &config));
  return config;
}

struct Measured {
  double memory_bytes_per_row = 0;
  double checkpoint_bytes_per_row = 0;
  // A checkpoint snapshot's copy of a resident row (its record).
  double snapshot_bytes_per_row = 0;
  uint64_t fixed_bytes = 0;  // the admission sketch
};

absl::StatusOr<Measured> Measure(embedding::TableSpec spec, uint64_t sample) {
  Measured m;
  if (spec.admission.kind == embedding::AdmissionSpec::Kind::kCount) {
    m.fixed_bytes = spec.admission.sketch_counters;
  }
  // Every key admitted, all in memory: the rows as they will be held.
  spec.admission = embedding::AdmissionSpec();
  spec.memory_budget_bytes = 0;
  ASSIGN_OR_RETURN(std::unique_ptr<embedding::Table> table,
                   embedding::Table::Create(spec));
  const embedding::TableStats empty = table->Stats();
  constexpr uint64_t kBatch = 10000;
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> values(kBatch * spec.dim);
  for (uint64_t begin = 0; begin < sample; begin += kBatch) {
    // Spread like hashed ids: the index sees no pattern.
    for (uint64_t i = 0; i < kBatch; ++i) {
      keys[i] = (begin + i + 1) * 0x9E3779B97F4A7C15ull;
    }
    RETURN_IF_ERROR(table->Pull(keys, absl::MakeSpan(values)));
  }
  const embedding::TableStats full = table->Stats();
  m.memory_bytes_per_row =
      static_cast<double>(full.resident_bytes - empty.resident_bytes) /
      static_cast<double>(full.rows);
  const std::string path = (std::filesystem::temp_directory_path() /
                            absl::StrCat("embedps-capacity-", getpid(), ".tbl"))
                               .string();
  ASSIGN_OR_RETURN(std::unique_ptr<embedding::TableSnapshot> snapshot,
                   table->TakeSnapshot(/*incremental=*/false));
  absl::StatusOr<checkpoint::TableFileSummary> written =
      checkpoint::WriteTableFile(*snapshot, path);
  std::filesystem::remove(path);
  if (!written.ok()) return written.status();
  m.checkpoint_bytes_per_row =
      static_cast<double>(written->bytes) / static_cast<double>(written->rows);
  m.snapshot_bytes_per_row = static_cast<double>(snapshot->record_bytes());
  return m;
}

// Bytes a row of a serving replica's table (embedding::ValuesTable, as a
// replica makes it: values only, in its storage) costs, settled.
absl::StatusOr<Measured> MeasureServing(const embedding::TableSpec& spec,
                                        uint64_t sample) {
  ASSIGN_OR_RETURN(std::unique_ptr<embedding::Table> table,
                   embedding::CreateValuesTable(spec));
  const embedding::TableStats empty = table->Stats();
  constexpr uint64_t kBatch = 10000;
  const size_t record = embedding::RowRecordBytes(spec.dim, 0);
  std::vector<uint64_t> keys(kBatch);
  const std::vector<char> records(kBatch * record, 0);
  for (uint64_t begin = 0; begin < sample; begin += kBatch) {
    for (uint64_t i = 0; i < kBatch; ++i) {
      keys[i] = (begin + i + 1) * 0x9E3779B97F4A7C15ull;
    }
    RETURN_IF_ERROR(table->RestoreRows(keys, records));
  }
  table->ReleaseUnusedMemory();  // as a replica does after its load
  const embedding::TableStats full = table->Stats();
  Measured m;
  m.memory_bytes_per_row =
      static_cast<double>(full.resident_bytes - empty.resident_bytes) /
      static_cast<double>(full.rows);
  return m;
}

int Run() {
  absl::StatusOr<proto::TableConfig> config = ReadConfig();
  const uint64_t keys = absl::GetFlag(FLAGS_keys);
  const int32_t shards = absl::GetFlag(FLAGS_shards);
  const int32_t replicas = absl::GetFlag(FLAGS_replicas);
  if (!config.ok() || keys == 0 || shards < 1 || replicas < 0) {
    std::fprintf(stderr, "%s\n",
                 !config.ok() ? std::string(config.status().message()).c_str()
                              : "--keys must be > 0, --shards >= 1, "
                                "--replicas >= 0");
    return 2;
  }
  absl::StatusOr<embedding::TableSpec> spec = server::SpecFromConfig(*config);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<Measured> m = Measure(*spec, absl::GetFlag(FLAGS_sample));
  // A serving replica's table: values only, in its storage, all in memory.
  std::optional<proto::ServingConfig::Storage> storage;
  if (const std::string name = absl::GetFlag(FLAGS_serving_storage);
      !name.empty()) {
    absl::StatusOr<proto::ServingConfig::Storage> parsed =
        server::ParseServingStorage(name);
    if (!parsed.ok()) {
      std::fprintf(stderr, "--serving_storage: %s\n",
                   std::string(parsed.status().message()).c_str());
      return 2;
    }
    storage = *parsed;
  }
  const proto::TableConfig serving_config =
      server::ValuesOnlyConfig(*config, storage);
  absl::StatusOr<embedding::TableSpec> serving_spec =
      server::SpecFromConfig(serving_config);
  if (serving_spec.ok()) {
    serving_spec->dim =
        server::RowCodec(serving_config.serving().storage(), serving_spec->dim)
            .stored_floats();
  }
  absl::StatusOr<Measured> serving =
      serving_spec.ok()
          ? MeasureServing(*serving_spec, absl::GetFlag(FLAGS_sample))
          : absl::StatusOr<Measured>(serving_spec.status());
  for (const auto* measured : {&m, &serving}) {
    if (!measured->ok()) {
      std::fprintf(stderr, "%s\n", measured->status().ToString().c_str());
      return 1;
    }
  }
  const uint64_t per_shard = (keys + shards - 1) / shards;
  const double rows_bytes = m->memory_bytes_per_row * per_shard;
  const double budget = static_cast<double>(spec->memory_budget_bytes);
  const double memory =
      (budget > 0 ? std::min(rows_bytes, budget) : rows_bytes) + m->fixed_bytes;
  const double spilled_rows = budget > 0 && rows_bytes > budget
                                  ? per_shard * (1.0 - budget / rows_bytes)
                                  : 0.0;
  const double checkpoint = m->checkpoint_bytes_per_row * per_shard;
  const double resident_rows =
      budget > 0 && rows_bytes > budget ? per_shard - spilled_rows : per_shard;
  const double snapshot = m->snapshot_bytes_per_row * resident_rows;
  const double history =
      static_cast<double>(absl::GetFlag(FLAGS_publish_history_mb)) * (1 << 20);
  const double serving_rows_bytes =
      serving->memory_bytes_per_row * static_cast<double>(per_shard);
  nlohmann::json out = {
      {"table", spec->name},
      {"dim", spec->dim},
      {"keys", keys},
      {"shards", shards},
      {"keys_per_shard", per_shard},
      {"memory_bytes_per_row", m->memory_bytes_per_row},
      {"checkpoint_bytes_per_row", m->checkpoint_bytes_per_row},
      {"admission_sketch_bytes", m->fixed_bytes},
      {"memory_bytes_per_shard", std::llround(memory)},
      {"spill_disk_bytes_per_shard",
       std::llround(spilled_rows * m->checkpoint_bytes_per_row)},
      {"checkpoint_bytes_per_shard", std::llround(checkpoint)},
      {"memory_bytes_total", std::llround(memory * shards)},
      {"checkpoint_bytes_total", std::llround(checkpoint * shards)},
      {"checkpoint_snapshot_bytes_per_shard", std::llround(snapshot)},
      {"publication_history_bytes_per_shard", std::llround(history)},
      {"peak_memory_bytes_per_shard",
       std::llround(memory + snapshot + history)},
      {"serving_replicas", replicas},
      {"serving_storage",
       proto::ServingConfig::Storage_Name(serving_config.serving().storage())},
      {"serving_memory_bytes_per_row", serving->memory_bytes_per_row},
      {"serving_memory_bytes_per_replica", std::llround(serving_rows_bytes)},
      {"serving_peak_memory_bytes_per_replica",
       std::llround(2 * serving_rows_bytes)},
      {"serving_memory_bytes_total",
       std::llround(serving_rows_bytes * shards * replicas)},
  };
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace embedps::tools

int main(int argc, char** argv) {
  embedps::SetProgramUsage(
      "memory and disk per shard for a table of N keys, measured with the "
      "engine's own code.\n"
      "  capacity --table='name: \"emb\" dim: 64' --keys=1000000000 "
      "--shards=16",
      {"tools/capacity.cc"});
  absl::ParseCommandLine(argc, argv);
  return embedps::tools::Run();
}
