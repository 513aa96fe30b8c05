#include "dense/collective/gloo_communicator.h"

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace embedps::dense {
namespace {

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Gloo's store interface over ours. Gloo reports store failures by
// exception, so this adapter throws; every call into Gloo below catches.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(dense::Store* store, std::string prefix, absl::Duration timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_->Set(prefix_ + key, std::string(data.begin(), data.end())));
  }

  std::vector<char> get(const std::string& key) override {
    wait({key}, ToMillis(timeout_));
    absl::StatusOr<std::string> value = store_->Get(prefix_ + key);
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, ToMillis(timeout_));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
    Check(store_->Wait(prefixed, absl::FromChrono(timeout)));
  }

 private:
  static void Check(const absl::Status& status) {
    if (!status.ok()) throw gloo::IoException(std::string(status.ToString()));
  }

  dense::Store* const store_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

// Status for an exception from Gloo: timeouts and I/O errors mean a peer
// is slow, gone or unreachable.
absl::Status FromGloo(const std::exception& e, int rank,
                      absl::string_view operation) {
  const std::string what = e.what();
  const std::string message =
      absl::StrCat("Gloo ", operation, " on rank ", rank, " failed: ", what);
  if (what.find("DEADLINE_EXCEEDED") != std::string::npos ||
      what.find("Timed out") != std::string::npos ||
      what.find("timed out") != std::string::npos) {
    return absl::DeadlineExceededError(message);
  }
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& options,
                   std::shared_ptr<gloo::rendezvous::Context> context)
      : options_(options), context_(std::move(context)) {}

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  bool buffers_on_device() const override { return false; }

  absl::Status AllReduce(absl::Span<float> buffer, ReduceOp op) override {
    if (buffer.empty()) return absl::OkStatus();
    try {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(buffer.data(), buffer.size());
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(
              &gloo::sum<float>));
      opts.setTag(next_tag_++);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::allreduce(opts);
    } catch (const std::exception& e) {
      return FromGloo(e, options_.rank, "AllReduce");
    }
    if (op == ReduceOp::kMean) {
      const float inverse = 1.0f / static_cast<float>(options_.world_size);
      for (float& x : buffer) x *= inverse;
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(absl::Span<float> buffer, int root) override {
    if (absl::Status s = CheckBroadcastRoot(root, options_.world_size);
        !s.ok()) {
      return s;
    }
    if (buffer.empty()) return absl::OkStatus();
    try {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(buffer.data(), buffer.size());
      opts.setRoot(root);
      opts.setTag(next_tag_++);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::broadcast(opts);
    } catch (const std::exception& e) {
      return FromGloo(e, options_.rank, "Broadcast");
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(absl::Span<const float> input,
                         absl::Span<float> output) override {
    if (absl::Status s = CheckAllGatherSizes(input.size(), output.size(),
                                             options_.world_size);
        !s.ok()) {
      return s;
    }
    if (input.empty()) return absl::OkStatus();
    try {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<float*>(input.data()), input.size());
      opts.setOutput(output.data(), output.size());
      opts.setTag(next_tag_++);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::allgather(opts);
    } catch (const std::exception& e) {
      return FromGloo(e, options_.rank, "AllGather");
    }
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    try {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag_++);
      opts.setTimeout(ToMillis(options_.timeout));
      gloo::barrier(opts);
    } catch (const std::exception& e) {
      return FromGloo(e, options_.rank, "Barrier");
    }
    return absl::OkStatus();
  }

 private:
  const GlooOptions options_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  // Every rank issues the same collectives in the same order, so a counter
  // gives matching tags.
  uint32_t next_tag_ = 1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const GlooOptions& options, Store* store) {
  if (absl::Status s = CheckRank(options.rank, options.world_size); !s.ok()) {
    return s;
  }
  if (store == nullptr)
    return absl::InvalidArgumentError("no rendezvous store");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(
        options.rank, options.world_size);
    context->setTimeout(ToMillis(options.timeout));
    GlooStore gloo_store(store, options.store_prefix + "/", options.timeout);
    context->connectFullMesh(gloo_store, device);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(options, std::move(context)));
  } catch (const std::exception& e) {
    return FromGloo(e, options.rank, "rendezvous");
  }
}

}  // namespace embedps::dense
