// Predictor: click probabilities for raw feature lines, from the serving
// replicas' embeddings and the dense model of the same training step.
//
// Lines: label-less Criteo lines (13 integer, 26 categorical fields), or,
// for a job trained on a FeatureSchema, lines of the training files'
// layout without the label field. The schema is resolved as the training
// resolved it, from what the dense model records (its input layout: the
// header row and the STANDARDIZE statistics, worker/input_layout.h), so
// no training file is needed; for a model that records none, a header
// row or STANDARDIZE statistics are read from the config's train_files
// (a schema by position without STANDARDIZE needs no file).
//
// The dense model comes from the replicas too (ServingService.DenseModel:
// training publishes it with shard 0's publications and writes it with
// every checkpoint). A refresh thread checks the version served and loads
// a newer dense model when there is one; a prediction then reads every
// slot's rows at exactly that model's step (LookupRequest.version), so
// embeddings and dense weights never come from different steps. The
// forward pass is the model's own (dense/model.h), on the CPU.
//
// Thread safety: thread-safe; predictions run in parallel, each on its own
// instance of the loaded model.
#ifndef EMBEDPS_WORKER_PREDICTOR_H_
#define EMBEDPS_WORKER_PREDICTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/serving_client.h"
#include "common/mutex.h"
#include "config/worker_config.pb.h"
#include "data/feature_schema.h"
#include "dense/model.h"
#include "proto/serving.grpc.pb.h"

namespace embedps::worker {

struct PredictorOptions {
  // The training job's config: its tables, slots and model. Required.
  config::WorkerConfig config;
  // The serving replicas (every serving shard). Required.
  client::ServingClientOptions serving;
  // How often the version served is checked for a newer dense model.
  // Default: 200 ms.
  absl::Duration refresh = absl::Milliseconds(200);
  // How long Start waits for a first dense model. Default: 60 s.
  absl::Duration start_wait = absl::Seconds(60);
};

class Predictor {
 public:
  // Connects and loads the dense model of the version served.
  // DEADLINE_EXCEEDED if none came within start_wait; the config's error
  // (INVALID_ARGUMENT) for a config that cannot work.
  static absl::StatusOr<std::unique_ptr<Predictor>> Start(
      PredictorOptions options);
  ~Predictor();

  // Probabilities of label-less lines (the layout above); none for none.
  // INVALID_ARGUMENT naming the first malformed line (nothing is looked
  // up). *version: the training step used.
  absl::StatusOr<std::vector<float>> PredictLines(
      absl::Span<const std::string> lines, uint64_t* version);

  // Probabilities of a parsed batch (labels ignored): every table's
  // distinct keys looked up once, at the dense model's step.
  absl::StatusOr<std::vector<float>> Predict(const data::SchemaBatch& batch,
                                             uint64_t* version);

  // The step of the dense model loaded.
  uint64_t step() const;

 private:
  // A dense model of one step, as instances (a forward pass uses one
  // alone: the CPU model's buffers are per instance); as many are made as
  // predictions run at once.
  struct Loaded {
    uint64_t step = 0;
    std::string parameters;  // the serialized model
    // The label-less lines' schema (a schema job's), as this model
    // records it; null for Criteo's layout.
    std::shared_ptr<const data::FeatureSchema> schema;
    Mutex mu;
    std::vector<std::unique_ptr<dense::Model>> idle ABSL_GUARDED_BY(mu);
  };
  explicit Predictor(PredictorOptions options);
  // Loads the dense model of the version served, if newer than the one
  // held. Errors: the replicas'.
  absl::Status Refresh();
  absl::StatusOr<std::unique_ptr<dense::Model>> NewInstance(
      const Loaded& loaded) const;
  // The label-less schema of a schema job for `parameters`' model.
  absl::StatusOr<std::shared_ptr<const data::FeatureSchema>> SchemaFor(
      const std::string& parameters);
  absl::StatusOr<std::vector<float>> PredictWith(Loaded& loaded,
                                                 const data::SchemaBatch& batch,
                                                 uint64_t* version);
  void RefreshLoop();
  std::shared_ptr<Loaded> Model() const;

  const PredictorOptions options_;
  dense::ModelSpec spec_;
  // A schema job's label-less schema resolved from its training files,
  // once a model that records no input layout needs it (Refresh's alone:
  // Start's thread, then the refresher's).
  std::shared_ptr<const data::FeatureSchema> files_schema_;
  std::vector<std::string> tables_;  // the slots' tables, each once
  std::vector<int> slot_table_;      // by slot: its index in tables_
  std::unique_ptr<client::ServingClient> client_;
  // Serving shard 0's replicas, asked for the dense model.
  std::vector<std::unique_ptr<proto::ServingService::Stub>> dense_sources_;

  mutable Mutex mu_;
  std::shared_ptr<Loaded> loaded_ ABSL_GUARDED_BY(mu_);

  std::atomic<bool> stopping_{false};
  Mutex stop_mu_;
  CondVar stop_cv_;
  std::thread refresher_;
};

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_PREDICTOR_H_
