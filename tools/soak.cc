// soak: a replicated cluster under full load for a long time (a benchmark,
// not a test; docs/benchmarks.md "Soak").
//
// Starts a coordinator, --shards shards of --replicas replicas each and a
// serving replica that follows the checkpoints; two clients pull and push
// (Adagrad, dim 64) as fast as they can; an incremental checkpoint every
// --checkpoint_every; a SIGKILL of a random training replica every
// --kill_every (offset by --kill_offset). Killed replicas (and any that leave
// their shard, exit 75) are restarted at once on their port, as a supervisor
// would.
//
// Every second it appends a line to OUT/soak.tsv: keys/s, p99 of Pull and
// Push, errors, and the RSS of every process; at the end it writes
// OUT/soak.gp (gnuplot: OUT/throughput.png, latency.png, rss.png) and
// prints the summary: RSS growth after warm-up, errors, and how long the
// throughput took to come back after each kill.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "proto/replication.grpc.pb.h"
#include "proto/tables.pb.h"
#include "testing/server_process.h"

ABSL_FLAG(std::string, out, "/tmp/embedps-soak", "where the results go");
ABSL_FLAG(absl::Duration, duration, absl::Hours(1), "how long to run");
ABSL_FLAG(absl::Duration, kill_every, absl::Minutes(10),
          "SIGKILL a random training replica this often");
ABSL_FLAG(absl::Duration, kill_offset, absl::Seconds(30),
          "each kill comes this long after its --kill_every mark (30 s: "
          "halfway between two checkpoints, so that the recovery measured "
          "is the kill's, not the dip of the serving replica loading a "
          "checkpoint on the same cores; 0: kills land on checkpoints)");
ABSL_FLAG(absl::Duration, checkpoint_every, absl::Minutes(1),
          "incremental checkpoint this often");
ABSL_FLAG(absl::Duration, warm_up, absl::Minutes(5),
          "RSS growth is measured from here");
ABSL_FLAG(int, shards, 2, "training shards");
ABSL_FLAG(int, replicas, 2, "replicas per shard");
ABSL_FLAG(uint64_t, keys, 1000000, "the key space");
ABSL_FLAG(int, batch, 10000, "keys per Pull and Push");
ABSL_FLAG(std::string, server_binary, "server/ps_server", "ps_server");

namespace embedps::tools {
namespace {

using testing::ServerProcess;

void Check(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "soak: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

uint64_t RssKiB(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

// Latencies of one second, in microseconds.
struct Window {
  std::mutex mu;
  std::vector<double> pull_us, push_us;
  uint64_t keys = 0;
  uint64_t errors = 0;
  std::string last_error;
};

double P99(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t at = v.size() * 99 / 100;
  std::nth_element(v.begin(), v.begin() + at, v.end());
  return v[at];
}

int Run() {
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string root = out + "/checkpoints";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  const std::string server = absl::GetFlag(FLAGS_server_binary);
  const int shards = absl::GetFlag(FLAGS_shards);
  const int replicas = absl::GetFlag(FLAGS_replicas);

  auto coordinator =
      ServerProcess::Start(server, {"--role=coordinator", "--log_level=warn"});
  Check(coordinator.status(), "starting the coordinator");
  struct Replica {
    int shard;
    std::string port;
    std::unique_ptr<ServerProcess> process;
    int restarts = 0;
  };
  std::vector<Replica> training;
  auto start = [&](Replica& r) {
    std::vector<std::string> args = {
        absl::StrCat("--shard_index=", r.shard),
        absl::StrCat("--num_shards=", shards),
        "--replica_directory=" + (*coordinator)->address(),
        "--checkpoint_root=" + root, "--log_level=info"};
    if (!r.port.empty()) args.push_back("--port=" + r.port);
    auto p = ServerProcess::Start(server, args);
    Check(p.status(), "starting a replica");
    r.process = std::move(*p);
    r.port = r.process->address().substr(r.process->address().rfind(':') + 1);
  };
  for (int s = 0; s < shards; ++s) {
    for (int r = 0; r < replicas; ++r) {
      training.push_back({s, "", nullptr});
      start(training.back());
    }
  }
  std::vector<std::string> servers(shards);
  for (const Replica& r : training) {
    servers[r.shard] += (servers[r.shard].empty() ? "" : "|") +
                        std::string("127.0.0.1:") + r.port;
  }
  const auto directory = proto::ReplicaDirectory::NewStub(grpc::CreateChannel(
      (*coordinator)->address(), grpc::InsecureChannelCredentials()));
  auto in_sync = [&](int shard) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    proto::ReplicaViewRequest request;
    request.set_shard(shard);
    proto::ReplicaView view;
    if (!directory->View(&context, request, &view).ok()) return -1;
    return view.in_sync_size();
  };
  for (int s = 0; s < shards; ++s) {
    while (in_sync(s) != replicas) absl::SleepFor(absl::Milliseconds(50));
  }

  client::ClientOptions options;
  options.servers = servers;
  options.retry.retry_deadline = absl::Seconds(60);
  options.retry.rpc_timeout = absl::Seconds(3);
  auto setup = client::Client::Connect(options);
  Check(setup.status(), "connecting");
  proto::TableConfig config;
  config.set_name("soak");
  config.set_dim(64);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.01f);
  auto table = (*setup)->CreateTable(config);
  Check(table.status(), "creating the table");
  // A first checkpoint, so that the serving replica has one to follow.
  client::Client::CheckpointOptions checkpoint;
  checkpoint.root = root;
  checkpoint.step = 1;
  Check((*setup)->Checkpoint(checkpoint).status(), "first checkpoint");
  auto serving = ServerProcess::Start(
      server, {"--role=serving", "--follow_checkpoints=" + root,
               "--checkpoint_poll=10s", "--log_level=warn"});
  Check(serving.status(), "starting the serving replica");

  Window window;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  const uint64_t keys = absl::GetFlag(FLAGS_keys);
  const int batch = absl::GetFlag(FLAGS_batch);
  for (int c = 0; c < 2; ++c) {
    clients.emplace_back([&, c] {
      auto client = client::Client::Connect(options);
      Check(client.status(), "connecting a client");
      std::mt19937_64 rng(c + 1);
      std::vector<uint64_t> batch_keys(batch);
      std::vector<float> values(static_cast<size_t>(batch) * 64);
      std::vector<float> grads(values.size(), 0.01f);
      while (!stop.load()) {
        for (uint64_t& k : batch_keys) k = rng() % keys;
        const absl::Time t0 = absl::Now();
        absl::Status status =
            (*client)->Pull(*table, batch_keys, absl::MakeSpan(values));
        const absl::Time t1 = absl::Now();
        if (status.ok()) status = (*client)->Push(*table, batch_keys, grads);
        const absl::Time t2 = absl::Now();
        std::lock_guard<std::mutex> lock(window.mu);
        if (!status.ok()) {
          ++window.errors;
          window.last_error = std::string(status.message());
          continue;
        }
        window.pull_us.push_back(absl::ToDoubleMicroseconds(t1 - t0));
        window.push_us.push_back(absl::ToDoubleMicroseconds(t2 - t1));
        window.keys += 2 * static_cast<uint64_t>(batch);
      }
    });
  }

  std::ofstream tsv(out + "/soak.tsv");
  tsv << "seconds\tkeys_per_s\tpull_p99_ms\tpush_p99_ms\terrors";
  tsv << "\tcoordinator\tserving";
  for (const Replica& r : training) {
    tsv << "\tshard" << r.shard << "_" << r.port;
  }
  tsv << "\n";
  std::mt19937_64 rng(7);
  const absl::Time begin = absl::Now();
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  absl::Time next_kill = begin + absl::GetFlag(FLAGS_kill_every) +
                         absl::GetFlag(FLAGS_kill_offset);
  absl::Time next_checkpoint = begin + absl::GetFlag(FLAGS_checkpoint_every);
  uint64_t step = 1, total_errors = 0;
  std::vector<double> kill_times;
  std::vector<std::string> events;
  std::string last_error;
  int checkpoints = 0, checkpoint_failures = 0;
  std::thread checkpointer;
  std::atomic<bool> checkpoint_running{false};
  while (absl::Now() - begin < duration) {
    absl::SleepFor(absl::Seconds(1));
    const double t = absl::ToDoubleSeconds(absl::Now() - begin);
    double keys_per_s, pull_p99, push_p99;
    uint64_t errors;
    {
      std::lock_guard<std::mutex> lock(window.mu);
      keys_per_s = static_cast<double>(window.keys);
      pull_p99 = P99(window.pull_us) / 1000;
      push_p99 = P99(window.push_us) / 1000;
      errors = window.errors;
      if (!window.last_error.empty()) last_error = window.last_error;
      window.pull_us.clear();
      window.push_us.clear();
      window.keys = 0;
      window.errors = 0;
      window.last_error.clear();
    }
    total_errors += errors;
    tsv << t << "\t" << keys_per_s << "\t" << pull_p99 << "\t" << push_p99
        << "\t" << errors << "\t" << RssKiB((*coordinator)->pid()) << "\t"
        << RssKiB((*serving)->pid());
    for (Replica& r : training) tsv << "\t" << RssKiB(r.process->pid());
    tsv << std::endl;
    // The supervisor: restart whatever exited.
    for (Replica& r : training) {
      int code = 0;
      if (r.process->Poll(&code)) {
        events.push_back(absl::StrCat("t=", static_cast<int>(t), "s: shard ",
                                      r.shard, " replica :", r.port, " exited ",
                                      code, ", restarted"));
        ++r.restarts;
        start(r);
      }
    }
    if (absl::Now() >= next_kill) {
      next_kill += absl::GetFlag(FLAGS_kill_every);
      Replica& victim = training[rng() % training.size()];
      events.push_back(absl::StrCat("t=", static_cast<int>(t),
                                    "s: SIGKILL shard ", victim.shard,
                                    " replica :", victim.port));
      kill_times.push_back(t);
      victim.process->Signal(SIGKILL);
    }
    if (absl::Now() >= next_checkpoint && !checkpoint_running.load()) {
      next_checkpoint += absl::GetFlag(FLAGS_checkpoint_every);
      if (checkpointer.joinable()) checkpointer.join();
      checkpoint_running = true;
      ++step;
      checkpointer = std::thread([&, step] {
        client::Client::CheckpointOptions incremental;
        incremental.root = root;
        incremental.step = step;
        incremental.incremental = true;
        if ((*setup)->Checkpoint(incremental).ok()) {
          ++checkpoints;
        } else {
          ++checkpoint_failures;
        }
        checkpoint_running = false;
      });
    }
  }
  stop = true;
  for (std::thread& c : clients) c.join();
  if (checkpointer.joinable()) checkpointer.join();

  // The summary, from the file just written.
  std::ifstream in(out + "/soak.tsv");
  std::string header;
  std::getline(in, header);
  std::vector<std::vector<double>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<double> row;
    size_t at = 0;
    while (at <= line.size()) {
      const size_t tab = std::min(line.find('\t', at), line.size());
      row.push_back(std::stod(line.substr(at, tab - at)));
      at = tab + 1;
    }
    rows.push_back(std::move(row));
  }
  const double warm = absl::ToDoubleSeconds(absl::GetFlag(FLAGS_warm_up));
  std::printf(
      "soak: %.0f s, %zu kills, %d incremental checkpoints (%d "
      "failed), %llu client errors%s%s\n",
      absl::ToDoubleSeconds(duration), kill_times.size(), checkpoints,
      checkpoint_failures, static_cast<unsigned long long>(total_errors),
      last_error.empty() ? "" : "; last: ", last_error.c_str());
  for (const std::string& e : events) std::printf("  %s\n", e.c_str());
  // Throughput before a kill: the mean of the minute before; back when a
  // second reaches 90% of it.
  for (double k : kill_times) {
    double sum = 0;
    int n = 0;
    for (const auto& row : rows) {
      if (row[0] >= k - 60 && row[0] < k) {
        sum += row[1];
        ++n;
      }
    }
    const double before = n > 0 ? sum / n : 0;
    // Back: from the first of 10 seconds in a row at >= 90% (a backup's
    // death makes the next seconds faster, and its catch-up slower).
    double back = -1;
    for (size_t i = 0; i + 10 <= rows.size(); ++i) {
      if (rows[i][0] <= k) continue;
      bool held = true;
      for (size_t j = i; j < i + 10; ++j) {
        held = held && rows[j][1] >= 0.9 * before;
      }
      if (held) {
        back = rows[i][0] - k;
        break;
      }
    }
    std::printf(
        "  kill at %.0f s: throughput before %.2f M keys/s, back to >= 90%% "
        "(for 10 s) after %.0f s\n",
        k, before / 1e6, back);
  }
  // RSS growth per process: the median of the five minutes after warm-up
  // against the median of the last five (five checkpoint cycles each: a
  // primary's RSS saws by ~7% between two checkpoints, which trim it, so
  // one-minute medians compare different phases of the saw). A restarted
  // replica's column is a new process from its restart on: noted.
  const double end = rows.empty() ? 0 : rows.back()[0];
  std::vector<std::string> names = {"coordinator", "serving"};
  for (const Replica& r : training) {
    names.push_back(absl::StrCat("shard ", r.shard, " :", r.port,
                                 r.restarts > 0 ? " (restarted)" : ""));
  }
  for (size_t p = 0; p < names.size(); ++p) {
    auto median_between = [&](double from, double to) {
      std::vector<double> v;
      for (const auto& row : rows) {
        if (row[0] >= from && row[0] < to) v.push_back(row[5 + p]);
      }
      if (v.empty()) return 0.0;
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    const double early = median_between(warm, warm + 300);
    const double late = median_between(end - 300, end + 1);
    std::printf("  RSS %-28s %8.0f MiB -> %8.0f MiB (%+.1f%%)\n",
                names[p].c_str(), early / 1024, late / 1024,
                early > 0 ? 100 * (late / early - 1) : 0.0);
  }
  std::ofstream gp(out + "/soak.gp");
  gp << "set terminal png size 1200,500 noenhanced\n"
        "set datafile separator '\\t'\n"
        "set key autotitle columnhead outside\nset xlabel 'seconds'\n"
        "set output '"
     << out << "/throughput.png'\nset ylabel 'keys/s (pull + push)'\n"
     << "plot '" << out << "/soak.tsv' using 1:2 with lines\n"
     << "set output '" << out << "/latency.png'\nset ylabel 'p99 ms'\n"
     << "plot '" << out
     << "/soak.tsv' using 1:3 with lines, '' using 1:4 "
        "with lines\n"
     << "set output '" << out << "/rss.png'\nset ylabel 'RSS KiB'\n"
     << "plot for [i=6:" << 5 + names.size() << "] '" << out
     << "/soak.tsv' using 1:i with lines\n";
  gp.close();
  std::printf("soak: %s/soak.tsv; plots: gnuplot %s/soak.gp\n", out.c_str(),
              out.c_str());
  for (int shard = 0; shard < shards; ++shard) {
    std::printf("  shard %d: %d of %d replicas in sync at the end\n", shard,
                in_sync(shard), replicas);
  }
  for (Replica& r : training) r.process->Stop();
  (*serving)->Stop();
  (*coordinator)->Stop();
  return 0;
}

}  // namespace
}  // namespace embedps::tools

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::tools::Run();
}
