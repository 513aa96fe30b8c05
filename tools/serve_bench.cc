// serve_bench: latency and freshness of serving replicas, measured open
// loop (requests leave at a fixed rate; a request's latency counts from
// the time it was meant to leave, so queueing is not hidden).
//
//   serve_bench                          # sets up its own cluster (below)
//   serve_bench --evaluate=test.txt --predictor=HOST:PORT
//
// The full run starts real processes: one training ps_server holding the
// first table of --config (optimizer SGD: serving reads values only) with
// --keys rows and the tables of --predict_config (renamed) with the rows
// the Predict requests use, a checkpoint, --replicas serving replicas of
// one serving shard following it, and ps_predictor over them. Then, against the
// replicas: Lookup requests of one bag of ~--keys_per_bag Zipf keys in
// each of the config's slots (26 × 20 ≈ 500 keys), pooled, at each of
// --rates requests/s, without and with the client's hot-key cache;
// Predict at batch 1 and 64; freshness (a pushed row's lag until it is
// served) under a training load with publications every
// --publish_interval; and Lookup latency while --big_update changed rows
// are applied, as a publication and as an incremental checkpoint (written
// by training first, then revealed to the replicas whole: the window
// measures their applying it, not training writing it on the same
// cores). Prints a table and the targets.
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/exit_on_error.h"
#include "bench/key_distributions.h"
#include "bench/open_loop.h"
#include "checkpoint/manifest.h"
#include "client/client.h"
#include "client/serving_client.h"
#include "common/mutex.h"
#include "common/program_usage.h"
#include "common/text_proto.h"
#include "config/dlrm_config.h"
#include "config/worker_config.pb.h"
#include "data/criteo_reader.h"
#include "dense/eval_metrics.h"
#include "dense/model.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/serving.grpc.pb.h"
#include "proto/tables.pb.h"
#include "testing/server_process.h"

ABSL_FLAG(std::string, evaluate, "",
          "a labelled Criteo file: send its lines (labels cut) to "
          "--predictor's Predict and print the AUC and log loss as JSON");
ABSL_FLAG(std::string, predictor, "", "--evaluate: the ps_predictor");
ABSL_FLAG(int32_t, evaluate_batch, 256, "--evaluate: lines a Predict");
ABSL_FLAG(std::string, serving, "",
          "--evaluate: the serving replicas (shards separated by ';', a "
          "shard's replicas by ','): Lookup latency of --config's slots too");
ABSL_FLAG(double, latency_rate, 1000,
          "--evaluate: requests/s of the latency runs (Predict of one line; "
          "Lookup of one bag of --keys_per_bag lines' keys a slot)");
ABSL_FLAG(double, latency_seconds, 3,
          "--evaluate: seconds of each latency run");
ABSL_FLAG(std::string, config, "deploy/local/dlrm_large.txtpb",
          "Lookup: the WorkerConfig whose first table and slots are read");
ABSL_FLAG(std::string, predict_config, "deploy/local/dlrm_small.txtpb",
          "Predict: the WorkerConfig whose model and tables are served");
ABSL_FLAG(uint64_t, keys, 10'000'000, "rows in the served table");
ABSL_FLAG(double, zipf_s, 1.05, "Zipf exponent of the requests' keys");
ABSL_FLAG(int32_t, keys_per_bag, 20, "keys in each slot's bag");
ABSL_FLAG(int32_t, replicas, 2, "serving replicas (of one serving shard)");
ABSL_FLAG(std::string, rates, "1000,5000,10000",
          "Lookup request rates to measure (requests/s)");
ABSL_FLAG(double, seconds, 5, "seconds of load per rate");
ABSL_FLAG(int64_t, cache_rows, 200'000,
          "the client cache's rows in the cached runs (0: skip them)");
ABSL_FLAG(int32_t, predict_rate, 1000, "Predict requests/s");
ABSL_FLAG(double, publish_interval, 2.0,
          "seconds between publications under the training load");
ABSL_FLAG(double, freshness_seconds, 20, "seconds of freshness probes");
ABSL_FLAG(double, train_keys_per_second, 200'000,
          "the training load beside the freshness probes: Zipf keys pushed "
          "a second, in pushes of 10k (0: as fast as the shard takes them)");
ABSL_FLAG(uint64_t, big_update, 1'000'000,
          "rows of the publication applied under load (0: skip)");
ABSL_FLAG(int32_t, threads, 16, "sender threads of the load generator");
ABSL_FLAG(std::string, work_dir, "", "checkpoints go here (default: temp)");

namespace embedps::tools {
namespace {

using testing::ServerProcess;

using bench::Die;
using bench::LoadResult;
using bench::Must;
using bench::OpenLoop;
using bench::Percentile;

void PrintLoad(const std::string& what, const LoadResult& r) {
  std::printf("%-34s %8.0f %9.0f %8.3f %8.3f %8.3f %7" PRIu64 "\n",
              what.c_str(), r.rate, r.achieved,
              Percentile(r.latencies_ms, 0.50),
              Percentile(r.latencies_ms, 0.99),
              Percentile(r.latencies_ms, 0.999), r.errors);
  std::fflush(stdout);
}

bool ReadConfig(const std::string& path, config::WorkerConfig* config);

// --evaluate: AUC and log loss of a labelled file through Predict, then
// Predict (and with --serving, Lookup) latency at --latency_rate.
int Evaluate() {
  std::ifstream in(absl::GetFlag(FLAGS_evaluate));
  if (!in) {
    std::fprintf(stderr, "serve_bench: cannot read %s\n",
                 absl::GetFlag(FLAGS_evaluate).c_str());
    return 2;
  }
  auto stub = proto::Predictor::NewStub(grpc::CreateChannel(
      absl::GetFlag(FLAGS_predictor), grpc::InsecureChannelCredentials()));
  std::vector<float> probabilities, labels;
  std::vector<std::string> lines;  // label-less, for the latency runs
  uint64_t version = 0;
  const absl::Time start = absl::Now();
  std::string line;
  proto::PredictRequest request;
  const auto send = [&]() {
    if (request.line_size() == 0) return true;
    grpc::ClientContext context;
    proto::PredictResponse response;
    const grpc::Status status = stub->Predict(&context, request, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "serve_bench: Predict: %s\n",
                   status.error_message().c_str());
      return false;
    }
    probabilities.insert(probabilities.end(), response.probability().begin(),
                         response.probability().end());
    version = response.version();
    request.clear_line();
    return true;
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    labels.push_back(line.substr(0, tab) == "1" ? 1.0f : 0.0f);
    request.add_line(line.substr(tab + 1));
    if (lines.size() < 100'000) lines.push_back(line.substr(tab + 1));
    if (request.line_size() == absl::GetFlag(FLAGS_evaluate_batch) && !send()) {
      return 1;
    }
  }
  if (!send()) return 1;
  std::vector<float> logits(probabilities.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = std::clamp<double>(probabilities[i], 1e-7, 1 - 1e-7);
    logits[i] = static_cast<float>(std::log(p / (1 - p)));
  }
  nlohmann::ordered_json out = {
      {"samples", probabilities.size()},
      {"version", version},
      {"auc", dense::RocAuc(probabilities, labels)},
      {"logloss", dense::MeanLogLoss(logits, labels)},
      {"seconds", absl::ToDoubleSeconds(absl::Now() - start)},
  };
  if (lines.empty()) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  const double rate = absl::GetFlag(FLAGS_latency_rate);
  const double seconds = absl::GetFlag(FLAGS_latency_seconds);
  const int threads = absl::GetFlag(FLAGS_threads);
  out["latency_rate"] = rate;
  const LoadResult predict = OpenLoop(rate, seconds, threads, [&](uint64_t i) {
    proto::PredictRequest one;
    one.add_line(lines[i % lines.size()]);
    proto::PredictResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->Predict(&context, one, &response);
    return status.ok() ? absl::OkStatus()
                       : absl::InternalError(status.error_message());
  });
  out["predict_p50_ms"] = Percentile(predict.latencies_ms, 0.5);
  out["predict_p99_ms"] = Percentile(predict.latencies_ms, 0.99);
  out["predict_errors"] = predict.errors;
  if (!absl::GetFlag(FLAGS_serving).empty()) {
    config::WorkerConfig config;
    if (!ReadConfig(absl::GetFlag(FLAGS_config), &config)) return 2;
    client::ServingClientOptions options;
    for (absl::string_view shard :
         absl::StrSplit(absl::GetFlag(FLAGS_serving), ';', absl::SkipEmpty())) {
      options.replicas.emplace_back();
      for (absl::string_view r :
           absl::StrSplit(shard, ',', absl::SkipEmpty())) {
        options.replicas.back().emplace_back(r);
      }
    }
    options.deadline = absl::Seconds(1);
    options.attempt_timeout = absl::Milliseconds(500);
    auto serving = Must(client::ServingClient::Connect(options), "serving");
    // Each request: a bag a slot of the keys of --keys_per_bag lines.
    const int per_bag = absl::GetFlag(FLAGS_keys_per_bag);
    const std::vector<std::string> slot_tables = config::SlotTables(config);
    const size_t slots = slot_tables.size();
    data::CriteoBatch parsed;
    parsed.size = static_cast<int>(lines.size());
    parsed.labels.resize(lines.size());
    parsed.dense.resize(lines.size() * data::kCriteoDense);
    parsed.keys.resize(lines.size() * data::kCriteoSlots);
    for (size_t i = 0; i < lines.size(); ++i) {
      Die(data::ParseCriteoFeatures(lines[i].data(), lines[i].size(), &parsed,
                                    static_cast<int>(i)),
          "a test line");
    }
    const size_t requests = lines.size() / per_bag;
    // by_slot[s]: the keys of slot s, line after line.
    std::vector<std::vector<uint64_t>> by_slot(slots);
    for (size_t s = 0; s < slots; ++s) {
      for (size_t i = 0; i < requests * per_bag; ++i) {
        by_slot[s].push_back(parsed.keys[i * data::kCriteoSlots + s]);
      }
    }
    const std::vector<int32_t> offsets = {0, per_bag};
    const LoadResult lookup = OpenLoop(rate, seconds, threads, [&](uint64_t i) {
      const size_t r = i % requests;
      std::vector<client::ServingSlot> request(slots);
      for (size_t s = 0; s < slots; ++s) {
        request[s] = {
            slot_tables[s], config.embedding_dim(),
            absl::MakeConstSpan(by_slot[s]).subspan(r * per_bag, per_bag),
            offsets, proto::POOLING_SUM};
      }
      std::vector<std::vector<float>> pooled;
      return serving->Lookup(request, &pooled);
    });
    out["lookup_keys"] = slots * per_bag;
    out["lookup_p50_ms"] = Percentile(lookup.latencies_ms, 0.5);
    out["lookup_p99_ms"] = Percentile(lookup.latencies_ms, 0.99);
    out["lookup_errors"] = lookup.errors;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// A label-less Criteo line of random features whose categorical values
// follow `zipf`.
std::string RandomLine(std::mt19937_64& rng, const bench::ZipfRanks& zipf) {
  std::string line;
  for (int j = 0; j < 13; ++j) {
    absl::StrAppend(&line, j == 0 ? "" : "\t", rng() % 100);
  }
  for (int s = 0; s < 26; ++s) {
    absl::StrAppend(&line, "\t", absl::Hex(bench::KeyOfRank(zipf(rng)) >> 34));
  }
  return line;
}

bool ReadConfig(const std::string& path, config::WorkerConfig* config) {
  const absl::Status status =
      ReadTextProtoFile(path, absl::StrCat("the WorkerConfig ", path), config);
  if (!status.ok()) {
    std::fprintf(stderr, "serve_bench: %s\n", status.ToString().c_str());
  }
  return status.ok();
}

// The Predict model's config with its tables renamed ("_predict") so
// that they sit beside the Lookup table, optimizer SGD.
config::WorkerConfig PredictConfig(config::WorkerConfig config) {
  for (proto::TableConfig& table : *config.mutable_table()) {
    table.set_name(table.name() + "_predict");
    table.mutable_optimizer()->Clear();
    table.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
    table.mutable_optimizer()->set_learning_rate(1.0f);
  }
  for (config::SlotConfig& slot : *config.mutable_slot()) {
    slot.set_table(slot.table() + "_predict");
  }
  if (config.has_schema()) {
    for (config::SparseColumnConfig& column :
         *config.mutable_schema()->mutable_sparse()) {
      column.set_table(column.table() + "_predict");
    }
  }
  return config;
}

// A checkpoint of the trainer's tables with `dense` as its dense model,
// as ps_worker writes it.
// Writes a checkpoint with the dense model; its directory's name.
absl::StatusOr<std::string> CheckpointWithDense(
    client::Client& trainer, client::Client::CheckpointOptions options,
    const std::string& dense) {
  auto pending = trainer.StartCheckpoint(options);
  if (!pending.ok()) return pending.status();
  std::ofstream((*pending)->directory() + "/" +
                checkpoint::kDenseParametersFile)
      << dense;
  absl::StatusOr<proto::CheckpointManifest> manifest =
      (*pending)->Finish({checkpoint::kDenseParametersFile});
  if (!manifest.ok()) return manifest.status();
  return manifest->name();
}

// Makes checkpoint `name` of `from` appear whole in `into` (the root the
// replicas follow): its files hard-linked into a directory of another
// name, renamed into place. The replicas then see a checkpoint that
// training wrote earlier, so that what is measured is their applying it,
// not training writing it on the same cores.
void Reveal(const std::string& from, const std::string& into,
            const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path source = fs::path(from) / name;
  const fs::path staging = fs::path(into) / (".staging-" + name);
  fs::create_directories(staging);
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(source)) {
    const fs::path target = staging / fs::relative(entry.path(), source);
    if (entry.is_directory()) {
      fs::create_directories(target);
    } else {
      fs::create_hard_link(entry.path(), target);
    }
  }
  fs::rename(staging, fs::path(into) / name);
}

// Waits until every replica serves `step` or later.
void AwaitVersion(client::ServingClient& client, uint64_t step) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline) {
    bool all = true;
    for (const auto& shard : client.Versions()) {
      for (const auto& v : shard) all &= v.step() >= step;
    }
    if (all) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::fprintf(stderr,
               "serve_bench: replicas not at step %" PRIu64 " after 120 s\n",
               step);
  std::exit(1);
}

int Full() {
  config::WorkerConfig config, predict_config;
  if (!ReadConfig(absl::GetFlag(FLAGS_config), &config) ||
      !ReadConfig(absl::GetFlag(FLAGS_predict_config), &predict_config)) {
    return 2;
  }
  predict_config = PredictConfig(std::move(predict_config));
  const std::string server_binary =
      Must(testing::LocateBinary("", "server/ps_server"), "ps_server");
  const std::string predictor_binary =
      Must(testing::LocateBinary("", "worker/ps_predictor"), "ps_predictor");
  std::string work = absl::GetFlag(FLAGS_work_dir);
  if (work.empty()) work = testing::TestTempPath("serve_bench");
  // Training writes checkpoints under `root`; the replicas follow
  // `served`, where each appears once written (Reveal).
  const std::string root = work + "/checkpoints";
  const std::string served = work + "/served";
  std::filesystem::remove_all(root);
  std::filesystem::remove_all(served);
  std::filesystem::create_directories(root);
  std::filesystem::create_directories(served);
  const uint64_t keys = absl::GetFlag(FLAGS_keys);
  const int32_t dim = config.embedding_dim();
  const std::string table_name = config.table(0).name();
  std::printf("serve_bench: %" PRIu64
              " keys of dim %d, %d replicas, %d slots "
              "× %d keys a request, Zipf(%.2f), %d hardware threads\n",
              keys, dim, absl::GetFlag(FLAGS_replicas),
              static_cast<int>(config::SlotTables(config).size()),
              absl::GetFlag(FLAGS_keys_per_bag), absl::GetFlag(FLAGS_zipf_s),
              static_cast<int>(std::thread::hardware_concurrency()));

  // Training: the tables (values only), filled, a checkpoint.
  auto training = Must(ServerProcess::Start(server_binary, {}), "training");
  client::ClientOptions client_options;
  client_options.servers = {training->address()};
  client_options.retry.rpc_timeout = absl::Minutes(5);
  auto trainer = Must(client::Client::Connect(client_options), "client");
  proto::TableConfig table_config = config.table(0);
  table_config.mutable_optimizer()->Clear();
  table_config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  table_config.mutable_optimizer()->set_learning_rate(1.0f);
  const client::TableHandle table =
      Must(trainer->CreateTable(table_config), "CreateTable");
  // The Predict model: its tables hold the rows of the requests' lines.
  const bench::ZipfRanks zipf(keys, absl::GetFlag(FLAGS_zipf_s));
  std::vector<std::string> lines(4096);
  {
    std::mt19937_64 rng(11);
    for (std::string& l : lines) l = RandomLine(rng, zipf);
  }
  std::string dense_bytes;
  {
    auto model = Must(
        dense::CreateModel(config::ModelSpecOf(predict_config), {}), "model");
    dense_bytes = Must(dense::SerializeParameters(*model, 0), "dense");
    std::vector<uint64_t> line_keys;
    data::CriteoBatch parsed;
    parsed.size = 1;
    parsed.labels.resize(1);
    parsed.dense.resize(data::kCriteoDense);
    parsed.keys.resize(data::kCriteoSlots);
    for (const std::string& l : lines) {
      Die(data::ParseCriteoFeatures(l.data(), l.size(), &parsed, 0), "line");
      line_keys.insert(line_keys.end(), parsed.keys.begin(), parsed.keys.end());
    }
    for (const proto::TableConfig& t : predict_config.table()) {
      const client::TableHandle handle =
          Must(trainer->CreateTable(t), "CreateTable");
      std::vector<float> rows(line_keys.size() * t.dim());
      Die(trainer->Pull(handle, line_keys, absl::MakeSpan(rows)), "fill");
    }
  }
  const absl::Time fill_start = absl::Now();
  {
    constexpr uint64_t kBatch = 200'000;
    std::vector<uint64_t> batch;
    std::vector<float> values(kBatch * dim);
    for (uint64_t r = 0; r < keys; r += kBatch) {
      batch.clear();
      for (uint64_t k = r; k < std::min(keys, r + kBatch); ++k) {
        batch.push_back(bench::KeyOfRank(k));
      }
      Die(trainer->Pull(table, batch,
                        absl::MakeSpan(values).subspan(0, batch.size() * dim)),
          "fill");
    }
  }
  // The first publication starts the shard's change log: rows change
  // from here on (the fill is in the checkpoint).
  Must(trainer->Publish(1, dense_bytes), "Publish");
  client::Client::CheckpointOptions checkpoint;
  checkpoint.root = root;
  checkpoint.step = 1;
  Reveal(root, served,
         Must(CheckpointWithDense(*trainer, checkpoint, dense_bytes),
              "checkpoint"));
  std::printf("filled and checkpointed in %.1f s\n",
              absl::ToDoubleSeconds(absl::Now() - fill_start));

  std::vector<std::unique_ptr<ServerProcess>> replicas;
  std::vector<std::string> replica_addresses;
  for (int r = 0; r < absl::GetFlag(FLAGS_replicas); ++r) {
    replicas.push_back(
        Must(ServerProcess::Start(
                 server_binary,
                 {"--role=serving", "--follow_checkpoints=" + served,
                  "--training_servers=" + training->address(),
                  "--checkpoint_poll=1s"},
                 absl::Minutes(10)),
             "replica"));
    replica_addresses.push_back(replicas.back()->address());
  }
  // A version with the dense model, for the predictor.
  Must(trainer->Publish(2, dense_bytes), "Publish");
  client::ServingClientOptions serving;
  serving.replicas = {replica_addresses};
  serving.deadline = absl::Seconds(1);
  serving.attempt_timeout = absl::Milliseconds(500);
  auto plain = Must(client::ServingClient::Connect(serving), "serving client");
  serving.cache_rows = absl::GetFlag(FLAGS_cache_rows);
  serving.cache_ttl = absl::Seconds(1);
  auto cached = Must(client::ServingClient::Connect(serving), "cached client");
  AwaitVersion(*plain, 2);
  const std::string config_path = work + "/predict.txtpb";
  {
    std::string text;
    google::protobuf::TextFormat::PrintToString(predict_config, &text);
    std::ofstream(config_path) << text;
  }
  auto predictor =
      Must(ServerProcess::Start(
               predictor_binary,
               {"--config=" + config_path,
                "--serving=" + absl::StrJoin(replica_addresses, ","),
                "--deadline_ms=1000"},
               absl::Minutes(2)),
           "ps_predictor");

  // Pre-drawn requests: keys of each slot's bag.
  const int slots = static_cast<int>(config::SlotTables(config).size());
  const int per_bag = absl::GetFlag(FLAGS_keys_per_bag);
  constexpr int kRequests = 20000;
  std::vector<std::vector<uint64_t>> request_keys(kRequests);
  {
    std::mt19937_64 rng(7);
    for (auto& r : request_keys) {
      r.resize(static_cast<size_t>(slots) * per_bag);
      for (uint64_t& k : r) k = bench::KeyOfRank(zipf(rng));
    }
  }
  const std::vector<int32_t> offsets = {0, per_bag};
  const auto lookup = [&](client::ServingClient& c, uint64_t i) {
    const std::vector<uint64_t>& keys_of = request_keys[i % kRequests];
    std::vector<client::ServingSlot> request(slots);
    for (int s = 0; s < slots; ++s) {
      request[s] = {table_name, dim,
                    absl::MakeConstSpan(keys_of).subspan(
                        static_cast<size_t>(s) * per_bag, per_bag),
                    offsets, proto::POOLING_SUM};
    }
    std::vector<std::vector<float>> out;
    return c.Lookup(request, &out);
  };

  std::printf("\n%-34s %8s %9s %8s %8s %8s %7s\n",
              "Lookup (26 bags × ~20 keys)", "rate/s", "done/s", "p50 ms",
              "p99 ms", "p999 ms", "errors");
  const int threads = absl::GetFlag(FLAGS_threads);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  double best_rate = 0, best_rate_cached = 0;
  std::vector<LoadResult> steady;
  for (absl::string_view rate_text :
       absl::StrSplit(absl::GetFlag(FLAGS_rates), ',', absl::SkipEmpty())) {
    const double rate = std::stod(std::string(rate_text));
    LoadResult r = OpenLoop(rate, seconds, threads,
                            [&](uint64_t i) { return lookup(*plain, i); });
    PrintLoad("no cache", r);
    if (Percentile(r.latencies_ms, 0.99) < 1.0 && r.errors == 0) {
      best_rate = std::max(best_rate, rate);
    }
    steady.push_back(r);
    if (absl::GetFlag(FLAGS_cache_rows) > 0) {
      LoadResult c = OpenLoop(rate, seconds, threads,
                              [&](uint64_t i) { return lookup(*cached, i); });
      PrintLoad(absl::StrCat("cache ", absl::GetFlag(FLAGS_cache_rows),
                             " rows, 1 s TTL"),
                c);
      if (Percentile(c.latencies_ms, 0.99) < 1.0 && c.errors == 0) {
        best_rate_cached = std::max(best_rate_cached, rate);
      }
    }
  }
  const client::ServingClientStats cache_stats = cached->stats();
  if (cache_stats.cache_hits + cache_stats.cache_misses > 0) {
    std::printf("cache hit rate %.1f%%\n",
                100.0 * cache_stats.cache_hits /
                    (cache_stats.cache_hits + cache_stats.cache_misses));
  }

  // Predict, batch 1 and 64.
  std::printf("\n%-34s %8s %9s %8s %8s %8s %7s\n", "Predict (--predict_config)",
              "rate/s", "done/s", "p50 ms", "p99 ms", "p999 ms", "errors");
  auto predict_stub = proto::Predictor::NewStub(grpc::CreateChannel(
      predictor->address(), grpc::InsecureChannelCredentials()));
  for (int batch : {1, 64}) {
    LoadResult r = OpenLoop(
        absl::GetFlag(FLAGS_predict_rate), seconds, threads, [&](uint64_t i) {
          proto::PredictRequest request;
          for (int b = 0; b < batch; ++b) {
            request.add_line(lines[(i * batch + b) % lines.size()]);
          }
          proto::PredictResponse response;
          grpc::ClientContext context;
          const grpc::Status status =
              predict_stub->Predict(&context, request, &response);
          return status.ok() ? absl::OkStatus()
                             : absl::InternalError(status.error_message());
        });
    PrintLoad(absl::StrCat("batch ", batch), r);
  }

  // Freshness under a training load: pushes at full rate, publications
  // every --publish_interval, probes of rows pushed and acknowledged.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> step{3};
  std::atomic<uint64_t> load_pushes{0};
  std::thread load([&] {
    std::mt19937_64 rng(3);
    std::vector<uint64_t> batch(10'000);
    std::vector<float> grads(batch.size() * dim, 1e-4f);
    const double rate = absl::GetFlag(FLAGS_train_keys_per_second);
    const absl::Time begin = absl::Now();
    for (uint64_t i = 0; !stop; ++i) {
      if (rate > 0) {
        const absl::Time due = begin + absl::Seconds(i * 10'000.0 / rate);
        if (due > absl::Now()) absl::SleepFor(due - absl::Now());
      }
      for (uint64_t& k : batch) k = bench::KeyOfRank(zipf(rng));
      if (trainer->Push(table, batch, grads).ok()) ++load_pushes;
    }
  });
  std::thread publisher([&] {
    while (!stop) {
      absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_publish_interval)));
      if (!stop) trainer->Publish(step++, dense_bytes).IgnoreError();
    }
  });
  struct Probe {
    uint64_t key;
    float value;  // its first float once pushed
    absl::Time acked;
  };
  Mutex probes_mu;
  std::vector<Probe> pending;
  std::vector<double> lags_ms;
  std::thread poller([&] {
    while (!stop) {
      std::vector<Probe> now;
      {
        MutexLock lock(&probes_mu);
        now = pending;
      }
      if (!now.empty()) {
        std::vector<uint64_t> probe_keys;
        for (const Probe& p : now) probe_keys.push_back(p.key);
        std::vector<client::ServingSlot> request = {
            {table_name, dim, probe_keys, {}, proto::POOLING_NONE}};
        std::vector<std::vector<float>> out;
        if (plain->Lookup(request, &out).ok()) {
          const absl::Time seen = absl::Now();
          MutexLock lock(&probes_mu);
          for (size_t i = 0; i < now.size(); ++i) {
            if (out[0][i * dim] != now[i].value) continue;
            lags_ms.push_back(absl::ToDoubleMilliseconds(seen - now[i].acked));
            pending.erase(std::remove_if(pending.begin(), pending.end(),
                                         [&](const Probe& p) {
                                           return p.key == now[i].key;
                                         }),
                          pending.end());
          }
        }
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  {
    const absl::Time end =
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_freshness_seconds));
    std::vector<float> row(dim), grad(dim, 1.0f);
    // Keys past the table's ranks: no other load touches them.
    for (uint64_t probe = 0; absl::Now() < end; ++probe) {
      const uint64_t key = bench::KeyOfRank(keys + probe);
      Die(trainer->Pull(table, {{key}}, absl::MakeSpan(row)), "probe read");
      Die(trainer->Push(table, {{key}}, grad), "probe push");
      const absl::Time acked = absl::Now();
      {
        MutexLock lock(&probes_mu);
        pending.push_back({key, row[0] - 1.0f, acked});
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_publish_interval) + 1));
  }
  stop = true;
  load.join();
  publisher.join();
  poller.join();
  std::printf("\nfreshness (publish every %.1f s, %" PRIu64
              " training pushes of 10k keys alongside): %zu probes, lag p50 "
              "%.0f ms, p99 %.0f ms, max %.0f ms; %zu never seen\n",
              absl::GetFlag(FLAGS_publish_interval), load_pushes.load(),
              lags_ms.size(), Percentile(lags_ms, 0.5),
              Percentile(lags_ms, 0.99), Percentile(lags_ms, 1.0),
              pending.size());

  // Latency while --big_update changed rows are applied: once as a
  // publication (the hot path), once as an incremental checkpoint (the
  // replicas apply its changed rows onto the version they serve).
  double steady_p99 = NAN;
  double update_p99[2] = {NAN, NAN};
  const uint64_t n = std::min(absl::GetFlag(FLAGS_big_update), keys);
  for (int how = 0; n > 0 && how < 2; ++how) {
    const double rate = 1000;
    if (how == 0) {  // after the last publication has settled
      AwaitVersion(*plain, step - 1);
      absl::SleepFor(absl::Seconds(1));
      LoadResult before = OpenLoop(
          rate, 5, threads, [&](uint64_t i) { return lookup(*plain, i); });
      steady_p99 = Percentile(before.latencies_ms, 0.99);
    }
    std::vector<uint64_t> batch;
    std::vector<float> grads;
    for (uint64_t r = 0; r < n; r += 100'000) {
      batch.clear();
      for (uint64_t k = r; k < std::min(n, r + 100'000); ++k) {
        batch.push_back(bench::KeyOfRank(k));
      }
      grads.assign(batch.size() * dim, 1e-3f);
      Die(trainer->Push(table, batch, grads), "update push");
    }
    const uint64_t update_step = step++;
    std::string written;  // the incremental checkpoint, written beforehand
    if (how == 1) {
      client::Client::CheckpointOptions incremental;
      incremental.root = root;
      incremental.step = update_step;
      incremental.incremental = true;
      written = Must(CheckpointWithDense(*trainer, incremental, dense_bytes),
                     "incremental");
      absl::SleepFor(absl::Seconds(2));  // the writer's aftermath settles
    }
    double apply_seconds = NAN;
    std::thread apply([&] {
      absl::SleepFor(absl::Milliseconds(500));
      const absl::Time begin = absl::Now();
      if (how == 0) {
        Must(trainer->Publish(update_step, dense_bytes), "big publish");
      } else {
        Reveal(root, served, written);
      }
      AwaitVersion(*plain, update_step);
      apply_seconds = absl::ToDoubleSeconds(absl::Now() - begin);
    });
    LoadResult during = OpenLoop(rate, how == 0 ? 8 : 15, threads,
                                 [&](uint64_t i) { return lookup(*plain, i); });
    apply.join();
    update_p99[how] = Percentile(during.latencies_ms, 0.99);
    uint64_t in_place = 0;  // replicas that applied it onto their version
    for (const auto& shard : plain->Versions()) {
      for (const auto& v : shard) in_place += v.increments_applied();
    }
    std::printf(
        "\np99 at %.0f Lookups/s: steady %.3f ms; while %" PRIu64
        " changed rows arrive as %s: %.3f ms (%.2fx; served by both "
        "replicas %.1f s after it began%s)\n",
        rate, steady_p99, n,
        how == 0 ? "a publication" : "an incremental checkpoint",
        update_p99[how], update_p99[how] / steady_p99, apply_seconds,
        how == 0 ? ""
                 : absl::StrCat("; applied in place by ", in_place, " replicas")
                       .c_str());
  }

  std::printf("\nagainst the targets:\n");
  double p99_5k = NAN;
  for (const LoadResult& r : steady) {
    if (r.rate == 5000) p99_5k = Percentile(r.latencies_ms, 0.99);
  }
  std::printf("  Lookup p99 < 1 ms at 5k/s (no cache): %.3f ms — %s\n", p99_5k,
              p99_5k < 1.0 ? "met" : "missed");
  std::printf(
      "  highest measured rate with p99 < 1 ms: %.0f/s (cache: %.0f/s)\n",
      best_rate, best_rate_cached);
  std::printf(
      "  freshness p99 < 5 s: %.0f ms — %s\n", Percentile(lags_ms, 0.99),
      Percentile(lags_ms, 0.99) < 5000 && pending.empty() ? "met" : "missed");
  for (int how = 0; how < 2; ++how) {
    if (std::isnan(update_p99[how])) continue;
    std::printf(
        "  p99 while applying 1M changed rows (%s) < 2x steady: "
        "%.2fx — %s\n",
        how == 0 ? "publication" : "incremental checkpoint",
        update_p99[how] / steady_p99,
        update_p99[how] < 2 * steady_p99 ? "met" : "missed");
  }
  predictor->Stop();
  for (auto& r : replicas) r->Stop();
  training->Stop();
  std::filesystem::remove_all(root);
  std::filesystem::remove_all(served);
  return 0;
}

}  // namespace
}  // namespace embedps::tools

int main(int argc, char** argv) {
  embedps::SetProgramUsage(
      "latency and freshness of serving replicas (open loop), or the AUC of "
      "a labelled file through ps_predictor (--evaluate).",
      {"tools/serve_bench.cc"});
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_evaluate).empty()) {
    return embedps::tools::Evaluate();
  }
  return embedps::tools::Full();
}
