#include "dense/data_parallel.h"

#include "absl/strings/str_cat.h"

namespace embedps::dense {

absl::StatusOr<std::unique_ptr<DataParallelTrainer>>
DataParallelTrainer::Create(Model* model, Communicator* communicator,
                            DenseOptimizer* optimizer) {
  const bool model_on_device = model->backend() == Backend::kCuda;
  if (model_on_device != communicator->buffers_on_device()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model runs on ", BackendName(model->backend()),
        " but the communicator reduces ",
        communicator->buffers_on_device() ? "CUDA device" : "host",
        " buffers: use Gloo with --device=cpu and NCCL with --device=cuda"));
  }
  if (absl::Status s =
          communicator->Broadcast(model->parameter_buffer(), /*root=*/0);
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<DataParallelTrainer>(
      new DataParallelTrainer(model, communicator, optimizer));
}

absl::StatusOr<float> DataParallelTrainer::Step(
    const Batch<float>& batch,
    absl::Span<const absl::Span<float>> row_gradients,
    const std::function<void()>& row_gradients_ready) {
  return Finish(model_->TrainStep(batch, row_gradients, row_gradients_ready));
}

absl::StatusOr<float> DataParallelTrainer::StepOnUniqueRows(
    const UniqueRowsBatch& batch, float gradient_scale,
    absl::Span<const absl::Span<float>> table_gradients,
    const std::function<void()>& ready, bool stages_on_host) {
  return Finish(stages_on_host
                    ? TrainStepWithHostStages(*model_, host_stages_, batch,
                                              gradient_scale, table_gradients,
                                              ready)
                    : model_->TrainStepOnUniqueRows(batch, gradient_scale,
                                                    table_gradients, ready));
}

absl::StatusOr<float> DataParallelTrainer::Finish(absl::StatusOr<float> loss) {
  if (!loss.ok()) return loss.status();
  if (communicator_->world_size() > 1) {
    if (absl::Status s = communicator_->AllReduce(model_->gradient_buffer(),
                                                  ReduceOp::kMean);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = model_->ApplyOptimizer(*optimizer_); !s.ok()) return s;
  return *loss;
}

}  // namespace embedps::dense
