#include "worker/predictor.h"

#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "config/dlrm_config.h"
#include "grpcpp/grpcpp.h"
#include "proto/serving.grpc.pb.h"
#include "security/credentials.h"
#include "wire/grpc_status.h"

namespace embedps::worker {
namespace {

// The dense model serving shard 0 holds now, if newer than `held` (none
// held: any; nullopt: not newer). Its replicas are asked in turn until one
// answers; the model's bytes travel only when they are newer.
absl::StatusOr<std::optional<proto::DenseModelResponse>> FetchNewerDense(
    absl::Span<const std::unique_ptr<proto::ServingService::Stub>> replicas,
    absl::Span<const std::string> addresses, std::optional<uint64_t> held) {
  absl::Status last = absl::UnavailableError("no replica of serving shard 0");
  for (size_t r = 0; r < replicas.size(); ++r) {
    const auto failed = [&](const grpc::Status& status) {
      return wire::FromGrpcStatus(status, addresses[r]);
    };
    grpc::ClientContext ask;
    ask.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    proto::ServingVersionResponse version;
    grpc::Status status =
        replicas[r]->Version(&ask, proto::ServingVersionRequest(), &version);
    if (!status.ok()) {
      last = failed(status);
      continue;
    }
    if (!version.has_dense_model()) {
      return absl::FailedPreconditionError(absl::StrCat(
          addresses[r], ": version ", version.step(),
          " has no dense model (training publishes it with shard 0's "
          "publications and checkpoints)"));
    }
    if (held.has_value() && version.dense_step() <= *held) return std::nullopt;
    grpc::ClientContext fetch;
    fetch.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    proto::DenseModelResponse dense;
    status =
        replicas[r]->DenseModel(&fetch, proto::DenseModelRequest(), &dense);
    if (status.ok()) return dense;
    last = failed(status);
  }
  return last;
}

}  // namespace

Predictor::Predictor(PredictorOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Start(
    PredictorOptions options) {
  RETURN_IF_ERROR(config::ValidateWorkerConfig(options.config));
  if (options.config.has_schema()) {
    return absl::UnimplementedError(
        "the predictor reads requests in Criteo's layout; a model trained on "
        "a schema's columns is not served by it (look its rows up with a "
        "ServingClient and run the dense model yourself)");
  }
  std::unique_ptr<Predictor> predictor(new Predictor(std::move(options)));
  const config::WorkerConfig& config = predictor->options_.config;
  predictor->spec_ = config::ModelSpecOf(config);
  for (const config::SlotConfig& slot : config.slot()) {
    predictor->slot_table_.push_back(slot.table());
  }
  ASSIGN_OR_RETURN(predictor->client_,
                   client::ServingClient::Connect(predictor->options_.serving));
  const security::ChannelSecurity& security =
      predictor->options_.serving.security;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   security::MakeChannelCredentials(security));
  grpc::ChannelArguments args;
  security::AddChannelArguments(security, &args);
  for (const std::string& address : predictor->options_.serving.replicas[0]) {
    predictor->dense_sources_.push_back(proto::ServingService::NewStub(
        grpc::CreateCustomChannel(address, credentials, args)));
  }
  const absl::Time deadline = absl::Now() + predictor->options_.start_wait;
  absl::Status loaded = predictor->Refresh();
  while (!loaded.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    loaded = predictor->Refresh();
  }
  if (!loaded.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("no dense model from the serving replicas within ",
                     absl::FormatDuration(predictor->options_.start_wait), ": ",
                     loaded.message()));
  }
  predictor->refresher_ =
      std::thread([p = predictor.get()] { p->RefreshLoop(); });
  return predictor;
}

Predictor::~Predictor() {
  stopping_ = true;
  {
    MutexLock lock(&stop_mu_);
    stop_cv_.SignalAll();
  }
  if (refresher_.joinable()) refresher_.join();
}

std::shared_ptr<Predictor::Loaded> Predictor::Model() const {
  MutexLock lock(&mu_);
  return loaded_;
}

uint64_t Predictor::step() const {
  const std::shared_ptr<Loaded> loaded = Model();
  return loaded == nullptr ? 0 : loaded->step;
}

absl::Status Predictor::Refresh() {
  const std::shared_ptr<Loaded> held = Model();
  ASSIGN_OR_RETURN(
      std::optional<proto::DenseModelResponse> newer,
      FetchNewerDense(dense_sources_, options_.serving.replicas[0],
                      held == nullptr ? std::nullopt
                                      : std::optional<uint64_t>(held->step)));
  if (!newer.has_value()) return absl::OkStatus();
  const proto::DenseModelResponse& dense = *newer;
  auto loaded = std::make_shared<Loaded>();
  loaded->step = dense.step();
  loaded->parameters = dense.dense_parameters();
  // One instance now: a model that does not load is refused here.
  ASSIGN_OR_RETURN(std::unique_ptr<dense::Model> first, NewInstance(*loaded));
  loaded->idle.push_back(std::move(first));
  MutexLock lock(&mu_);
  loaded_ = std::move(loaded);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<dense::Model>> Predictor::NewInstance(
    const Loaded& loaded) const {
  ASSIGN_OR_RETURN(std::unique_ptr<dense::Model> model,
                   dense::CreateModel(spec_, {}));
  RETURN_IF_ERROR(dense::LoadParametersFromBytes(
                      loaded.parameters,
                      absl::StrCat("the dense model of step ", loaded.step),
                      *model)
                      .status());
  return model;
}

void Predictor::RefreshLoop() {
  std::string last_warning;  // said once until it changes
  while (!stopping_) {
    {
      MutexLock lock(&stop_mu_);
      stop_cv_.WaitWithTimeout(&stop_mu_, options_.refresh);
    }
    if (stopping_) break;
    const absl::Status s = Refresh();
    std::string warning = s.ok()
                              ? ""
                              : absl::StrCat("keeping the dense model of step ",
                                             step(), ": ", s.message());
    if (!warning.empty() && warning != last_warning) {
      Logger("predictor")->warn("{}", warning);
    }
    last_warning = std::move(warning);
  }
}

absl::StatusOr<std::vector<float>> Predictor::PredictLines(
    absl::Span<const std::string> lines, uint64_t* version) {
  data::CriteoBatch batch;
  batch.size = static_cast<int>(lines.size());
  batch.labels.assign(lines.size(), 0.0f);
  batch.dense.resize(lines.size() * data::kCriteoDense);
  batch.keys.resize(lines.size() * data::kCriteoSlots);
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::Status parsed = data::ParseCriteoFeatures(
        lines[i].data(), lines[i].size(), &batch, static_cast<int>(i));
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", i, ": ", parsed.message()));
    }
  }
  return Predict(batch, version);
}

absl::StatusOr<std::vector<float>> Predictor::Predict(
    const data::CriteoBatch& batch, uint64_t* version) {
  const std::shared_ptr<Loaded> loaded = Model();
  const int n = batch.size;
  if (version != nullptr) *version = loaded->step;
  if (n == 0) return std::vector<float>();
  const int slots = static_cast<int>(slot_table_.size());
  const int32_t dim = spec_.embedding_dim;
  // Each slot's keys, one a bag, read at the dense model's step.
  std::vector<std::vector<uint64_t>> keys(slots, std::vector<uint64_t>(n));
  for (int i = 0; i < n; ++i) {
    for (int s = 0; s < slots; ++s) {
      keys[s][i] = batch.keys[static_cast<size_t>(i) * data::kCriteoSlots + s];
    }
  }
  std::vector<client::ServingSlot> lookups(slots);
  for (int s = 0; s < slots; ++s) {
    lookups[s] = {slot_table_[s], dim, keys[s], {}, proto::POOLING_NONE};
  }
  std::vector<std::vector<float>> rows;
  RETURN_IF_ERROR(client_->Lookup(lookups, &rows, loaded->step));
  std::vector<int32_t> offsets(n + 1);
  for (int i = 0; i <= n; ++i) offsets[i] = i;
  dense::Batch<float> model_batch;
  model_batch.size = n;
  model_batch.dense = batch.dense;
  model_batch.labels = batch.labels;
  for (int s = 0; s < slots; ++s)
    model_batch.slots.push_back({rows[s], offsets});
  std::vector<float> logits(n);
  std::unique_ptr<dense::Model> model;  // an idle instance, or a new one
  {
    MutexLock lock(&loaded->mu);
    if (!loaded->idle.empty()) {
      model = std::move(loaded->idle.back());
      loaded->idle.pop_back();
    }
  }
  if (model == nullptr) {
    ASSIGN_OR_RETURN(model, NewInstance(*loaded));
  }
  const absl::Status predicted =
      model->Predict(model_batch, absl::MakeSpan(logits));
  {
    MutexLock lock(&loaded->mu);
    loaded->idle.push_back(std::move(model));
  }
  RETURN_IF_ERROR(predicted);
  for (float& z : logits) z = 1.0f / (1.0f + std::exp(-z));
  if (version != nullptr) *version = loaded->step;
  return logits;
}

}  // namespace embedps::worker
