#include "worker/predictor.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "config/dlrm_config.h"
#include "data/criteo_reader.h"
#include "dense/dense_model.pb.h"
#include "grpcpp/grpcpp.h"
#include "proto/serving.grpc.pb.h"
#include "security/credentials.h"
#include "wire/grpc_status.h"
#include "worker/input_layout.h"
#include "worker/job_data.h"
#include "worker/key_dedup.h"

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

// The schema of a schema job whose model records no input layout,
// resolved from its training files as its training did
// (JobData::PrepareSchema reads them only for a header row or
// STANDARDIZE statistics), for lines without the label.
// REQUIRES: config.has_schema().
absl::StatusOr<data::FeatureSchema> UnlabelledSchemaFromFiles(
    const config::WorkerConfig& config) {
  absl::StatusOr<std::optional<data::FeatureSchema>> schema =
      JobData::PrepareSchema(config);
  if (!schema.ok()) {
    return absl::Status(
        schema.status().code(),
        absl::StrCat(schema.status().message(),
                     " (the dense model records no input layout: a schema "
                     "with a header row or STANDARDIZE columns is read from "
                     "the training files, --train_data or the config's "
                     "train_files, as the training did)"));
  }
  return data::WithoutLabel(**std::move(schema));
}

}  // namespace

Predictor::Predictor(PredictorOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Start(
    PredictorOptions options) {
  RETURN_IF_ERROR(config::ValidateWorkerConfig(options.config));
  std::unique_ptr<Predictor> predictor(new Predictor(std::move(options)));
  const config::WorkerConfig& config = predictor->options_.config;
  predictor->spec_ = config::ModelSpecOf(config);
  for (const std::string& table : config::SlotTables(config)) {
    auto it =
        std::find(predictor->tables_.begin(), predictor->tables_.end(), table);
    predictor->slot_table_.push_back(
        static_cast<int>(it - predictor->tables_.begin()));
    if (it == predictor->tables_.end()) predictor->tables_.push_back(table);
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
  if (options_.config.has_schema()) {
    ASSIGN_OR_RETURN(loaded->schema, SchemaFor(loaded->parameters));
  }
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

absl::StatusOr<std::shared_ptr<const data::FeatureSchema>> Predictor::SchemaFor(
    const std::string& parameters) {
  const std::string name = "the dense model";
  ASSIGN_OR_RETURN(const dense::InputLayout layout,
                   dense::ReadInputLayout(parameters, name));
  absl::StatusOr<std::optional<data::FeatureSchema>> recorded = SchemaOfModel(
      config::FeatureSchemaSpecOf(options_.config.schema()), layout);
  if (!recorded.ok()) {
    return absl::Status(recorded.status().code(),
                        absl::StrCat("the dense model's input layout: ",
                                     recorded.status().message()));
  }
  if (recorded->has_value()) {
    return std::make_shared<const data::FeatureSchema>(
        data::WithoutLabel(**std::move(recorded)));
  }
  if (files_schema_ == nullptr) {
    ASSIGN_OR_RETURN(data::FeatureSchema schema,
                     UnlabelledSchemaFromFiles(options_.config));
    files_schema_ =
        std::make_shared<const data::FeatureSchema>(std::move(schema));
  }
  return files_schema_;
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
  // One model for the parse and the forward pass: its schema is the one
  // it was trained with.
  const std::shared_ptr<Loaded> loaded = Model();
  if (loaded->schema != nullptr) {
    data::SchemaBatch batch;
    batch.Reset(*loaded->schema);
    for (size_t i = 0; i < lines.size(); ++i) {
      absl::Status parsed =
          data::ParseSchemaLine(*loaded->schema, lines[i], &batch);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", i, ": ", parsed.message()));
      }
    }
    return PredictWith(*loaded, batch, version);
  }
  data::CriteoBatch criteo;
  criteo.size = static_cast<int>(lines.size());
  criteo.labels.assign(lines.size(), 0.0f);
  criteo.dense.resize(lines.size() * data::kCriteoDense);
  criteo.keys.resize(lines.size() * data::kCriteoSlots);
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::Status parsed = data::ParseCriteoFeatures(
        lines[i].data(), lines[i].size(), &criteo, static_cast<int>(i));
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", i, ": ", parsed.message()));
    }
  }
  return PredictWith(*loaded, BagsOf(criteo), version);
}

absl::StatusOr<std::vector<float>> Predictor::Predict(
    const data::SchemaBatch& batch, uint64_t* version) {
  return PredictWith(*Model(), batch, version);
}

absl::StatusOr<std::vector<float>> Predictor::PredictWith(
    Loaded& loaded, const data::SchemaBatch& batch, uint64_t* version) {
  const int n = batch.size;
  if (version != nullptr) *version = loaded.step;
  if (n == 0) return std::vector<float>();
  const size_t slots = slot_table_.size();
  if (batch.slots.size() != slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the batch has ", batch.slots.size(), " slots; the model ", slots));
  }
  // Every table's distinct keys, read once at the dense model's step.
  std::vector<absl::Span<const uint64_t>> slot_keys;
  for (const data::SchemaBatch::Bags& bags : batch.slots) {
    slot_keys.push_back(bags.keys);
  }
  KeyDeduplicator dedup(slot_table_, static_cast<int>(tables_.size()),
                        /*threads=*/1);
  std::vector<std::vector<uint64_t>> unique;
  std::vector<std::vector<int32_t>> index;
  dedup.Run(slot_keys, unique, index);
  const int32_t dim = spec_.embedding_dim;
  std::vector<client::ServingSlot> lookups;
  std::vector<size_t> looked_up;  // tables with keys, in lookups' order
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (unique[t].empty()) continue;
    lookups.push_back({tables_[t], dim, unique[t], {}, proto::POOLING_NONE});
    looked_up.push_back(t);
  }
  std::vector<std::vector<float>> found;
  if (!lookups.empty()) {
    RETURN_IF_ERROR(client_->Lookup(lookups, &found, loaded.step));
  }
  std::vector<std::vector<float>> rows(tables_.size());
  for (size_t i = 0; i < looked_up.size(); ++i) {
    rows[looked_up[i]] = std::move(found[i]);
  }
  dense::UniqueRowsBatch model_batch;
  model_batch.size = n;
  model_batch.dense = batch.dense;
  model_batch.labels = batch.labels;
  for (const std::vector<float>& table : rows)
    model_batch.tables.push_back(table);
  for (size_t s = 0; s < slots; ++s) {
    model_batch.slots.push_back({slot_table_[s], index[s],
                                 batch.slots[s].offsets,
                                 batch.slots[s].weights});
  }
  std::vector<float> logits(n);
  std::unique_ptr<dense::Model> model;  // an idle instance, or a new one
  {
    MutexLock lock(&loaded.mu);
    if (!loaded.idle.empty()) {
      model = std::move(loaded.idle.back());
      loaded.idle.pop_back();
    }
  }
  if (model == nullptr) {
    ASSIGN_OR_RETURN(model, NewInstance(loaded));
  }
  const absl::Status predicted =
      model->PredictOnUniqueRows(model_batch, absl::MakeSpan(logits));
  {
    MutexLock lock(&loaded.mu);
    loaded.idle.push_back(std::move(model));
  }
  RETURN_IF_ERROR(predicted);
  for (float& z : logits) z = 1.0f / (1.0f + std::exp(-z));
  if (version != nullptr) *version = loaded.step;
  return logits;
}

}  // namespace embedps::worker
