// cuda_model.h for builds with the CUDA toolkit.
//
// Every call makes the model's device current, enqueues its copies and
// kernels on the model's own stream, and synchronizes once before
// returning results to the host. Host memory from NewHostArray is
// page-locked (cudaHostAlloc): copies from and to it are DMA at the bus's
// speed; any other host memory is pageable, and its copies are staged by
// the driver.
#include "dense/cuda_model.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "dense/cuda/cuda_dense_optimizer.h"
#include "dense/cuda/cuda_status.h"
#include "dense/cuda/device_array.h"
#include "dense/cuda/model_kernels.cuh"
#include "dense/cuda/unique_rows_kernels.cuh"
#include "dense/unique_rows.h"

namespace embedps::dense {
namespace {

using namespace ::embedps::dense_cuda;  // NOLINT: the kernel launchers

class CudaModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelSpec& spec, const ModelOptions& options) {
    int count = 0;
    RETURN_IF_ERROR(
        CudaStatus(cudaGetDeviceCount(&count), "no usable CUDA device"));
    if (options.device < 0 || options.device >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("CUDA device ", options.device, " does not exist (",
                       count, " visible)"));
    }
    std::unique_ptr<CudaModel> model(new CudaModel(spec, options));
    RETURN_IF_ERROR(model->Initialize());
    return std::unique_ptr<Model>(std::move(model));
  }

  ~CudaModel() override {
    cudaSetDevice(options_.device);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (gradients_copied_ != nullptr) cudaEventDestroy(gradients_copied_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const ModelSpec& spec() const override { return spec_; }
  Backend backend() const override { return Backend::kCuda; }

  absl::StatusOr<HostArray> NewHostArray(size_t size) override {
    if (size == 0) return HostArray();
    if (size > std::numeric_limits<size_t>::max() / sizeof(float)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a host array of ", size, " floats does not fit memory"));
    }
    RETURN_IF_ERROR(MakeCurrent());
    void* data = nullptr;
    RETURN_IF_ERROR(CudaStatus(
        cudaHostAlloc(&data, size * sizeof(float), cudaHostAllocPortable),
        absl::StrCat("cudaHostAlloc of ", size * sizeof(float), " bytes")));
    return HostArray(static_cast<float*>(data), size,
                     [](void* p) { cudaFreeHost(p); });
  }
  size_t num_parameters() const override { return layout_.num_parameters; }

  absl::StatusOr<float> TrainStep(
      const Batch<float>& batch,
      absl::Span<const absl::Span<float>> row_gradients,
      const std::function<void()>& row_gradients_ready) override {
    RETURN_IF_ERROR(ValidateBatch(spec_, batch, /*with_labels=*/true));
    RETURN_IF_ERROR(ValidateRowGradients(batch, row_gradients));
    RETURN_IF_ERROR(MakeCurrent());
    const int n = batch.size, f = layout_.num_features, d = layout_.z0_dim;
    RETURN_IF_ERROR(Upload(batch, /*with_labels=*/true));
    RETURN_IF_ERROR(Forward(n, [&](size_t s) {
      LaunchPoolBags(spec_.slots[s] == Pooling::kMean, rows_[s].data(),
                     offsets_[s].data(), n, d, static_cast<int>(s), f,
                     features_.data(), stream_);
    }));
    RETURN_IF_ERROR(Backward(n, [&]() -> absl::Status {
      for (size_t s = 0; s < spec_.slots.size(); ++s) {
        RETURN_IF_ERROR(row_gradients_[s].Resize(rows_[s].size()));
        LaunchUnpoolBags(spec_.slots[s] == Pooling::kMean, dfeatures_.data(),
                         offsets_[s].data(), n, d, static_cast<int>(s), f,
                         row_gradients_[s].data(), stream_);
      }
      return absl::OkStatus();
    }));
    for (size_t s = 0; s < spec_.slots.size(); ++s) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(row_gradients[s].data(), row_gradients_[s].data(),
                          row_gradients[s].size() * sizeof(float),
                          cudaMemcpyDeviceToHost, stream_),
          "copying row gradients to the host"));
    }
    ASSIGN_OR_RETURN(const float loss, MeanLoss(n));
    if (row_gradients_ready) row_gradients_ready();
    return loss;
  }

  // The bags pooled from the tables' unique rows on the device; the row
  // gradients summed per unique row there (a stable radix sort of the
  // keys' rows gives every row its keys in (slot, key) order), and only
  // the sums copied back.
  absl::StatusOr<float> TrainStepOnUniqueRows(
      const UniqueRowsBatch& batch, float gradient_scale,
      absl::Span<const absl::Span<float>> table_gradients,
      const std::function<void()>& ready) override {
    RETURN_IF_ERROR(
        ValidateUniqueRowsBatch(spec_, batch, /*with_labels=*/true));
    RETURN_IF_ERROR(ValidateTableGradients(batch, table_gradients));
    RETURN_IF_ERROR(MakeCurrent());
    const int n = batch.size;
    RETURN_IF_ERROR(UploadUnique(batch, /*with_labels=*/true));
    RETURN_IF_ERROR(Forward(n, [&](size_t s) { PoolUnique(batch, s); }));
    // The unique rows' gradients are summed and copied as soon as the
    // features' gradients exist: the host gets them (`ready`: the Pushes
    // start) while the device goes on with the bottom MLP's backward.
    bool summed = false;
    const auto sum_and_copy = [&]() -> absl::Status {
      // Per table: its keys' rows sorted (with their positions), then one
      // sum per unique row.
      for (size_t t = 0; t < batch.tables.size(); ++t) {
        const int keys = static_cast<int>(table_keys_[t]);
        const int rows =
            static_cast<int>(batch.tables[t].size() / spec_.embedding_dim);
        const size_t at = table_first_[t];
        RETURN_IF_ERROR(table_gradients_[t].Resize(batch.tables[t].size()));
        if (keys > 0) {
          int bits = 1;
          while (bits < 31 && (int64_t{1} << bits) < rows) ++bits;
          LaunchIota(positions_.data() + at, keys, stream_);
          size_t bytes = 0;
          RETURN_IF_ERROR(
              CudaStatus(SortPairs(nullptr, bytes, nullptr, nullptr, nullptr,
                                   nullptr, keys, bits, stream_),
                         "sizing the key sort"));
          RETURN_IF_ERROR(sort_scratch_.Resize(bytes));
          RETURN_IF_ERROR(CudaStatus(
              SortPairs(sort_scratch_.data(), bytes, index_.data() + at,
                        sorted_index_.data() + at, positions_.data() + at,
                        sorted_positions_.data() + at, keys, bits, stream_),
              "sorting the keys by row"));
        }
        // Positions count from the table's first key: so do the sources.
        LaunchSumUniqueGradients(
            sorted_index_.data() + at, sorted_positions_.data() + at, keys,
            rows, spec_.embedding_dim, key_source_.data() + at,
            key_by_.data() + at, key_unpool_.data() + at, dfeatures_.data(),
            table_gradients_[t].data(), stream_);
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpyAsync(table_gradients[t].data(),
                            table_gradients_[t].data(),
                            table_gradients[t].size() * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_),
            "copying unique-row gradients to the host"));
      }
      summed = true;
      return CudaStatus(cudaEventRecord(gradients_copied_, stream_),
                        "recording the gradients' copy");
    };
    RETURN_IF_ERROR(Backward(n, [&]() -> absl::Status {
      for (size_t s = 0; s < batch.slots.size(); ++s) {
        const UniqueRowsBatch::Slot& slot = batch.slots[s];
        const size_t first = key_first_[s];
        LaunchKeySources(spec_.slots[s] == Pooling::kMean, offsets_[s].data(),
                         slot.weights.empty() ? nullptr : weights_[s].data(),
                         gradient_scale, n, static_cast<int>(s),
                         layout_.num_features, key_source_.data() + first,
                         key_by_.data() + first, key_unpool_.data() + first,
                         stream_);
      }
      return sum_and_copy();
    }));
    // (A model without slots has no features' gradients to wait for.)
    if (!summed) RETURN_IF_ERROR(sum_and_copy());
    if (ready) {
      RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(gradients_copied_),
                                 "waiting for the unique-row gradients"));
      ready();
    }
    return MeanLoss(n);
  }

  absl::Status PredictOnUniqueRows(const UniqueRowsBatch& batch,
                                   absl::Span<float> logits) override {
    RETURN_IF_ERROR(
        ValidateUniqueRowsBatch(spec_, batch, /*with_labels=*/false));
    RETURN_IF_ERROR(CheckPredictSize(batch.size, logits));
    RETURN_IF_ERROR(MakeCurrent());
    RETURN_IF_ERROR(UploadUnique(batch, /*with_labels=*/false));
    RETURN_IF_ERROR(
        Forward(batch.size, [&](size_t s) { PoolUnique(batch, s); }));
    return CopyLogits(logits);
  }

  absl::Status Predict(const Batch<float>& batch,
                       absl::Span<float> logits) override {
    RETURN_IF_ERROR(ValidateBatch(spec_, batch, /*with_labels=*/false));
    RETURN_IF_ERROR(CheckPredictSize(batch.size, logits));
    RETURN_IF_ERROR(MakeCurrent());
    RETURN_IF_ERROR(Upload(batch, /*with_labels=*/false));
    const int n = batch.size, f = layout_.num_features, d = layout_.z0_dim;
    RETURN_IF_ERROR(Forward(n, [&](size_t s) {
      LaunchPoolBags(spec_.slots[s] == Pooling::kMean, rows_[s].data(),
                     offsets_[s].data(), n, d, static_cast<int>(s), f,
                     features_.data(), stream_);
    }));
    return CopyLogits(logits);
  }

  absl::Status LastLogits(absl::Span<float> host) override {
    RETURN_IF_ERROR(CheckLogitsBufferSize(host.size(), last_batch_size_));
    RETURN_IF_ERROR(MakeCurrent());
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(host.data(), top_activations_.back().data(),
                                   host.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream_),
                   "copying logits to the host"));
    return Synchronize("LastLogits");
  }

  absl::Span<float> parameter_buffer() override {
    return absl::MakeSpan(parameters_.data(), parameters_.size());
  }
  absl::Span<float> gradient_buffer() override {
    return absl::MakeSpan(gradients_.data(), gradients_.size());
  }

  absl::Status GetParameters(absl::Span<float> host) override {
    return CopyToHost(parameters_, host, "parameters");
  }
  absl::Status GetGradients(absl::Span<float> host) override {
    return CopyToHost(gradients_, host, "gradients");
  }
  absl::Status SetParameters(absl::Span<const float> host) override {
    RETURN_IF_ERROR(
        CheckFlatBufferSize(host.size(), layout_.num_parameters, "parameters"));
    RETURN_IF_ERROR(MakeCurrent());
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(parameters_.data(), host.data(),
                                               host.size() * sizeof(float),
                                               cudaMemcpyHostToDevice, stream_),
                               "copying parameters to the device"));
    return Synchronize("SetParameters");
  }

  absl::StatusOr<std::unique_ptr<DenseOptimizer>> NewOptimizer(
      const DenseOptimizerSpec& spec) override {
    ASSIGN_OR_RETURN(
        std::unique_ptr<CudaDenseOptimizer> optimizer,
        CudaDenseOptimizer::Create(spec, num_parameters(), options_.device));
    return std::unique_ptr<DenseOptimizer>(std::move(optimizer));
  }

  // An optimizer of NewOptimizer's steps the parameters on the device, on
  // the model's stream (no copies, no wait); any other runs on the host
  // over copies of the flat buffers (two to the host, one back).
  absl::Status ApplyOptimizer(DenseOptimizer& optimizer) override {
    if (auto* on_device = dynamic_cast<CudaDenseOptimizer*>(&optimizer);
        on_device != nullptr && on_device->device() == options_.device) {
      RETURN_IF_ERROR(MakeCurrent());
      return on_device->StepOnDevice(parameters_.data(), gradients_.data(),
                                     stream_);
    }
    host_parameters_.resize(num_parameters());
    host_gradients_.resize(num_parameters());
    RETURN_IF_ERROR(GetParameters(absl::MakeSpan(host_parameters_)));
    RETURN_IF_ERROR(GetGradients(absl::MakeSpan(host_gradients_)));
    RETURN_IF_ERROR(
        optimizer.Step(absl::MakeSpan(host_parameters_), host_gradients_));
    return SetParameters(host_parameters_);
  }

 private:
  CudaModel(const ModelSpec& spec, const ModelOptions& options)
      : spec_(spec),
        layout_(LayoutOf(spec)),
        options_(options),
        bottom_activations_(layout_.bottom.size()),
        top_activations_(layout_.top.size()),
        rows_(spec.slots.size()),
        offsets_(spec.slots.size()),
        row_gradients_(spec.slots.size()) {}

  absl::Status Initialize() {
    RETURN_IF_ERROR(MakeCurrent());
    RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                   "cudaStreamCreate"));
    RETURN_IF_ERROR(CudaStatus(
        cudaEventCreateWithFlags(&gradients_copied_, cudaEventDisableTiming),
        "cudaEventCreate"));
    RETURN_IF_ERROR(CublasStatus(cublasCreate(&cublas_), "cublasCreate"));
    RETURN_IF_ERROR(
        CublasStatus(cublasSetStream(cublas_, stream_), "cublasSetStream"));
    RETURN_IF_ERROR(
        CublasStatus(cublasSetMathMode(cublas_, options_.allow_tf32
                                                    ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_DEFAULT_MATH),
                     "cublasSetMathMode"));
    RETURN_IF_ERROR(parameters_.Resize(layout_.num_parameters));
    RETURN_IF_ERROR(gradients_.Resize(layout_.num_parameters));
    RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(gradients_.data(), 0,
                                   gradients_.size() * sizeof(float), stream_),
                   "cudaMemset"));
    std::vector<float> initial(layout_.num_parameters);
    InitializeParameters<float>(spec_, layout_, absl::MakeSpan(initial));
    return SetParameters(initial);
  }

  absl::Status MakeCurrent() {
    return CudaStatus(cudaSetDevice(options_.device),
                      absl::StrCat("cudaSetDevice(", options_.device, ")"));
  }

  absl::Status Synchronize(absl::string_view what) {
    RETURN_IF_ERROR(
        CudaStatus(cudaGetLastError(), absl::StrCat(what, " kernel launch")));
    return CudaStatus(cudaStreamSynchronize(stream_), what);
  }

  absl::Status CopyToHost(const DeviceArray<float>& from,
                          absl::Span<float> host, absl::string_view what) {
    RETURN_IF_ERROR(
        CheckFlatBufferSize(host.size(), layout_.num_parameters, what));
    RETURN_IF_ERROR(MakeCurrent());
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(host.data(), from.data(), host.size() * sizeof(float),
                        cudaMemcpyDeviceToHost, stream_),
        absl::StrCat("copying ", what, " to the host")));
    return Synchronize(absl::StrCat("copying ", what));
  }

  template <typename T>
  absl::Status UploadSpan(absl::Span<const T> host, DeviceArray<T>& device,
                          absl::string_view what) {
    RETURN_IF_ERROR(device.Resize(host.size()));
    if (host.empty()) return absl::OkStatus();
    return CudaStatus(
        cudaMemcpyAsync(device.data(), host.data(), host.size() * sizeof(T),
                        cudaMemcpyHostToDevice, stream_),
        absl::StrCat("copying ", what, " to the device"));
  }

  absl::Status Upload(const Batch<float>& batch, bool with_labels) {
    RETURN_IF_ERROR(UploadSpan(batch.dense, dense_, "dense features"));
    if (with_labels) {
      RETURN_IF_ERROR(UploadSpan(batch.labels, labels_, "labels"));
    }
    for (size_t s = 0; s < batch.slots.size(); ++s) {
      RETURN_IF_ERROR(
          UploadSpan(batch.slots[s].rows, rows_[s], "embedding rows"));
      RETURN_IF_ERROR(
          UploadSpan(batch.slots[s].offsets, offsets_[s], "bag offsets"));
    }
    return UploadOnes(batch.size);
  }

  // At least n ones in ones_ (the bias gradients' sums over the batch).
  absl::Status UploadOnes(int n) {
    if (ones_.size() >= static_cast<size_t>(n)) return absl::OkStatus();
    const std::vector<float> ones(n, 1.0f);
    return UploadSpan(absl::Span<const float>(ones), ones_, "ones");
  }

  // Row-major C[m×n] = alpha·op(A)·op(B) + beta·C through column-major
  // cuBLAS: the same product transposed, with the operands swapped.
  absl::Status Gemm(bool ta, bool tb, int m, int n, int k, float alpha,
                    const float* a, const float* b, float beta, float* c) {
    return CublasStatus(
        cublasSgemm(cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                    tb ? k : n, a, ta ? m : k, &beta, c, n),
        "cublasSgemm");
  }

  absl::Status StackForward(const std::vector<LayerShape>& layers,
                            std::vector<DeviceArray<float>>& activations,
                            const float* x, int batch) {
    const float* input = x;
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerShape& layer = layers[l];
      DeviceArray<float>& z = activations[l];
      RETURN_IF_ERROR(z.Resize(static_cast<size_t>(batch) * layer.out));
      LaunchBroadcastRows(parameters_.data() + layer.bias_offset, batch,
                          layer.out, z.data(), stream_);
      RETURN_IF_ERROR(Gemm(false, true, batch, layer.out, layer.in, 1.0f, input,
                           parameters_.data() + layer.weight_offset, 1.0f,
                           z.data()));
      if (layer.relu) LaunchRelu(z.data(), z.size(), stream_);
      input = z.data();
    }
    return absl::OkStatus();
  }

  // A layer's W and b gradients (written) from d loss / d its output
  // (`delta`, batch × out) and its input (batch × in): dW = deltaᵀ · input,
  // db = Σ over rows of delta (column-major out × batch, times ones).
  absl::Status WeightGradients(const LayerShape& layer, const float* delta,
                               const float* input, int batch) {
    const float one = 1.0f, zero = 0.0f;
    RETURN_IF_ERROR(Gemm(true, false, layer.out, layer.in, batch, 1.0f, delta,
                         input, 0.0f, gradients_.data() + layer.weight_offset));
    return CublasStatus(
        cublasSgemv(cublas_, CUBLAS_OP_N, layer.out, batch, &one, delta,
                    layer.out, ones_.data(), 1, &zero,
                    gradients_.data() + layer.bias_offset, 1),
        "cublasSgemv");
  }

  // REQUIRES: delta_ holds d loss / d output of the stack.
  absl::Status StackBackward(const std::vector<LayerShape>& layers,
                             std::vector<DeviceArray<float>>& activations,
                             const float* x, int batch, float* dx) {
    for (size_t l = layers.size(); l-- > 0;) {
      const LayerShape& layer = layers[l];
      if (layer.relu) {
        LaunchReluBackward(activations[l].data(), activations[l].size(),
                           delta_.data(), stream_);
      }
      const float* input = l == 0 ? x : activations[l - 1].data();
      RETURN_IF_ERROR(WeightGradients(layer, delta_.data(), input, batch));
      if (l == 0 && dx == nullptr) break;
      float* target = dx;
      if (l > 0) {
        RETURN_IF_ERROR(scratch_.Resize(static_cast<size_t>(batch) * layer.in));
        target = scratch_.data();
      }
      RETURN_IF_ERROR(
          Gemm(false, false, batch, layer.in, layer.out, 1.0f, delta_.data(),
               parameters_.data() + layer.weight_offset, 0.0f, target));
      if (l == 0) break;
      std::swap(delta_, scratch_);
    }
    return absl::OkStatus();
  }

  // DCN-v2's cross layers over x0 (n × D): x_{l+1} = x0 ⊙ (x_l W_lᵀ + b_l)
  // + x_l, keeping each u_l and x_{l+1}; top_input_ = x_L.
  absl::Status CrossForward(const float* x0, int n) {
    cross_x0_ = x0;
    cross_products_.resize(layout_.cross.size());
    cross_outputs_.resize(layout_.cross.size());
    const float* x = x0;
    for (size_t l = 0; l < layout_.cross.size(); ++l) {
      const LayerShape& layer = layout_.cross[l];
      const size_t size = static_cast<size_t>(n) * layer.out;
      DeviceArray<float>& u = cross_products_[l];
      RETURN_IF_ERROR(u.Resize(size));
      LaunchBroadcastRows(parameters_.data() + layer.bias_offset, n, layer.out,
                          u.data(), stream_);
      RETURN_IF_ERROR(Gemm(false, true, n, layer.out, layer.in, 1.0f, x,
                           parameters_.data() + layer.weight_offset, 1.0f,
                           u.data()));
      RETURN_IF_ERROR(cross_outputs_[l].Resize(size));
      LaunchCrossCombine(x0, u.data(), x, size, cross_outputs_[l].data(),
                         stream_);
      x = cross_outputs_[l].data();
    }
    top_input_ = x;
    return absl::OkStatus();
  }

  // The cross layers' backward pass: dinteraction_ holds d loss / d x_L.
  // Writes every layer's W and b gradients and, with need_dx0, leaves
  // d loss / d x0 in dinteraction_ (x0 is every layer's factor and layer
  // 0's input: Σ_l dx_{l+1} ⊙ u_l plus the gradient by x_0 itself).
  absl::Status CrossBackward(int n, bool need_dx0) {
    const float one = 1.0f;
    const size_t size = static_cast<size_t>(n) * layout_.interaction_dim;
    float* g = dinteraction_.data();
    if (need_dx0) {
      RETURN_IF_ERROR(cross_dx0_.Resize(size));
      RETURN_IF_ERROR(CudaStatus(
          cudaMemsetAsync(cross_dx0_.data(), 0, size * sizeof(float), stream_),
          "cudaMemset"));
    }
    RETURN_IF_ERROR(cross_dproduct_.Resize(size));
    float* du = cross_dproduct_.data();
    for (size_t l = layout_.cross.size(); l-- > 0;) {
      const LayerShape& layer = layout_.cross[l];
      LaunchCrossBackward(g, cross_x0_, cross_products_[l].data(), size, du,
                          need_dx0 ? cross_dx0_.data() : nullptr, stream_);
      const float* x = l == 0 ? cross_x0_ : cross_outputs_[l - 1].data();
      RETURN_IF_ERROR(WeightGradients(layer, du, x, n));
      if (l == 0 && !need_dx0) break;
      // d loss / d x_l = dU · W + d loss / d x_{l+1}, in place.
      RETURN_IF_ERROR(Gemm(false, false, n, layer.in, layer.out, 1.0f, du,
                           parameters_.data() + layer.weight_offset, 1.0f, g));
    }
    if (!need_dx0) return absl::OkStatus();
    return CublasStatus(cublasSaxpy(cublas_, static_cast<int>(size), &one,
                                    cross_dx0_.data(), 1, g, 1),
                        "cublasSaxpy");
  }

  // The forward pass of n samples whose dense features are uploaded;
  // pool(s) enqueues slot s's pooling into features_.
  absl::Status Forward(int n, const std::function<void(size_t)>& pool) {
    const int f = layout_.num_features, d = layout_.z0_dim;
    const float* z0 = dense_.data();
    if (!layout_.bottom.empty()) {
      RETURN_IF_ERROR(StackForward(layout_.bottom, bottom_activations_, z0, n));
      z0 = bottom_activations_.back().data();
    }
    top_input_ = z0;
    // DCN-v2's x0: the features side by side (features_ is n × F·d), or
    // z0 alone without slots.
    const float* x0 = z0;
    if (!spec_.slots.empty()) {
      RETURN_IF_ERROR(features_.Resize(static_cast<size_t>(n) * f * d));
      LaunchCopyFeatureZero(const_cast<float*>(z0), features_.data(), n, f, d,
                            /*to_features=*/true, stream_);
      for (size_t s = 0; s < spec_.slots.size(); ++s) pool(s);
      if (layout_.cross.empty()) {
        RETURN_IF_ERROR(interaction_.Resize(static_cast<size_t>(n) *
                                            layout_.interaction_dim));
        LaunchInteract(features_.data(), n, f, d, interaction_.data(), stream_);
        top_input_ = interaction_.data();
      }
      x0 = features_.data();
    }
    if (!layout_.cross.empty()) RETURN_IF_ERROR(CrossForward(x0, n));
    last_batch_size_ = n;
    return StackForward(layout_.top, top_activations_, top_input_, n);
  }

  // The backward pass after Forward (labels uploaded): the loss terms,
  // the weight gradients into gradients_, and d loss / d features in
  // dfeatures_, from which `rows` enqueues what the slots' rows need
  // (before the bottom MLP's backward pass overwrites nothing it reads).
  absl::Status Backward(int n, const std::function<absl::Status()>& rows) {
    const int f = layout_.num_features, d = layout_.z0_dim;
    RETURN_IF_ERROR(losses_.Resize(n));
    RETURN_IF_ERROR(delta_.Resize(n));
    LaunchBinaryCrossEntropy(top_activations_.back().data(), labels_.data(), n,
                             losses_.data(), delta_.data(), stream_);
    // Below the top MLP: nothing to do for a plain MLP; without slots the
    // top input's gradient is d loss / d z0 itself.
    const bool need_dz0 = !spec_.slots.empty() || !layout_.bottom.empty();
    const bool cross = !layout_.cross.empty();
    RETURN_IF_ERROR(
        dinteraction_.Resize(static_cast<size_t>(n) * layout_.interaction_dim));
    // The cross layers' weights need d loss / d x_L whatever is below.
    RETURN_IF_ERROR(
        StackBackward(layout_.top, top_activations_, top_input_, n,
                      need_dz0 || cross ? dinteraction_.data() : nullptr));
    // dinteraction_ becomes d loss / d x0 (kCross).
    if (cross) RETURN_IF_ERROR(CrossBackward(n, need_dz0));
    if (spec_.slots.empty()) {
      std::swap(delta_, dinteraction_);
    } else {
      RETURN_IF_ERROR(dfeatures_.Resize(features_.size()));
      if (cross) {
        std::swap(dfeatures_, dinteraction_);  // both n × F·d
      } else {
        LaunchInteractBackward(features_.data(), dinteraction_.data(), n, f, d,
                               dfeatures_.data(), stream_);
      }
      RETURN_IF_ERROR(rows());
      if (!layout_.bottom.empty()) {
        RETURN_IF_ERROR(delta_.Resize(static_cast<size_t>(n) * d));
        LaunchCopyFeatureZero(delta_.data(), dfeatures_.data(), n, f, d,
                              /*to_features=*/false, stream_);
      }
    }
    if (!layout_.bottom.empty()) {
      RETURN_IF_ERROR(StackBackward(layout_.bottom, bottom_activations_,
                                    dense_.data(), n, nullptr));
    }
    return absl::OkStatus();
  }

  // The mean of the loss terms; waits for the step.
  absl::StatusOr<float> MeanLoss(int n) {
    // BCE terms are never negative, so their absolute sum is the sum.
    float loss_sum = 0;
    RETURN_IF_ERROR(CublasStatus(
        cublasSasum(cublas_, n, losses_.data(), 1, &loss_sum), "cublasSasum"));
    RETURN_IF_ERROR(Synchronize("TrainStep"));
    return loss_sum / static_cast<float>(n);
  }

  static absl::Status CheckPredictSize(int n, absl::Span<float> logits) {
    if (logits.size() != static_cast<size_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Predict needs room for ", n, " logits, got ", logits.size()));
    }
    return absl::OkStatus();
  }

  absl::Status CopyLogits(absl::Span<float> logits) {
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(logits.data(), top_activations_.back().data(),
                        logits.size() * sizeof(float), cudaMemcpyDeviceToHost,
                        stream_),
        "copying logits to the host"));
    return Synchronize("Predict");
  }

  // Uploads a UniqueRowsBatch: the dense features (and labels), every
  // table's unique rows, and per slot its offsets, weights and keys' rows
  // (the latter into one array per table, slot after slot, at
  // key_first_[s]; table t's keys start at table_first_[t]).
  absl::Status UploadUnique(const UniqueRowsBatch& batch, bool with_labels) {
    RETURN_IF_ERROR(UploadSpan(batch.dense, dense_, "dense features"));
    if (with_labels) {
      RETURN_IF_ERROR(UploadSpan(batch.labels, labels_, "labels"));
    }
    table_rows_.resize(batch.tables.size());
    table_gradients_.resize(batch.tables.size());
    for (size_t t = 0; t < batch.tables.size(); ++t) {
      RETURN_IF_ERROR(
          UploadSpan(batch.tables[t], table_rows_[t], "unique rows"));
    }
    table_first_.assign(batch.tables.size(), 0);
    table_keys_.assign(batch.tables.size(), 0);
    for (const UniqueRowsBatch::Slot& slot : batch.slots) {
      table_keys_[slot.table] += slot.index.size();
    }
    size_t keys = 0;
    for (size_t t = 0; t < batch.tables.size(); ++t) {
      table_first_[t] = keys;
      keys += table_keys_[t];
    }
    RETURN_IF_ERROR(index_.Resize(keys));
    RETURN_IF_ERROR(positions_.Resize(keys));
    RETURN_IF_ERROR(sorted_index_.Resize(keys));
    RETURN_IF_ERROR(sorted_positions_.Resize(keys));
    RETURN_IF_ERROR(key_source_.Resize(keys));
    RETURN_IF_ERROR(key_by_.Resize(keys));
    RETURN_IF_ERROR(key_unpool_.Resize(keys));
    key_first_.resize(batch.slots.size());
    weights_.resize(batch.slots.size());
    std::vector<size_t> next = table_first_;
    for (size_t s = 0; s < batch.slots.size(); ++s) {
      const UniqueRowsBatch::Slot& slot = batch.slots[s];
      key_first_[s] = next[slot.table];
      next[slot.table] += slot.index.size();
      if (!slot.index.empty()) {
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpyAsync(index_.data() + key_first_[s], slot.index.data(),
                            slot.index.size() * sizeof(int32_t),
                            cudaMemcpyHostToDevice, stream_),
            "copying the keys' rows to the device"));
      }
      RETURN_IF_ERROR(UploadSpan(slot.offsets, offsets_[s], "bag offsets"));
      RETURN_IF_ERROR(UploadSpan(slot.weights, weights_[s], "key weights"));
    }
    return UploadOnes(batch.size);
  }

  // Enqueues slot s's pooling from its table's unique rows.
  void PoolUnique(const UniqueRowsBatch& batch, size_t s) {
    const UniqueRowsBatch::Slot& slot = batch.slots[s];
    LaunchPoolUniqueBags(
        spec_.slots[s] == Pooling::kMean, table_rows_[slot.table].data(),
        index_.data() + key_first_[s],
        slot.weights.empty() ? nullptr : weights_[s].data(), offsets_[s].data(),
        batch.size, layout_.z0_dim, static_cast<int>(s), layout_.num_features,
        features_.data(), stream_);
  }

  const ModelSpec spec_;
  const ModelLayout layout_;
  const ModelOptions options_;
  cudaStream_t stream_ = nullptr;
  // TrainStepOnUniqueRows: the unique-row gradients are on the host.
  cudaEvent_t gradients_copied_ = nullptr;
  cublasHandle_t cublas_ = nullptr;

  DeviceArray<float> parameters_, gradients_;
  std::vector<DeviceArray<float>> bottom_activations_, top_activations_;
  DeviceArray<float> dense_, labels_, ones_;
  std::vector<DeviceArray<float>> rows_;
  std::vector<DeviceArray<int32_t>> offsets_;
  std::vector<DeviceArray<float>> row_gradients_;
  DeviceArray<float> features_, interaction_, dinteraction_, dfeatures_;
  // DCN-v2 (kCross): x0 (features_ or z0), each layer's u_l and x_{l+1},
  // dU of the layer walked, Σ_l dx_{l+1} ⊙ u_l.
  const float* cross_x0_ = nullptr;
  std::vector<DeviceArray<float>> cross_products_, cross_outputs_;
  DeviceArray<float> cross_dproduct_, cross_dx0_;
  DeviceArray<float> losses_, delta_, scratch_;
  // A UniqueRowsBatch: per table its unique rows and their gradients; per
  // key (all tables' keys, table after table) its row, its position, both
  // sorted by row, and where its gradient comes from (KeySources); the
  // sort's scratch; per slot its weights.
  std::vector<DeviceArray<float>> table_rows_, table_gradients_;
  DeviceArray<int32_t> index_, positions_, sorted_index_, sorted_positions_,
      key_source_;
  DeviceArray<float> key_by_, key_unpool_;
  DeviceArray<char> sort_scratch_;
  std::vector<DeviceArray<float>> weights_;
  std::vector<size_t> key_first_, table_first_, table_keys_;
  // The top MLP's input of the current batch: the interaction, or z0
  // when there are no slots.
  const float* top_input_ = nullptr;
  int last_batch_size_ = 0;
  std::vector<float> host_parameters_, host_gradients_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(
    const ModelSpec& spec, const ModelOptions& options) {
  if (absl::Status s = ValidateModelSpec(spec); !s.ok()) return s;
  return CudaModel::Create(spec, options);
}

}  // namespace embedps::dense
