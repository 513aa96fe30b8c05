// Client's private parts, shared by its two files: client.cc (connection,
// tables, Pull and Push) and control_plane.cc (checkpoints, Load, Publish,
// Erase, Stats). Not part of the client's interface.
#ifndef EMBEDPS_CLIENT_CLIENT_IMPL_H_
#define EMBEDPS_CLIENT_CLIENT_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "client/bulk_fan_out.h"
#include "client/client.h"
#include "client/retry.h"
#include "common/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/stats.grpc.pb.h"
#include "proto/training.grpc.pb.h"
#include "wire/server_identity.h"

namespace embedps::client {
namespace client_internal {

// A request's keys for one shard, as positions in the batch.
struct Part {
  int32_t shard;
  std::vector<uint32_t> rows;
  // Push to SYNC/SSP tables: nonzero on the shard's last part.
  uint32_t parts_in_step = 0;
};

// The batch positions of `keys`, by shard, in parts of at most `max_keys`.
std::vector<Part> SplitByShard(absl::Span<const uint64_t> keys, int32_t shards,
                               size_t max_keys);

// "/embedps.proto.TrainingService/<method>"
std::string MethodPath(absl::string_view method);

// Runs every part's work in parallel (the last on this thread) and returns
// the first error.
absl::Status RunParts(size_t count,
                      const std::function<absl::Status(size_t)>& work);

}  // namespace client_internal

struct Client::Impl {
  ClientOptions options;
  // One channel's stubs: the generated ones, and a generic one for the
  // bulk methods (Pull, Push), whose messages are built and read without
  // copies (wire/bulk_message.h).
  struct Stubs {
    std::unique_ptr<proto::TrainingService::Stub> training;
    std::unique_ptr<proto::StatsService::Stub> stats;
    std::unique_ptr<grpc::GenericStub> bulk;
  };
  // A shard's replicas (one unless replicated: "a|b" in
  // ClientOptions.servers), each with its channels; calls go to `current`,
  // and an UNAVAILABLE answer moves on to the next replica (the primary may
  // have changed).
  struct Route {
    std::vector<std::vector<Stubs>> replicas;  // [replica][channel]
    std::atomic<size_t> current{0};
  };
  std::vector<std::unique_ptr<Route>> routes;
  const std::string pull_path = client_internal::MethodPath("Pull");
  const std::string push_path = client_internal::MethodPath("Push");
  std::atomic<uint64_t> next_channel{0};

  // The shard's next channel, in turn, at its current replica.
  Stubs& Channel(size_t shard) {
    Route& route = *routes[shard];
    auto& channels =
        route.replicas[route.current.load(std::memory_order_relaxed) %
                       route.replicas.size()];
    if (channels.size() == 1) return channels[0];
    return channels[next_channel.fetch_add(1, std::memory_order_relaxed) %
                    channels.size()];
  }
  // For a fan-out's retries.
  BulkFanOut::Reroute Reroute() {
    return [this](int32_t shard, grpc::GenericStub* stub) {
      const bool other_replica = Unavailable(shard, stub);
      return BulkFanOut::NextStub{Channel(shard).bulk.get(), other_replica};
    };
  }
  // `stub` answered UNAVAILABLE (or not within the attempt's deadline): if
  // it is the shard's current replica, the next one is tried from now on.
  // True if the shard has several replicas (the next attempt goes to
  // another one than `stub`'s).
  template <typename StubType>
  bool Unavailable(size_t shard, const StubType* stub) {
    Route& route = *routes[shard];
    if (route.replicas.size() < 2) return false;
    size_t current = route.current.load();
    for (const Stubs& s : route.replicas[current % route.replicas.size()]) {
      if (static_cast<const void*>(&s) == stub ||
          static_cast<const void*>(s.bulk.get()) == stub) {
        route.current.compare_exchange_strong(current, current + 1);
        return true;
      }
    }
    return true;  // another call moved the shard on already
  }
  uint64_t client_id = 0;
  std::atomic<uint64_t> next_sequence{1};

  // The Pulls and Pushes in flight (asynchronous ones may outlive the
  // call that started them), so that the client's destruction cancels
  // them and waits for them: their retry alarms and callbacks use the
  // channels it destroys.
  uint64_t Track(std::weak_ptr<BulkFanOut> fan_out) {
    MutexLock lock(&fan_outs_mu);
    const uint64_t id = next_fan_out++;
    fan_outs.emplace(id, std::move(fan_out));
    return id;
  }
  // The last thing a fan-out's `done` does with the client.
  void Untrack(uint64_t id) {
    MutexLock lock(&fan_outs_mu);
    fan_outs.erase(id);
    if (fan_outs.empty()) fan_outs_ended.SignalAll();
  }
  void CancelAndWaitForFanOuts() {
    std::vector<std::shared_ptr<BulkFanOut>> live;
    {
      MutexLock lock(&fan_outs_mu);
      for (const auto& [id, weak] : fan_outs) {
        if (std::shared_ptr<BulkFanOut> f = weak.lock()) live.push_back(f);
      }
    }
    for (const auto& f : live) f->Cancel();
    live.clear();
    MutexLock lock(&fan_outs_mu);
    fan_outs_ended.Wait(&fan_outs_mu, [&] { return fan_outs.empty(); });
  }
  Mutex fan_outs_mu;
  CondVar fan_outs_ended;
  absl::flat_hash_map<uint64_t, std::weak_ptr<BulkFanOut>> fan_outs
      ABSL_GUARDED_BY(fan_outs_mu);
  uint64_t next_fan_out ABSL_GUARDED_BY(fan_outs_mu) = 0;

  // OK once every shard has stated an identity that matches its position
  // (identity_check.h); asked of the shards once, before the first call
  // that reads or changes tables. The check's error otherwise (or the
  // shards' after retries), and it is asked again on the next call.
  absl::Status CheckServers();
  std::atomic<bool> servers_checked{false};
  Mutex check_mu;
  // Per shard: the incarnation of the server process that answered first
  // (0: none yet).
  std::unique_ptr<std::atomic<uint64_t>[]> incarnations;

  // OK if the server that answered `context` is the process this client
  // has been talking to (or the first); ABORTED naming it otherwise.
  absl::Status CheckIncarnation(int32_t shard,
                                const grpc::ClientContext& context) {
    // The trailing metadata: every answer has it, also an error sent as
    // trailers only (initial metadata may not have been received then).
    std::string value, restored;
    const auto& metadata = context.GetServerTrailingMetadata();
    if (auto it = metadata.find(wire::kIncarnationMetadata);
        it != metadata.end()) {
      value.assign(it->second.data(), it->second.size());
    }
    if (auto it = metadata.find(wire::kRestoredStepMetadata);
        it != metadata.end()) {
      restored.assign(it->second.data(), it->second.size());
    }
    uint64_t incarnation = 0;
    if (value.empty() || !absl::SimpleHexAtoi(value, &incarnation) ||
        incarnation == 0) {
      return absl::OkStatus();  // a server that does not say
    }
    uint64_t known = 0;
    std::atomic<uint64_t>& slot = incarnations[shard];
    if (slot.compare_exchange_strong(known, incarnation) ||
        known == incarnation) {
      return absl::OkStatus();
    }
    if (options.accept_restarted_shards) {
      slot.store(incarnation);
      return absl::OkStatus();
    }
    return absl::AbortedError(absl::StrCat(
        "shard ", shard, " (", options.servers[shard],
        ") is a new server process since this client's first call to it: "
        "it was restarted",
        restored.empty()
            ? " empty"
            : absl::StrCat(" from a checkpoint of step ", restored),
        ", so the updates it had applied since are gone and training on it "
        "would silently mix steps. Stop the job and restart it, with every "
        "shard, from its last complete checkpoint (ps_worker --restore=ROOT; "
        "docs/operations.md)"));
  }

  // Calls `rpc(stubs, context)` (the shard's stubs for the attempt) until
  // it succeeds, fails with a non-retryable code, or the retry deadline
  // passes.
  // `extra_time`: how long the server may legitimately hold the call
  // (a SYNC Pull waiting for other workers).
  template <typename Rpc>
  absl::Status Call(int32_t shard, absl::string_view method, Rpc&& rpc,
                    absl::Duration extra_time = absl::ZeroDuration()) {
    RetrySchedule schedule(options.retry, extra_time);
    while (true) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(schedule.StartAttempt()));
      // The attempt's stub: the one the call goes to is the one a failure
      // is reported against.
      Stubs* const stub = &Channel(shard);
      const grpc::Status status = rpc(*stub, &context);
      if (status.ok()) return absl::OkStatus();
      const bool other_replica =
          (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
           status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) &&
          Unavailable(shard, stub);
      const std::optional<absl::Duration> backoff =
          schedule.BackoffAfter(status, absl::Now(), other_replica);
      if (!backoff.has_value()) {
        return CallFailed(method, shard, options.servers[shard],
                          schedule.attempts(), status);
      }
      absl::SleepFor(*backoff);
    }
  }
};

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_CLIENT_IMPL_H_
