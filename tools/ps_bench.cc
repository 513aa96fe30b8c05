// ps_bench: Pull and Push throughput of real ps_server processes on
// loopback, next to the raw gRPC ceilings measured in the same run.
//
//   bazel build //tools:ps_bench //server:ps_server //tools:raw_grpc_server
//   bazel-bin/tools/ps_bench [--dims=16,64] [--batch_sizes=10000,100000]
//       [--shard_counts=1,2] [--inflight=1,4] [--distributions=uniform,zipf]
//       [--wires=float32,float16] [--seconds=1] [--rounds=1]
//
// For every shape it starts the shards (ps_server, 127.0.0.1, port 0) and
// as many raw_grpc_server processes, fills an Adagrad table with `keys`
// rows, and measures for `seconds` each:
//   Pull / Push: embedps::client::Client calls from `inflight` threads,
//     each batch `batch` distinct keys (uniform or Zipf over the key space);
//   raw: the same number of unary calls, split over the same number of
//     processes, whose requests and responses carry exactly the bytes of
//     the Pull (8 B a key in, value bytes · dim a key out) or of the Push
//     (8 B + value bytes · dim a key in), with no work on the server;
//     "raw" through generated protobuf stubs and handlers (protobuf copies
//     each payload into and out of its message), "zc" (zero copy) with
//     each payload in a slice of its own (wire/bulk_message.h).
// keys/s counts the caller's keys; MB/s counts request + response payload.
// With --rounds=n every op and its ceilings are measured back to back n
// times and the medians printed (the ratios are medians of each round's).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/key_distributions.h"
#include "client/client.h"
#include "common/malloc_options.h"
#include "grpcpp/grpcpp.h"
#include "proto/replication.grpc.pb.h"
#include "proto/tables.pb.h"
#include "testing/server_process.h"
#include "tools/raw_bench.grpc.pb.h"
#include "wire/bulk_message.h"

ABSL_FLAG(std::vector<std::string>, dims,
          (std::vector<std::string>{"16", "64"}), "row widths");
ABSL_FLAG(std::vector<std::string>, batch_sizes,
          (std::vector<std::string>{"10000", "100000"}),
          "distinct keys per Pull/Push");
ABSL_FLAG(std::vector<std::string>, shard_counts,
          (std::vector<std::string>{"1", "2"}), "shards");
ABSL_FLAG(std::vector<std::string>, inflight,
          (std::vector<std::string>{"1", "4"}),
          "requests in flight (threads sharing one client)");
ABSL_FLAG(std::vector<std::string>, distributions,
          (std::vector<std::string>{"uniform", "zipf"}), "key distributions");
ABSL_FLAG(std::vector<std::string>, wires,
          (std::vector<std::string>{"float32", "float16"}), "value encodings");
ABSL_FLAG(std::vector<std::string>, ops,
          (std::vector<std::string>{"pull", "push"}),
          "operations to measure (one alone, e.g. for a profile)");
ABSL_FLAG(uint64_t, keys, 1000000, "rows per table (the key space)");
ABSL_FLAG(int, channels_per_shard, 1,
          "gRPC channels (TCP connections) from the client to each shard");
ABSL_FLAG(uint64_t, max_keys_per_request, 0,
          "the client's ClientOptions.max_keys_per_request (0: its default)");
ABSL_FLAG(double, zipf_s, 1.05, "Zipf exponent");
ABSL_FLAG(double, seconds, 1.0, "duration of each measurement");
ABSL_FLAG(int, rounds, 1,
          "measurements of each figure, each op back to back with its "
          "ceilings; the medians (of figures and of ratios) are printed");
ABSL_FLAG(std::vector<std::string>, replica_counts,
          (std::vector<std::string>{"1"}),
          "replicas per shard; above 1 a coordinator is started too and the "
          "shards are replicated (docs/operations.md \"Replication\"): "
          "1,2 measures what replication costs in one run");
ABSL_FLAG(std::vector<std::string>, sweeps, (std::vector<std::string>{"off"}),
          "off: no eviction sweeps; on: the shards sweep back to back "
          "(--ttl_sweep_interval=1ms) a table with a TTL that expires "
          "nothing, so every sweep reads every row under the stripe locks; "
          "off,on prints the cost of sweeping next to each figure (shape "
          "N+sweep, \"vs off\")");
ABSL_FLAG(std::vector<std::string>, servers, {},
          "host:port of a running cluster, in shard order, to measure instead "
          "of starting one (--shard_counts is then ignored)");
ABSL_FLAG(std::string, server_binary, "",
          "ps_server (default: found next to ps_bench)");
ABSL_FLAG(std::string, raw_binary, "",
          "raw_grpc_server (default: found next to ps_bench)");

namespace embedps::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> Ints(const std::vector<std::string>& values) {
  std::vector<int> out;
  for (const std::string& v : values) {
    int x = 0;
    if (!absl::SimpleAtoi(v, &x) || x <= 0) {
      std::fprintf(stderr, "ps_bench: '%s' is not a positive integer\n",
                   v.c_str());
      std::exit(2);
    }
    out.push_back(x);
  }
  return out;
}

// A sibling binary (testing/child_process.h), or exit.
std::string FindBinary(const std::string& flag, const std::string& relative) {
  absl::StatusOr<std::string> path = testing::LocateBinary(flag, relative);
  if (path.ok()) return *path;
  std::fprintf(stderr, "ps_bench: %s\n",
               std::string(path.status().message()).c_str());
  std::exit(2);
}

// Runs `call(thread, iteration)` on `threads` threads for `seconds`;
// returns calls completed per second.
double CallsPerSecond(int threads, double seconds,
                      const std::function<void(int, uint64_t)>& call) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> calls{0};
  std::vector<std::thread> pool;
  const auto start = Clock::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        call(t, i);
        calls.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& th : pool) th.join();
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();
  return calls.load() / elapsed;
}

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "ps_bench: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

// Batches of `size` distinct keys.
std::vector<std::vector<uint64_t>> MakeBatches(int count, int size,
                                               uint64_t keys,
                                               const bench::ZipfRanks* zipf,
                                               uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> uniform(0, keys - 1);
  std::vector<std::vector<uint64_t>> batches(count);
  for (auto& batch : batches) {
    absl::flat_hash_set<uint64_t> seen;
    while (batch.size() < static_cast<size_t>(size)) {
      const uint64_t key =
          bench::KeyOfRank(zipf != nullptr ? (*zipf)(rng) : uniform(rng));
      if (seen.insert(key).second) batch.push_back(key);
    }
  }
  return batches;
}

struct Cluster {
  std::unique_ptr<testing::ServerProcess> coordinator;
  std::vector<std::unique_ptr<testing::ServerProcess>> servers, raw;
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<RawBench::Stub>> raw_stubs;
  std::vector<std::unique_ptr<grpc::GenericStub>> raw_generic_stubs;
  // What zero-copy raw requests carry (sized before each measurement, so
  // that no measurement pays for faulting it in).
  std::string zeros;
};

// Starts `shards` ps_server processes, or uses `running` when given, and
// as many raw servers.
// Waits until every replica of every shard is in sync.
void AwaitInSync(const std::string& coordinator, int shards, int replicas) {
  const auto directory = proto::ReplicaDirectory::NewStub(
      grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials()));
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  for (int s = 0; s < shards; ++s) {
    while (true) {
      grpc::ClientContext context;
      proto::ReplicaViewRequest request;
      request.set_shard(s);
      proto::ReplicaView view;
      if (directory->View(&context, request, &view).ok() &&
          view.in_sync_size() == replicas) {
        break;
      }
      if (absl::Now() > give_up) {
        Check(absl::DeadlineExceededError("replicas not in sync in 60 s"),
              "starting replicated shards");
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
}

Cluster StartCluster(int shards, int replicas, bool sweeping,
                     const std::vector<std::string>& running,
                     const std::string& server, const std::string& raw) {
  Cluster c;
  if (running.empty() && replicas > 1) {
    auto coordinator =
        testing::ServerProcess::Start(server, {"--role=coordinator"});
    Check(coordinator.status(), "starting the coordinator");
    c.coordinator = std::move(*coordinator);
  }
  for (int s = 0; s < shards; ++s) {
    if (!running.empty()) {
      c.addresses.push_back(running[s]);
    } else {
      std::vector<std::string> addresses;
      for (int r = 0; r < replicas; ++r) {
        std::vector<std::string> args = {absl::StrCat("--shard_index=", s),
                                         absl::StrCat("--num_shards=", shards)};
        if (c.coordinator != nullptr) {
          args.push_back("--replica_directory=" + c.coordinator->address());
        }
        if (sweeping) args.push_back("--ttl_sweep_interval=1ms");
        auto p = testing::ServerProcess::Start(server, args);
        Check(p.status(), "starting ps_server");
        addresses.push_back((*p)->address());
        c.servers.push_back(std::move(*p));
      }
      c.addresses.push_back(absl::StrJoin(addresses, "|"));
    }
    auto r = testing::ServerProcess::Start(raw, {});
    Check(r.status(), "starting raw_grpc_server");
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(1 << 30);
    args.SetMaxSendMessageSize(1 << 30);
    const auto channel = grpc::CreateCustomChannel(
        (*r)->address(), grpc::InsecureChannelCredentials(), args);
    c.raw_stubs.push_back(RawBench::NewStub(channel));
    c.raw_generic_stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
    c.raw.push_back(std::move(*r));
  }
  if (c.coordinator != nullptr) {
    AwaitInSync(c.coordinator->address(), shards, replicas);
  }
  return c;
}

// The two ceilings: the raw server's Call (protobuf copies the payloads)
// and CallBulk (payloads in slices of their own, no copies).
enum class RawWire { kProtobuf, kZeroCopy };

// One raw "call": a unary RPC to every raw server in parallel, each with
// its share of the bytes (as the client splits a batch over shards).
void RawCall(Cluster& c, RawWire wire, size_t request_bytes,
             size_t response_bytes) {
  const size_t shards = c.raw_stubs.size();
  std::vector<std::future<void>> pending;
  const auto one = [&](size_t s) {
    RawRequest request;
    request.set_response_bytes(static_cast<uint32_t>(response_bytes / shards));
    grpc::ClientContext context;
    grpc::Status status;
    if (wire == RawWire::kProtobuf) {
      request.mutable_payload()->resize(request_bytes / shards);
      RawResponse response;
      status = c.raw_stubs[s]->Call(&context, request, &response);
    } else {
      std::vector<wire::BulkField> payload;
      payload.push_back({RawRequest::kPayloadFieldNumber,
                         grpc::Slice(c.zeros.data(), request_bytes / shards,
                                     grpc::Slice::STATIC_SLICE)});
      grpc::ByteBuffer response;
      status = wire::BulkUnaryCall(
          *c.raw_generic_stubs[s],
          absl::StrCat("/", RawBench::service_full_name(), "/CallBulk"),
          &context, wire::SerializeBulkMessage(request, std::move(payload)),
          &response);
    }
    if (!status.ok()) {
      std::fprintf(stderr, "raw call failed: %s\n",
                   status.error_message().c_str());
      std::exit(1);
    }
  };
  for (size_t s = 0; s + 1 < shards; ++s)
    pending.push_back(std::async(std::launch::async, one, s));
  one(shards - 1);
  for (auto& f : pending) f.get();
}

int Run() {
  // Every flag is checked before any server starts (Ints exits on a bad
  // one, which would leave started servers behind).
  const uint64_t keys = absl::GetFlag(FLAGS_keys);
  const std::vector<int> dims = Ints(absl::GetFlag(FLAGS_dims));
  const std::vector<int> batch_sizes = Ints(absl::GetFlag(FLAGS_batch_sizes));
  const std::vector<int> inflights = Ints(absl::GetFlag(FLAGS_inflight));
  const std::vector<int> flag_shard_counts =
      Ints(absl::GetFlag(FLAGS_shard_counts));
  for (int batch : batch_sizes) {
    if (static_cast<uint64_t>(batch) > keys) {
      std::fprintf(stderr,
                   "ps_bench: a batch of %d distinct keys needs --keys >= %d "
                   "(got %llu)\n",
                   batch, batch, static_cast<unsigned long long>(keys));
      return 2;
    }
  }
  const std::string server =
      FindBinary(absl::GetFlag(FLAGS_server_binary), "server/ps_server");
  const std::string raw =
      FindBinary(absl::GetFlag(FLAGS_raw_binary), "tools/raw_grpc_server");
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (rounds < 1) {
    std::fprintf(stderr, "ps_bench: --rounds must be >= 1 (got %d)\n", rounds);
    return 2;
  }
  const std::vector<std::string> ops = absl::GetFlag(FLAGS_ops);
  const bool measure_pull =
      std::find(ops.begin(), ops.end(), "pull") != ops.end();
  const bool measure_push =
      std::find(ops.begin(), ops.end(), "push") != ops.end();
  if (!measure_pull && !measure_push) {
    std::fprintf(stderr, "ps_bench: --ops names neither pull nor push\n");
    return 2;
  }
  const bench::ZipfRanks zipf(keys, absl::GetFlag(FLAGS_zipf_s));
  std::printf(
      "ps_bench: %llu keys per table, Adagrad, %.1f s per figure, %u hardware "
      "threads\n",
      static_cast<unsigned long long>(keys), seconds,
      std::thread::hardware_concurrency());
  std::printf("%-5s %4s %7s %6s %8s %8s %8s %12s %9s %12s %7s %12s %7s%s\n",
              "op", "dim", "batch", "shards", "inflight", "keys", "wire",
              "keys/s", "MB/s", "raw keys/s", "vs raw", "zc keys/s", "vs zc",
              " vs off");

  const std::vector<std::string> running = absl::GetFlag(FLAGS_servers);
  const std::vector<int> shard_counts =
      running.empty() ? flag_shard_counts
                      : std::vector<int>{static_cast<int>(running.size())};
  const std::vector<int> replica_counts =
      running.empty() ? Ints(absl::GetFlag(FLAGS_replica_counts))
                      : std::vector<int>{1};
  std::vector<bool> sweep_modes;
  for (const std::string& mode : absl::GetFlag(FLAGS_sweeps)) {
    if (mode != "off" && mode != "on") {
      std::fprintf(stderr, "ps_bench: --sweeps takes off and on, got %s\n",
                   mode.c_str());
      return 2;
    }
    sweep_modes.push_back(mode == "on");
  }
  if (!running.empty() && sweep_modes != std::vector<bool>{false}) {
    std::fprintf(stderr,
                 "ps_bench: --sweeps=on starts its own shards; it cannot be "
                 "combined with --servers\n");
    return 2;
  }
  // Keys/s without sweeps, by figure (op, dim, batch, ...), for "vs off".
  absl::flat_hash_map<std::string, double> unswept;
  for (int shards : shard_counts) {
    for (int replicas : replica_counts) {
      for (const bool sweeping : sweep_modes) {
        Cluster cluster =
            StartCluster(shards, replicas, sweeping, running, server, raw);
        const std::string shape =
            absl::StrCat(replicas > 1 ? absl::StrCat(shards, "x", replicas)
                                      : absl::StrCat(shards),
                         sweeping ? "+sweep" : "");
        for (int dim : dims) {
          for (const std::string& wire_name : absl::GetFlag(FLAGS_wires)) {
            const proto::ValueType wire =
                wire_name == "float16" ? proto::FLOAT16 : proto::FLOAT32;
            const size_t value_bytes = wire == proto::FLOAT16 ? 2 : 4;
            client::ClientOptions options;
            options.servers = cluster.addresses;
            options.wire_type = wire;
            options.channels_per_shard =
                absl::GetFlag(FLAGS_channels_per_shard);
            if (absl::GetFlag(FLAGS_max_keys_per_request) > 0) {
              options.max_keys_per_request =
                  absl::GetFlag(FLAGS_max_keys_per_request);
            }
            auto client_or = client::Client::Connect(options);
            Check(client_or.status(), "connecting");
            auto client = std::move(client_or).value();
            proto::TableConfig config;
            config.set_name(absl::StrCat("bench_dim", dim));
            config.set_dim(dim);
            config.mutable_optimizer()->set_kind(
                proto::OptimizerConfig::ADAGRAD);
            // Calls carry no step, so rows touched at step 0 never expire:
            // each sweep reads every row and removes none.
            if (sweeping) config.mutable_eviction()->set_ttl(1u << 30);
            auto table_or = client->CreateTable(config);
            Check(table_or.status(), "CreateTable");
            const client::TableHandle table = *table_or;
            {  // Fill the table so that Pulls read rows rather than create
               // them.
              std::vector<uint64_t> all(std::min<uint64_t>(keys, 100000));
              std::vector<float> values(all.size() * dim);
              for (uint64_t begin = 0; begin < keys; begin += all.size()) {
                const size_t n = std::min<uint64_t>(all.size(), keys - begin);
                for (size_t i = 0; i < n; ++i)
                  all[i] = bench::KeyOfRank(begin + i);
                Check(client->Pull(table, absl::MakeConstSpan(all.data(), n),
                                   absl::MakeSpan(values.data(), n * dim)),
                      "filling");
              }
            }
            for (int batch : batch_sizes) {
              for (int inflight : inflights) {
                for (const std::string& dist :
                     absl::GetFlag(FLAGS_distributions)) {
                  std::vector<std::vector<std::vector<uint64_t>>> batches;
                  for (int t = 0; t < inflight; ++t) {
                    batches.push_back(MakeBatches(
                        4, batch, keys, dist == "zipf" ? &zipf : nullptr,
                        17 * t + dim));
                  }
                  std::vector<std::vector<float>> out(
                      inflight, std::vector<float>(size_t{1} * batch * dim));
                  std::vector<float> grads(size_t{1} * batch * dim, 1e-3f);
                  const size_t pull_in = size_t{8} * batch,
                               pull_out = value_bytes * dim * batch;
                  const size_t push_in =
                      (8 + value_bytes * dim) * static_cast<size_t>(batch);
                  // Calls per second of each op and its two ceilings, measured
                  // back to back in every round.
                  struct Round {
                    double op, raw, zero_copy;
                  };
                  cluster.zeros.resize(std::max(pull_in, push_in));
                  std::vector<Round> pulls, pushes;
                  for (int round = 0; round < rounds; ++round) {
                    Round pull{}, push{};
                    if (measure_pull) {
                      pull.op = CallsPerSecond(
                          inflight, seconds, [&](int t, uint64_t i) {
                            Check(client->Pull(table, batches[t][i % 4],
                                               absl::MakeSpan(out[t])),
                                  "Pull");
                          });
                    }
                    if (measure_push) {
                      push.op = CallsPerSecond(
                          inflight, seconds, [&](int t, uint64_t i) {
                            Check(client->Push(table, batches[t][i % 4], grads),
                                  "Push");
                          });
                    }
                    for (const RawWire raw_wire :
                         {RawWire::kProtobuf, RawWire::kZeroCopy}) {
                      const double raw_pull =
                          !measure_pull
                              ? 0
                              : CallsPerSecond(inflight, seconds,
                                               [&](int, uint64_t) {
                                                 RawCall(cluster, raw_wire,
                                                         pull_in, pull_out);
                                               });
                      const double raw_push =
                          !measure_push
                              ? 0
                              : CallsPerSecond(
                                    inflight, seconds, [&](int, uint64_t) {
                                      RawCall(cluster, raw_wire, push_in, 0);
                                    });
                      (raw_wire == RawWire::kProtobuf ? pull.raw
                                                      : pull.zero_copy) =
                          raw_pull;
                      (raw_wire == RawWire::kProtobuf ? push.raw
                                                      : push.zero_copy) =
                          raw_push;
                    }
                    pulls.push_back(pull);
                    pushes.push_back(push);
                  }
                  const auto row = [&](const char* op,
                                       const std::vector<Round>& rounds_of_op,
                                       size_t bytes) {
                    const auto median = [&](auto value) {
                      std::vector<double> v;
                      for (const Round& r : rounds_of_op) v.push_back(value(r));
                      std::sort(v.begin(), v.end());
                      return v[v.size() / 2];
                    };
                    const double calls =
                        median([](const Round& r) { return r.op; });
                    const std::string figure =
                        absl::StrCat(op, dim, "/", batch, "/", shards, "x",
                                     replicas, "/", inflight, dist, wire_name);
                    std::string vs_off;
                    if (!sweeping) {
                      unswept[figure] = calls;
                    } else if (auto it = unswept.find(figure);
                               it != unswept.end()) {
                      vs_off = absl::StrFormat(" %6.2fx", calls / it->second);
                    }
                    std::printf(
                        "%-5s %4d %7d %6s %8d %8s %8s %10.2f M %9.0f %10.2f M "
                        "%6.2fx %10.2f M %6.2fx%s\n",
                        op, dim, batch, shape.c_str(), inflight, dist.c_str(),
                        wire_name.c_str(), calls * batch / 1e6,
                        calls * bytes / 1e6,
                        median([](const Round& r) { return r.raw; }) * batch /
                            1e6,
                        median([](const Round& r) { return r.op / r.raw; }),
                        median([](const Round& r) { return r.zero_copy; }) *
                            batch / 1e6,
                        median(
                            [](const Round& r) { return r.op / r.zero_copy; }),
                        vs_off.c_str());
                    std::fflush(stdout);
                  };
                  if (measure_pull) row("pull", pulls, pull_in + pull_out);
                  if (measure_push) row("push", pushes, push_in);
                }
              }
            }
          }
        }
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace embedps::tools

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  embedps::ReuseLargeAllocations();
  return embedps::tools::Run();
}
