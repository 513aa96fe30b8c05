// Model: the dense model a worker trains, behind one interface for the CPU
// and CUDA backends (same spec, same flat parameter layout, same
// initialization: parameters move between backends and ranks unchanged).
//
// A data-parallel step: TrainStep → AllReduce(gradient_buffer(), mean) on a
// Communicator of the backend's kind (Gloo for kCpu, NCCL for kCuda) →
// ApplyOptimizer.
//
// Thread safety: one thread at a time per Model, but for NewHostArray,
// which any thread may call at any time (a worker prepares the next
// batch's buffers while a step runs).
#ifndef EMBEDPS_DENSE_MODEL_H_
#define EMBEDPS_DENSE_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dense/dense_optimizer.h"
#include "dense/host_array.h"
#include "dense/model_spec.h"
#include "dense/unique_rows.h"

namespace embedps::dense {

class InputLayout;  // dense/dense_model.proto

enum class Backend { kCpu, kCuda };

// "cpu" or "cuda"; INVALID_ARGUMENT otherwise.
absl::StatusOr<Backend> ParseBackend(absl::string_view name);
const char* BackendName(Backend backend);

struct ModelOptions {
  Backend backend = Backend::kCpu;
  // kCuda: the device ordinal. Default: 0.
  int device = 0;
  // kCuda: let cuBLAS use TF32 tensor cores for float32 GEMMs (faster,
  // ~1e-3 relative error). Off by default so that CPU and CUDA agree to
  // float32 rounding.
  bool allow_tf32 = false;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelSpec& spec() const = 0;
  virtual Backend backend() const = 0;
  virtual size_t num_parameters() const = 0;

  // `size` floats of the host memory this backend copies fastest, for the
  // batches and row gradients given to TrainStep and Predict (any host
  // memory works there): page-locked for kCuda, plain for kCpu.
  // Uninitialized; valid after the model is gone. RESOURCE_EXHAUSTED (or
  // INTERNAL with the device's error) when the memory cannot be had.
  virtual absl::StatusOr<HostArray> NewHostArray(size_t size) {
    return NewPlainHostArray(size);
  }

  // Forward and backward on one batch (host memory, borrowed for the
  // call). Returns the mean loss, leaves the gradient of the mean loss in
  // gradient_buffer(), and writes d loss / d row of every slot's rows into
  // `row_gradients` (host; one span per slot, the size of its rows).
  // INVALID_ARGUMENT for a batch or buffers that do not fit the spec
  // (nothing changes); INTERNAL with the device error for a CUDA failure.
  //
  // `row_gradients_ready`, when given, is called once on the calling
  // thread when `row_gradients` hold their final values and before
  // TrainStep returns: on the CPU backend while the dense layers below the
  // interaction still run their backward pass (so that a worker's Pushes
  // overlap it), on CUDA at the end of the step. It must not change the
  // model. Not called when the step fails before the rows' gradients exist.
  virtual absl::StatusOr<float> TrainStep(
      const Batch<float>& batch,
      absl::Span<const absl::Span<float>> row_gradients,
      const std::function<void()>& row_gradients_ready = nullptr) = 0;

  // TrainStep on a batch of unique rows (unique_rows.h): every bag pools
  // its keys' rows from their table's unique rows, and
  // `table_gradients[t]` (one span per table, the size of its unique rows)
  // receives, per unique row, the sum over the keys that name it of
  // gradient_scale × weight × d loss / d row, in (slot, key) order: what a
  // worker pushes. `ready` as row_gradients_ready, once the table
  // gradients are final. INVALID_ARGUMENT (nothing changes) for a batch or
  // buffers that do not fit.
  //
  // kCpu runs the host stages of unique_rows.h around TrainStep on
  // DenseThreads() threads; kCuda runs them on the device, moving only the
  // unique rows up and their gradients down.
  virtual absl::StatusOr<float> TrainStepOnUniqueRows(
      const UniqueRowsBatch& batch, float gradient_scale,
      absl::Span<const absl::Span<float>> table_gradients,
      const std::function<void()>& ready = nullptr) = 0;

  // Predict on a batch of unique rows (labels are ignored).
  virtual absl::Status PredictOnUniqueRows(const UniqueRowsBatch& batch,
                                           absl::Span<float> logits) = 0;

  // Copies the logits of the last TrainStep's or Predict's batch into
  // `host` (e.g. for a running AUC without a second forward pass).
  // FAILED_PRECONDITION before the first step; INVALID_ARGUMENT if the
  // size is not that batch's.
  virtual absl::Status LastLogits(absl::Span<float> host) = 0;

  // Logits of the batch (labels are ignored), into host memory.
  virtual absl::Status Predict(const Batch<float>& batch,
                               absl::Span<float> logits) = 0;

  // The flat parameter and gradient buffers in the backend's memory
  // (device memory for kCuda): what collectives work on in place. Valid
  // for the model's lifetime.
  virtual absl::Span<float> parameter_buffer() = 0;
  virtual absl::Span<float> gradient_buffer() = 0;

  // Copies between the flat buffers and host memory. INVALID_ARGUMENT if
  // the size is not num_parameters().
  virtual absl::Status GetParameters(absl::Span<float> host) = 0;
  virtual absl::Status SetParameters(absl::Span<const float> host) = 0;
  virtual absl::Status GetGradients(absl::Span<float> host) = 0;

  // An optimizer of `spec` for this model's parameters whose steps
  // (ApplyOptimizer) run where the parameters are: the host's on kCpu; on
  // kCuda one kernel over moments kept on the device, with no copy of the
  // parameters. The same state bytes either way (a checkpoint moves
  // between backends). INVALID_ARGUMENT naming the field for a bad spec.
  virtual absl::StatusOr<std::unique_ptr<DenseOptimizer>> NewOptimizer(
      const DenseOptimizerSpec& spec) {
    return DenseOptimizer::Create(spec, num_parameters());
  }

  // One optimizer step from the current gradients (after any allreduce).
  // Any DenseOptimizer of num_parameters() works; one made by this model's
  // NewOptimizer needs no copies.
  virtual absl::Status ApplyOptimizer(DenseOptimizer& optimizer) = 0;
};

// The host's stages of a unique-rows step (unique_rows.h, on DenseThreads()
// threads) around model.TrainStep / model.Predict: the CPU backend's
// TrainStepOnUniqueRows and PredictOnUniqueRows, and a CUDA model's step
// with its stages on the host (for comparisons). `buffers` holds the bags'
// rows and their gradients in the model's host memory, grow-only; the same
// contract and errors as TrainStepOnUniqueRows.
struct HostStageBuffers {
  std::vector<HostArray> rows, gradients;
};
absl::StatusOr<float> TrainStepWithHostStages(
    Model& model, HostStageBuffers& buffers, const UniqueRowsBatch& batch,
    float gradient_scale, absl::Span<const absl::Span<float>> table_gradients,
    const std::function<void()>& ready = nullptr);
absl::Status PredictWithHostStages(Model& model, HostStageBuffers& buffers,
                                   const UniqueRowsBatch& batch,
                                   absl::Span<float> logits);

// INVALID_ARGUMENT for a bad spec; FAILED_PRECONDITION (saying why) for
// kCuda in a build without CUDA or on a machine without a usable device.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec,
                                                   const ModelOptions& options);

// Writes the parameters and `step` to `path` atomically (a temporary file
// renamed into place), with the model's shape and a checksum.
// With `optimizer`, its state is saved too; with `input`, the layout of
// the model's inputs (stored as given, never read by the model).
absl::Status SaveParameters(Model& model, int64_t step, const std::string& path,
                            const DenseOptimizer* optimizer = nullptr,
                            const InputLayout* input = nullptr);

// Loads parameters saved by SaveParameters into `model` and returns their
// step. NOT_FOUND for a missing file; DATA_LOSS naming the file for a
// truncated or corrupt one; FAILED_PRECONDITION if it was written by a
// model of another shape or an unknown format version. On error the model
// is unchanged.
// With `optimizer`, the file must hold optimizer state (FAILED_PRECONDITION
// otherwise), which is restored into it.
absl::StatusOr<int64_t> LoadParameters(const std::string& path, Model& model,
                                       DenseOptimizer* optimizer = nullptr);

// The bytes SaveParameters writes (to send them rather than store them).
absl::StatusOr<std::string> SerializeParameters(
    Model& model, int64_t step, const DenseOptimizer* optimizer = nullptr,
    const InputLayout* input = nullptr);

// The input layout saved with the parameters in `bytes` (empty if none
// was); DATA_LOSS naming `path` if they are not such a file,
// FAILED_PRECONDITION for a format version this build does not read.
absl::StatusOr<InputLayout> ReadInputLayout(absl::string_view bytes,
                                            const std::string& path);

// LoadParameters of the bytes of such a file; `path` names them in errors.
absl::StatusOr<int64_t> LoadParametersFromBytes(
    absl::string_view bytes, const std::string& path, Model& model,
    DenseOptimizer* optimizer = nullptr);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_MODEL_H_
