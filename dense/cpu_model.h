// CpuModel: the CPU backend of the dense model (model_spec.h), over the
// system BLAS. It is the reference the CUDA backend is compared with, and
// it is templated so that gradient checks run it in float64.
//
// A batch is split into DenseThreads() (dense/blas.h) contiguous parts,
// each run forward and backward on its own thread with single-threaded
// GEMMs, and the parts' weight gradients summed at the end: no thread
// waits for another inside the step (a BLAS-threaded step on 2 cores spent
// a quarter of its cycles in the BLAS pool's idle spinning between GEMMs).
//
// Thread safety: one thread at a time per CpuModel.
#ifndef EMBEDPS_DENSE_CPU_MODEL_H_
#define EMBEDPS_DENSE_CPU_MODEL_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dense/internal/cpu_cross.h"
#include "dense/internal/cpu_layers.h"
#include "dense/model_spec.h"

namespace embedps::dense {

template <typename T>
class CpuModel {
 public:
  // INVALID_ARGUMENT (naming the field) for a bad spec. Parameters start
  // at InitializeParameters(spec).
  static absl::StatusOr<std::unique_ptr<CpuModel>> Create(
      const ModelSpec& spec);

  const ModelSpec& spec() const { return spec_; }
  const ModelLayout& layout() const { return layout_; }
  absl::Span<T> parameters() { return absl::MakeSpan(parameters_); }
  absl::Span<T> gradients() { return absl::MakeSpan(gradients_); }

  // Forward and backward on one batch. Returns the mean loss; leaves the
  // gradient of the mean loss in gradients(), writes d loss / d row for
  // every row of every slot into `row_gradients` (one span per slot, the
  // size of its rows) and, when `dense_gradients` is not empty,
  // d loss / d dense features. INVALID_ARGUMENT (nothing changes) for a
  // batch or buffers that do not fit the spec.
  //
  // `row_gradients_ready`, when given, is called once (on the calling
  // thread) as soon as every part has written its rows' gradients, while
  // the other parts' threads go on with the weight gradients (the top
  // MLP's, then the bottom MLP's backward pass): a worker sends the rows'
  // gradients there. It must not change the model.
  absl::StatusOr<T> TrainStep(
      const Batch<T>& batch, absl::Span<const absl::Span<T>> row_gradients,
      absl::Span<T> dense_gradients = {},
      const std::function<void()>& row_gradients_ready = nullptr);

  // The logits of the last TrainStep or Predict batch (empty before the
  // first). Valid until the next call.
  absl::Span<const T> last_logits() const { return last_logits_; }

  // Logits of the batch (labels are ignored). INVALID_ARGUMENT as above.
  absl::Status Predict(const Batch<T>& batch, absl::Span<T> logits);

 private:
  // One thread's share of a batch: samples [begin, end), its
  // activations, and (but for part 0, which writes gradients_) its own
  // weight gradients.
  struct Part {
    explicit Part(const ModelLayout& layout)
        : bottom(layout.bottom), top(layout.top), cross(layout.cross) {}
    int begin = 0, end = 0;
    dense_internal::LinearStack<T> bottom, top;
    dense_internal::CrossStack<T> cross;  // DCN-v2 (kCross) only
    // The features by pointer (samples × F: z0's rows, the bags' rows or
    // their pooled values), the bags that had to be pooled, the interaction
    // output, and the top MLP's input (the interaction, or z0 when there
    // are no slots).
    std::vector<const T*> features;
    std::vector<T> pooled, interaction;
    // kCross: the features side by side (x0), and d loss / d x0.
    std::vector<T> x0, dx0;
    const T* top_input = nullptr;
    // Backward: where each feature's gradient goes (as `features`), the
    // pooled bags' gradients, and the rest.
    std::vector<T*> dfeatures;
    std::vector<T> dpooled, delta, dinteraction, dz0, gradients;
  };

  explicit CpuModel(const ModelSpec& spec);
  // Splits n samples into parts (as many as DenseThreads(), each of at
  // least kMinPartSamples).
  void SplitBatch(int n);
  // The forward pass of `part`; writes its logits into logits_.
  void Forward(const Batch<T>& batch, Part& part);
  // The backward pass of `part` given its d loss / d logit in part.delta,
  // in two halves: down to the rows (the top MLP's input gradients, the
  // interaction, the rows' gradients; d loss / d z0 into part.dz0 when
  // `need_dz0`), then the rest: the top MLP's weight gradients and, when
  // there is anything `below` the interaction, the bottom MLP's backward
  // pass and d loss / d dense features. `gradients`: where the part's
  // weight gradients go.
  void BackwardToRows(const Batch<T>& batch,
                      absl::Span<const absl::Span<T>> row_gradients,
                      bool need_dz0, Part& part);
  void BackwardWeights(const Batch<T>& batch, bool below,
                       absl::Span<T> dense_gradients, T* gradients, Part& part);
  // Part p's weight gradients: gradients_ for part 0, its own for others.
  T* PartGradients(int p);

  const ModelSpec spec_;
  const ModelLayout layout_;
  std::vector<T> parameters_, gradients_, logits_;
  std::vector<std::unique_ptr<Part>> parts_;
  int num_parts_ = 0;  // in use for the current batch
  absl::Span<const T> last_logits_;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_CPU_MODEL_H_
