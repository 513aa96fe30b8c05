#include "dense/model.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "dense/blas.h"
#include "dense/cpu_model.h"
#include "dense/cuda_model.h"
#include "dense/dense_model.pb.h"

namespace embedps::dense {
namespace {

constexpr uint32_t kFormatVersion = 1;

absl::Status CopyLastLogits(absl::Span<const float> logits,
                            absl::Span<float> host) {
  RETURN_IF_ERROR(CheckLogitsBufferSize(host.size(), logits.size()));
  std::copy(logits.begin(), logits.end(), host.begin());
  return absl::OkStatus();
}

// Model over CpuModel<float>: its buffers are host memory.
class CpuBackendModel final : public Model {
 public:
  explicit CpuBackendModel(std::unique_ptr<CpuModel<float>> model)
      : model_(std::move(model)) {}

  const ModelSpec& spec() const override { return model_->spec(); }
  Backend backend() const override { return Backend::kCpu; }
  size_t num_parameters() const override {
    return model_->layout().num_parameters;
  }
  absl::StatusOr<float> TrainStep(
      const Batch<float>& batch,
      absl::Span<const absl::Span<float>> row_gradients,
      const std::function<void()>& row_gradients_ready) override {
    return model_->TrainStep(batch, row_gradients, /*dense_gradients=*/{},
                             row_gradients_ready);
  }
  absl::Status Predict(const Batch<float>& batch,
                       absl::Span<float> logits) override {
    return model_->Predict(batch, logits);
  }
  absl::Status LastLogits(absl::Span<float> host) override {
    return CopyLastLogits(model_->last_logits(), host);
  }
  absl::Span<float> parameter_buffer() override { return model_->parameters(); }
  absl::Span<float> gradient_buffer() override { return model_->gradients(); }
  absl::Status GetParameters(absl::Span<float> host) override {
    RETURN_IF_ERROR(
        CheckFlatBufferSize(host.size(), num_parameters(), "parameters"));
    std::copy(model_->parameters().begin(), model_->parameters().end(),
              host.begin());
    return absl::OkStatus();
  }
  absl::Status SetParameters(absl::Span<const float> host) override {
    RETURN_IF_ERROR(
        CheckFlatBufferSize(host.size(), num_parameters(), "parameters"));
    std::copy(host.begin(), host.end(), model_->parameters().begin());
    return absl::OkStatus();
  }
  absl::Status GetGradients(absl::Span<float> host) override {
    RETURN_IF_ERROR(
        CheckFlatBufferSize(host.size(), num_parameters(), "gradients"));
    std::copy(model_->gradients().begin(), model_->gradients().end(),
              host.begin());
    return absl::OkStatus();
  }
  absl::Status ApplyOptimizer(DenseOptimizer& optimizer) override {
    return optimizer.Step(model_->parameters(), model_->gradients());
  }
  absl::StatusOr<float> TrainStepOnUniqueRows(
      const UniqueRowsBatch& batch, float gradient_scale,
      absl::Span<const absl::Span<float>> table_gradients,
      const std::function<void()>& ready) override {
    return TrainStepWithHostStages(*this, buffers_, batch, gradient_scale,
                                   table_gradients, ready);
  }
  absl::Status PredictOnUniqueRows(const UniqueRowsBatch& batch,
                                   absl::Span<float> logits) override {
    return PredictWithHostStages(*this, buffers_, batch, logits);
  }

 private:
  HostStageBuffers buffers_;
  std::unique_ptr<CpuModel<float>> model_;
};

}  // namespace

namespace {

// The bags' rows of `batch`, gathered into `buffers.rows`, as a Batch.
absl::StatusOr<Batch<float>> GatherOnHost(Model& model,
                                          HostStageBuffers& buffers,
                                          const UniqueRowsBatch& batch) {
  const int dim = model.spec().embedding_dim;
  Batch<float> out;
  out.size = batch.size;
  out.dense = batch.dense;
  out.labels = batch.labels;
  buffers.rows.resize(batch.slots.size());
  std::vector<absl::Span<float>> rows;
  for (size_t s = 0; s < batch.slots.size(); ++s) {
    const size_t size = batch.slots[s].index.size() * dim;
    if (buffers.rows[s].size() < size) {
      ASSIGN_OR_RETURN(buffers.rows[s], model.NewHostArray(size));
    }
    rows.push_back(buffers.rows[s].span().first(size));
    out.slots.push_back({rows.back(), batch.slots[s].offsets});
  }
  GatherSlotRows(batch, dim, rows, DenseThreads());
  return out;
}

}  // namespace

absl::StatusOr<float> TrainStepWithHostStages(
    Model& model, HostStageBuffers& buffers, const UniqueRowsBatch& batch,
    float gradient_scale, absl::Span<const absl::Span<float>> table_gradients,
    const std::function<void()>& ready) {
  RETURN_IF_ERROR(
      ValidateUniqueRowsBatch(model.spec(), batch, /*with_labels=*/true));
  RETURN_IF_ERROR(ValidateTableGradients(batch, table_gradients));
  ASSIGN_OR_RETURN(const Batch<float> gathered,
                   GatherOnHost(model, buffers, batch));
  const int dim = model.spec().embedding_dim;
  buffers.gradients.resize(batch.slots.size());
  std::vector<absl::Span<float>> gradients;
  std::vector<absl::Span<const float>> summed_from;
  for (size_t s = 0; s < batch.slots.size(); ++s) {
    const size_t size = batch.slots[s].index.size() * dim;
    if (buffers.gradients[s].size() < size) {
      ASSIGN_OR_RETURN(buffers.gradients[s], model.NewHostArray(size));
    }
    gradients.push_back(buffers.gradients[s].span().first(size));
    summed_from.push_back(gradients.back());
  }
  return model.TrainStep(gathered, gradients, [&] {
    SumUniqueRowGradients(batch, dim, summed_from, gradient_scale,
                          table_gradients, DenseThreads());
    if (ready) ready();
  });
}

absl::Status PredictWithHostStages(Model& model, HostStageBuffers& buffers,
                                   const UniqueRowsBatch& batch,
                                   absl::Span<float> logits) {
  RETURN_IF_ERROR(
      ValidateUniqueRowsBatch(model.spec(), batch, /*with_labels=*/false));
  ASSIGN_OR_RETURN(const Batch<float> gathered,
                   GatherOnHost(model, buffers, batch));
  return model.Predict(gathered, logits);
}

absl::StatusOr<Backend> ParseBackend(absl::string_view name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "': use cpu or cuda"));
}

const char* BackendName(Backend backend) {
  return backend == Backend::kCpu ? "cpu" : "cuda";
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(
    const ModelSpec& spec, const ModelOptions& options) {
  if (absl::Status s = ValidateModelSpec(spec); !s.ok()) return s;
  if (options.backend == Backend::kCuda) {
    return CreateCudaModel(spec, options);
  }
  absl::StatusOr<std::unique_ptr<CpuModel<float>>> cpu =
      CpuModel<float>::Create(spec);
  if (!cpu.ok()) return cpu.status();
  return std::unique_ptr<Model>(new CpuBackendModel(std::move(*cpu)));
}

absl::StatusOr<std::string> SerializeParameters(Model& model, int64_t step,
                                                const DenseOptimizer* optimizer,
                                                const InputLayout* input) {
  std::vector<float> values(model.num_parameters());
  if (absl::Status s = model.GetParameters(absl::MakeSpan(values)); !s.ok()) {
    return s;
  }
  DenseParametersFile file;
  file.set_format_version(kFormatVersion);
  file.set_model(DescribeModelSpec(model.spec()));
  file.set_step(step);
  file.set_num_parameters(values.size());
  // The flat layout is little-endian float32; x86-64 and aarch64 store
  // floats that way, so the bytes are copied as they are.
  static_assert(sizeof(float) == 4);
  file.set_parameters(std::string(reinterpret_cast<const char*>(values.data()),
                                  values.size() * sizeof(float)));
  file.set_parameters_crc32(Crc32(file.parameters()));
  if (optimizer != nullptr) {
    absl::StatusOr<std::string> state = optimizer->SaveState();
    if (!state.ok()) return state.status();
    file.set_optimizer_state(*std::move(state));
    file.set_optimizer_state_crc32(Crc32(file.optimizer_state()));
  }
  if (input != nullptr) *file.mutable_input_layout() = *input;
  return file.SerializeAsString();
}

absl::Status SaveParameters(Model& model, int64_t step, const std::string& path,
                            const DenseOptimizer* optimizer,
                            const InputLayout* input) {
  absl::StatusOr<std::string> bytes =
      SerializeParameters(model, step, optimizer, input);
  if (!bytes.ok()) return bytes.status();
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(bytes->data(), bytes->size()) || !out.flush()) {
      return absl::UnavailableError(
          absl::StrCat("cannot write dense parameters to ", temporary, ": ",
                       std::strerror(errno)));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot rename ", temporary, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LoadParameters(const std::string& path, Model& model,
                                       DenseOptimizer* optimizer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("no dense parameters file at ", path));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  return LoadParametersFromBytes(contents.str(), path, model, optimizer);
}

namespace {

// The file in `bytes`, of a format version this build reads.
absl::StatusOr<DenseParametersFile> ParseParametersFile(
    absl::string_view bytes, const std::string& path) {
  DenseParametersFile file;
  if (!file.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError(absl::StrCat("dense parameters file ", path,
                                            " is truncated or not one"));
  }
  if (file.format_version() != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dense parameters file ", path, " has format version ",
        file.format_version(), "; this build reads ", kFormatVersion));
  }
  return file;
}

}  // namespace

absl::StatusOr<InputLayout> ReadInputLayout(absl::string_view bytes,
                                            const std::string& path) {
  ASSIGN_OR_RETURN(DenseParametersFile file, ParseParametersFile(bytes, path));
  return std::move(*file.mutable_input_layout());
}

absl::StatusOr<int64_t> LoadParametersFromBytes(absl::string_view bytes,
                                                const std::string& path,
                                                Model& model,
                                                DenseOptimizer* optimizer) {
  ASSIGN_OR_RETURN(const DenseParametersFile file,
                   ParseParametersFile(bytes, path));
  const std::string shape = DescribeModelSpec(model.spec());
  if (file.model() != shape) {
    return absl::FailedPreconditionError(
        absl::StrCat("dense parameters file ", path, " was written by model '",
                     file.model(), "', not this one ('", shape, "')"));
  }
  if (file.num_parameters() != model.num_parameters() ||
      file.parameters().size() != file.num_parameters() * sizeof(float)) {
    return absl::DataLossError(absl::StrCat(
        "dense parameters file ", path, " holds ", file.parameters().size(),
        " bytes for ", file.num_parameters(), " parameters; the model has ",
        model.num_parameters()));
  }
  if (Crc32(file.parameters()) != file.parameters_crc32()) {
    return absl::DataLossError(absl::StrCat("dense parameters file ", path,
                                            " fails its checksum (corrupt)"));
  }
  if (optimizer != nullptr) {
    if (file.optimizer_state().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "dense parameters file ", path, " holds no optimizer state"));
    }
    if (Crc32(file.optimizer_state()) != file.optimizer_state_crc32()) {
      return absl::DataLossError(
          absl::StrCat("dense parameters file ", path,
                       " fails its optimizer-state checksum (corrupt)"));
    }
    // Checked before anything changes: RestoreState refuses a wrong size
    // without changing the optimizer.
    if (absl::Status s = optimizer->RestoreState(file.optimizer_state());
        !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("dense parameters file ", path, ": ", s.message()));
    }
  }
  std::vector<float> values(model.num_parameters());
  std::memcpy(values.data(), file.parameters().data(),
              file.parameters().size());
  if (absl::Status s = model.SetParameters(values); !s.ok()) return s;
  return file.step();
}

}  // namespace embedps::dense
