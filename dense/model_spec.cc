#include "dense/model_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hash_random.h"

namespace embedps::dense {
namespace {

absl::Status CheckWidths(const std::vector<int>& widths,
                         absl::string_view field) {
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model field '", field, "[", i, "]' must be > 0, got ", widths[i]));
    }
  }
  return absl::OkStatus();
}

// Appends the layers in -> widths... (ReLU after each unless the last and
// !relu_on_last) and returns the output width.
int AppendLayers(int in, const std::vector<int>& widths, bool relu_on_last,
                 size_t* offset, std::vector<LayerShape>* layers) {
  for (size_t i = 0; i < widths.size(); ++i) {
    LayerShape layer;
    layer.in = in;
    layer.out = widths[i];
    layer.weight_offset = *offset;
    layer.bias_offset = *offset + static_cast<size_t>(layer.in) * layer.out;
    layer.relu = i + 1 < widths.size() || relu_on_last;
    *offset = layer.bias_offset + layer.out;
    layers->push_back(layer);
    in = widths[i];
  }
  return in;
}

}  // namespace

ModelSpec MlpModelSpec(int input_dim, std::vector<int> hidden, uint64_t seed) {
  ModelSpec spec;
  spec.num_dense = input_dim;
  spec.top = std::move(hidden);
  spec.seed = seed;
  return spec;
}

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  if (spec.num_dense <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model field 'num_dense' must be > 0, got ", spec.num_dense));
  }
  if (absl::Status s = CheckWidths(spec.bottom, "bottom"); !s.ok()) return s;
  if (absl::Status s = CheckWidths(spec.top, "top"); !s.ok()) return s;
  const int z0_dim = spec.bottom.empty() ? spec.num_dense : spec.bottom.back();
  const bool cross = spec.interaction == Interaction::kCross;
  if (!spec.slots.empty() && spec.embedding_dim != z0_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model field 'embedding_dim' (", spec.embedding_dim,
        ") must equal the bottom MLP's output width (", z0_dim, ") so that ",
        cross ? "the cross network takes the features at one width"
              : "the dot-product interaction is defined"));
  }
  if (cross && (spec.cross_layers < 1 || spec.cross_layers > kMaxCrossLayers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model field 'cross_layers' must be in [1, ", kMaxCrossLayers,
        "] with the cross interaction, got ", spec.cross_layers));
  }
  if (!cross && spec.cross_layers != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model field 'cross_layers' (", spec.cross_layers,
                     ") is for the cross interaction; the dot-product one "
                     "has none"));
  }
  return absl::OkStatus();
}

std::string DescribeModelSpec(const ModelSpec& spec) {
  std::string slots;
  for (size_t i = 0; i < spec.slots.size(); ++i) {
    absl::StrAppend(&slots, i == 0 ? "" : ",",
                    spec.slots[i] == Pooling::kSum ? "sum" : "mean");
  }
  return absl::StrCat("dense=", spec.num_dense,
                      " bottom=", absl::StrJoin(spec.bottom, ","),
                      " dim=", spec.embedding_dim, " slots=", slots,
                      " top=", absl::StrJoin(spec.top, ","),
                      spec.interaction == Interaction::kCross
                          ? absl::StrCat(" cross=", spec.cross_layers)
                          : "");
}

ModelLayout LayoutOf(const ModelSpec& spec) {
  ModelLayout layout;
  size_t offset = 0;
  layout.z0_dim = AppendLayers(spec.num_dense, spec.bottom,
                               /*relu_on_last=*/true, &offset, &layout.bottom);
  layout.num_features = 1 + static_cast<int>(spec.slots.size());
  if (spec.interaction == Interaction::kCross) {
    layout.interaction_dim = layout.num_features * layout.z0_dim;
    AppendLayers(layout.interaction_dim,
                 std::vector<int>(static_cast<size_t>(spec.cross_layers),
                                  layout.interaction_dim),
                 /*relu_on_last=*/false, &offset, &layout.cross);
    for (LayerShape& layer : layout.cross) layer.relu = false;
  } else {
    layout.interaction_dim =
        layout.z0_dim + layout.num_features * (layout.num_features - 1) / 2;
  }
  std::vector<int> top = spec.top;
  top.push_back(1);
  AppendLayers(layout.interaction_dim, top, /*relu_on_last=*/false, &offset,
               &layout.top);
  layout.num_parameters = offset;
  return layout;
}

template <typename T>
void InitializeParameters(const ModelSpec& spec, const ModelLayout& layout,
                          absl::Span<T> parameters) {
  std::fill(parameters.begin(), parameters.end(), T{0});
  for (const auto* layers : {&layout.bottom, &layout.cross, &layout.top}) {
    for (const LayerShape& layer : *layers) {
      const double limit = std::sqrt(6.0 / (layer.in + layer.out));
      const size_t n = static_cast<size_t>(layer.in) * layer.out;
      for (size_t i = 0; i < n; ++i) {
        const size_t index = layer.weight_offset + i;
        parameters[index] =
            static_cast<T>(limit * (2.0 * HashUnit(spec.seed, index) - 1.0));
      }
    }
  }
}

template <typename T>
absl::Status ValidateBatch(const ModelSpec& spec, const Batch<T>& batch,
                           bool with_labels) {
  if (batch.size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size must be > 0, got ", batch.size));
  }
  const size_t n = static_cast<size_t>(batch.size);
  if (batch.dense.size() != n * spec.num_dense) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", n, " samples with ", spec.num_dense,
                     " dense features needs ", n * spec.num_dense,
                     " values, got ", batch.dense.size()));
  }
  if (batch.slots.size() != spec.slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", spec.slots.size(),
                     " sparse slots, the batch ", batch.slots.size()));
  }
  for (size_t s = 0; s < batch.slots.size(); ++s) {
    const SlotBags<T>& bags = batch.slots[s];
    if (bags.offsets.size() != n + 1 || bags.offsets[0] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, ": offsets need ", n + 1,
                       " entries starting at 0, got ", bags.offsets.size()));
    }
    for (size_t b = 0; b < n; ++b) {
      if (bags.offsets[b + 1] < bags.offsets[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat("slot ", s, ": offsets decrease at sample ", b, " (",
                         bags.offsets[b], " then ", bags.offsets[b + 1], ")"));
      }
    }
    const size_t want =
        static_cast<size_t>(bags.offsets[n]) * spec.embedding_dim;
    if (bags.rows.size() != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, ": ", bags.offsets[n], " rows of dim ",
                       spec.embedding_dim, " need ", want, " values, got ",
                       bags.rows.size()));
    }
  }
  if (!with_labels) return absl::OkStatus();
  if (batch.labels.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch of ", n, " samples has ", batch.labels.size(), " labels"));
  }
  for (size_t i = 0; i < n; ++i) {
    const T y = batch.labels[i];
    if (!(y >= T{0} && y <= T{1})) {
      return absl::InvalidArgumentError(
          absl::StrCat("label of sample ", i, " is ", static_cast<double>(y),
                       ", outside [0, 1]"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status ValidateRowGradients(const Batch<T>& batch,
                                  absl::Span<const absl::Span<T>> gradients) {
  if (gradients.size() != batch.slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("need one row-gradient buffer per slot (",
                     batch.slots.size(), "), got ", gradients.size()));
  }
  for (size_t s = 0; s < gradients.size(); ++s) {
    if (gradients[s].size() != batch.slots[s].rows.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot ", s, ": row-gradient buffer holds ", gradients[s].size(),
          " values, the rows ", batch.slots[s].rows.size()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFlatBufferSize(size_t got, size_t num_parameters,
                                 absl::string_view what) {
  if (got == num_parameters) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " needs ", num_parameters,
                   " values (the model's parameters), got ", got));
}

absl::Status CheckLogitsBufferSize(size_t got, size_t last_batch_size) {
  if (last_batch_size == 0) {
    return absl::FailedPreconditionError("no batch has run yet");
  }
  if (got == last_batch_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the last batch had ", last_batch_size,
                   " samples, got room for ", got, " logits"));
}

double TrainingFlopsPerSample(const ModelSpec& spec, const ModelLayout& layout,
                              double rows_per_bag) {
  double macs = 0;
  for (const auto* layers : {&layout.bottom, &layout.cross, &layout.top}) {
    for (const LayerShape& l : *layers) {
      macs += 3.0 * l.in * l.out;  // forward, weight grad, input grad
    }
  }
  const int f = layout.num_features;
  if (layout.cross.empty()) {
    macs += 3.0 * f * (f - 1) / 2 * layout.z0_dim;  // dots, and both grads
  } else {
    // x0 ⊙ u + x: forward; the gradients by u, by x0 and the sum of them.
    macs += 4.0 * layout.cross.size() * layout.interaction_dim;
  }
  double flops = 2 * macs;
  // Pooling adds and the row-gradient writes.
  flops += 2.0 * spec.slots.size() * rows_per_bag * spec.embedding_dim;
  return flops;
}

template void InitializeParameters<float>(const ModelSpec&, const ModelLayout&,
                                          absl::Span<float>);
template void InitializeParameters<double>(const ModelSpec&, const ModelLayout&,
                                           absl::Span<double>);
template absl::Status ValidateBatch<float>(const ModelSpec&,
                                           const Batch<float>&, bool);
template absl::Status ValidateBatch<double>(const ModelSpec&,
                                            const Batch<double>&, bool);
template absl::Status ValidateRowGradients<float>(
    const Batch<float>&, absl::Span<const absl::Span<float>>);
template absl::Status ValidateRowGradients<double>(
    const Batch<double>&, absl::Span<const absl::Span<double>>);

}  // namespace embedps::dense
