// ModelSpec: the shape of the dense model a worker trains, shared by the
// CPU and CUDA backends — one flat parameter layout, one seeded
// initialization, one batch format — so that parameters move between
// backends, ranks and files unchanged.
//
// The model is DLRM-style:
//   z0 = bottom MLP(dense features)              (ReLU after every layer)
//   e_s = pool_s(embedding rows of slot s's bag)  (sum or mean; given from
//                                                  outside, by the worker)
//   features = [z0, e_1, ..., e_S]                (F = S + 1 vectors)
//   interaction = [z0, <f_i, f_j> for 0 <= i < j < F]
//   logit = top MLP(interaction)                  (ReLU on hidden layers,
//                                                  one linear output)
// or DCN-v2-style (Interaction::kCross), the interaction being the cross
// network over the features side by side, x0 = [z0, e_1, ..., e_S]
// (D = F · dim values):
//   x_{l+1} = x0 ⊙ (W_l x_l + b_l) + x_l          (W_l: D × D, l < L)
//   interaction = x_L
//   loss = mean binary cross-entropy of sigmoid(logit), from the logit.
// A plain MLP is the special case with no slots and no bottom MLP: the
// interaction is then the dense features themselves (MlpModelSpec).
//
// Flat layout: the bottom layers, the cross layers, then the top layers;
// per layer W (out × in, row-major) then b (out).
//
// Thread safety: plain data and pure functions.
#ifndef EMBEDPS_DENSE_MODEL_SPEC_H_
#define EMBEDPS_DENSE_MODEL_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace embedps::dense {

enum class Pooling { kSum, kMean };
enum class Interaction { kDot, kCross };

struct ModelSpec {
  // Dense (continuous) features per sample. Default: 0 (invalid).
  int num_dense = 0;
  // Widths of the bottom MLP over the dense features. Default: none (the
  // dense features enter the interaction as they are).
  std::vector<int> bottom;
  // Width of every slot embedding; must equal the bottom output width
  // (num_dense when `bottom` is empty) when there are slots (both
  // interactions take the features at one width). Default: 0.
  int embedding_dim = 0;
  // One entry per sparse slot: how the rows of its bag are pooled.
  // Default: none (a plain MLP).
  std::vector<Pooling> slots;
  // How the features meet: DLRM's dot products or DCN-v2's cross network
  // of `cross_layers` (≥ 1) full-rank layers. Default: kDot, 0 layers.
  Interaction interaction = Interaction::kDot;
  int cross_layers = 0;
  // Hidden widths of the top MLP; its 1-logit output layer is implicit.
  // Default: none (logistic regression on the interaction).
  std::vector<int> top;
  // Initialization seed: the same seed gives bit-identical parameters on
  // every rank, backend and machine. Default: 0.
  uint64_t seed = 0;
};

// The most cross layers a model may have (DCN-v2 uses 2–4).
inline constexpr int kMaxCrossLayers = 16;

// A plain MLP: `input_dim` features, ReLU hidden layers, one logit.
ModelSpec MlpModelSpec(int input_dim, std::vector<int> hidden, uint64_t seed);

// INVALID_ARGUMENT naming the field.
absl::Status ValidateModelSpec(const ModelSpec& spec);

// One line that identifies the shape (not the seed), e.g.
// "dense=13 bottom=64,16 dim=16 slots=sum,mean top=64" (DCN-v2 adds
// " cross=3"). Stored with saved parameters so that a file is never loaded
// into a model of another shape.
std::string DescribeModelSpec(const ModelSpec& spec);

// One fully connected layer in the flat parameter buffer.
struct LayerShape {
  int in = 0;
  int out = 0;
  size_t weight_offset = 0;  // W at [weight_offset, +out·in)
  size_t bias_offset = 0;    // b at [bias_offset, +out)
  bool relu = false;         // ReLU on the output
};

// The layout of a valid spec.
struct ModelLayout {
  std::vector<LayerShape> bottom;
  std::vector<LayerShape> cross;  // D × D each, no ReLU (kCross only)
  std::vector<LayerShape> top;
  int z0_dim = 0;        // width of the bottom output
  int num_features = 0;  // F = 1 + number of slots
  // The top MLP's input: z0_dim + F(F-1)/2 (kDot), F · z0_dim (kCross).
  int interaction_dim = 0;
  size_t num_parameters = 0;
};

// REQUIRES: ValidateModelSpec(spec).ok().
ModelLayout LayoutOf(const ModelSpec& spec);

// Xavier (Glorot) uniform weights from a hash of (seed, flat index), zero
// biases: portable and bit-identical everywhere (no <random>
// distributions). REQUIRES: parameters.size() == layout.num_parameters.
template <typename T>
void InitializeParameters(const ModelSpec& spec, const ModelLayout& layout,
                          absl::Span<T> parameters);

// The input of one step. Spans are borrowed for the duration of the call.
template <typename T>
struct SlotBags {
  // The embedding rows of the batch's bags, bag after bag
  // (offsets.back() rows of embedding_dim values).
  absl::Span<const T> rows;
  // batch_size + 1 entries: bag b is rows [offsets[b], offsets[b+1]).
  // Empty bags are allowed (they pool to zeros).
  absl::Span<const int32_t> offsets;
};

template <typename T>
struct Batch {
  int size = 0;
  absl::Span<const T> dense;       // size × num_dense
  std::vector<SlotBags<T>> slots;  // one per slot of the spec
  absl::Span<const T> labels;      // size values in [0, 1]
};

// INVALID_ARGUMENT, with the numbers, unless `batch` fits `spec`; labels
// are checked only when `with_labels`.
template <typename T>
absl::Status ValidateBatch(const ModelSpec& spec, const Batch<T>& batch,
                           bool with_labels);

// INVALID_ARGUMENT unless there is one gradient span per slot, each the
// size of that slot's rows.
template <typename T>
absl::Status ValidateRowGradients(const Batch<T>& batch,
                                  absl::Span<const absl::Span<T>> gradients);

// Checks every backend makes on host buffers (INVALID_ARGUMENT with the
// numbers): a flat copy of `what` holds exactly `num_parameters` values;
// a logits buffer holds exactly the last batch's `last_batch_size`
// (FAILED_PRECONDITION when no batch has run: size 0).
absl::Status CheckFlatBufferSize(size_t got, size_t num_parameters,
                                 absl::string_view what);
absl::Status CheckLogitsBufferSize(size_t got, size_t last_batch_size);

// Model FLOPs of one forward + backward sample (multiply-adds count 2):
// the GEMMs, the interaction and the pooling.
double TrainingFlopsPerSample(const ModelSpec& spec, const ModelLayout& layout,
                              double rows_per_bag);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_MODEL_SPEC_H_
