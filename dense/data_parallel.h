// DataParallelTrainer: one rank of a synchronous data-parallel job over a
// dense Model — each rank trains on its own share of the global batch, the
// gradients are averaged across ranks with one AllReduce of the flat
// gradient buffer, and every rank applies the same optimizer step, so all
// ranks hold the same parameters after every step.
//
// With equal shares, N ranks × batch B compute the same update as one rank
// × batch N·B (up to the order of float additions).
//
// Thread safety: one thread at a time; the borrowed objects must outlive
// the trainer and not be used by others meanwhile.
#ifndef EMBEDPS_DENSE_DATA_PARALLEL_H_
#define EMBEDPS_DENSE_DATA_PARALLEL_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "dense/collective/communicator.h"
#include "dense/dense_optimizer.h"
#include "dense/model.h"

namespace embedps::dense {

class DataParallelTrainer {
 public:
  // Broadcasts rank 0's parameters to every rank, so that ranks start equal
  // even from different seeds. FAILED_PRECONDITION if the communicator's
  // buffers live elsewhere than the model's (CPU model with NCCL, CUDA
  // model with Gloo); a collective's error (naming the rank) otherwise.
  static absl::StatusOr<std::unique_ptr<DataParallelTrainer>> Create(
      Model* model, Communicator* communicator, DenseOptimizer* optimizer);

  // Forward/backward on this rank's share, AllReduce(mean) of the
  // gradients, one optimizer step. Returns this rank's mean loss.
  // `row_gradients` as in Model::TrainStep (the slot embeddings' gradients
  // stay per rank: the parameter servers reduce those). `row_gradients_ready`,
  // when given, is called once they are written (Model::TrainStep: on the
  // CPU before the bottom MLP's backward pass), always before the AllReduce
  // and the optimizer step (a worker starts its Pushes there, so that the
  // servers apply them while the dense half finishes). On a collective
  // error the step is not applied on this rank (the callback has run).
  absl::StatusOr<float> Step(
      const Batch<float>& batch,
      absl::Span<const absl::Span<float>> row_gradients,
      const std::function<void()>& row_gradients_ready = nullptr);

  // Step on a batch of unique rows (Model::TrainStepOnUniqueRows): the
  // same, with `ready` called once `table_gradients` are final. With
  // `stages_on_host`, the model's step runs with the host's stages
  // (TrainStepWithHostStages) whatever its backend.
  absl::StatusOr<float> StepOnUniqueRows(
      const UniqueRowsBatch& batch, float gradient_scale,
      absl::Span<const absl::Span<float>> table_gradients,
      const std::function<void()>& ready = nullptr,
      bool stages_on_host = false);

  int64_t steps() const { return optimizer_->steps(); }

 private:
  // The AllReduce and optimizer step after a model's step.
  absl::StatusOr<float> Finish(absl::StatusOr<float> loss);

  DataParallelTrainer(Model* model, Communicator* communicator,
                      DenseOptimizer* optimizer)
      : model_(model), communicator_(communicator), optimizer_(optimizer) {}

  Model* const model_;
  Communicator* const communicator_;
  DenseOptimizer* const optimizer_;
  HostStageBuffers host_stages_;  // stages_on_host
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_DATA_PARALLEL_H_
