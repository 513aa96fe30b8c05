// SyntheticTask: an endless, deterministic binary classification task for
// dense models — sample i has N(0, 1) features drawn from a hash of
// (seed, i) and a label drawn from sigmoid(teacher(x)), where the teacher
// is a random MLP (model_spec.h) whose logits are scaled by
// `teacher_scale`. Any process can produce any slice of the data without
// files, which is what data-parallel tests and benchmarks need; the true
// click probabilities give the Bayes-optimal loss.
//
// Thread safety: one thread at a time (the teacher keeps scratch buffers).
#ifndef EMBEDPS_DENSE_SYNTHETIC_TASK_H_
#define EMBEDPS_DENSE_SYNTHETIC_TASK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dense/cpu_model.h"
#include "dense/eval_metrics.h"

namespace embedps::dense {

struct SyntheticTaskSpec {
  // Features per sample. Default: 32.
  int input_dim = 32;
  // Hidden widths of the teacher MLP. Default: {16}.
  std::vector<int> teacher_hidden = {16};
  // Multiplies the teacher's logits: larger is an easier task (labels
  // closer to deterministic). Default: 4.
  double teacher_scale = 4.0;
  // Seeds the teacher and the samples. Default: 1.
  uint64_t seed = 1;
};

class SyntheticTask {
 public:
  // INVALID_ARGUMENT for a bad spec.
  static absl::StatusOr<std::unique_ptr<SyntheticTask>> Create(
      const SyntheticTaskSpec& spec);

  int input_dim() const { return spec_.input_dim; }

  // Samples [first, first + count): features into `dense` (count ×
  // input_dim), labels into `labels` (count) and, when not empty, the
  // teacher's logits into `true_logits` (count).
  // REQUIRES: the spans have those sizes.
  void Fill(int64_t first, int count, absl::Span<float> dense,
            absl::Span<float> labels, absl::Span<float> true_logits = {});

 private:
  SyntheticTask(const SyntheticTaskSpec& spec,
                std::unique_ptr<CpuModel<float>> teacher)
      : spec_(spec), teacher_(std::move(teacher)) {}

  const SyntheticTaskSpec spec_;
  std::unique_ptr<CpuModel<float>> teacher_;
  std::vector<float> logits_;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_SYNTHETIC_TASK_H_
