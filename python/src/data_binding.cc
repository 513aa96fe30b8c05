// Data helpers for Python training loops: the Criteo reader ps_worker uses
// (data/criteo_reader.h), its feature keys, the batch deduplication the
// torch module needs, and the evaluation metrics ps_worker reports.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "data/criteo_reader.h"
#include "dense/eval_metrics.h"
#include "python/src/bindings.h"
#include "python/src/py_common.h"

namespace embedps::python {
namespace {

class PyCriteoReader {
 public:
  PyCriteoReader(std::vector<std::string> files, int batch_size,
                 int worker_index, int num_workers, int epochs,
                 bool include_tail, bool fatal_bad_lines) {
    data::CriteoReaderOptions options;
    options.files = std::move(files);
    options.batch_size = batch_size;
    options.worker_index = worker_index;
    options.num_workers = num_workers;
    options.epochs = epochs;
    options.include_tail = include_tail;
    options.fatal_bad_lines = fatal_bad_lines;
    absl::StatusOr<std::unique_ptr<data::CriteoReader>> reader;
    {
      py::gil_scoped_release release;
      reader = data::CriteoReader::Open(options);
    }
    Check(reader.status());
    reader_ = std::move(*reader);
  }

  int64_t steps_per_epoch() const { return reader_->steps_per_epoch(); }
  int64_t total_steps() const { return reader_->total_steps(); }

  // (step, labels (n,), dense (n, 13), keys (n, 26) uint64).
  py::tuple Next() {
    absl::StatusOr<std::optional<data::CriteoBatch>> batch;
    {
      py::gil_scoped_release release;
      batch = reader_->Next();
    }
    Check(batch.status());
    if (!batch->has_value()) throw py::stop_iteration();
    const data::CriteoBatch& b = **batch;
    const py::ssize_t n = b.size;
    py::array labels = NewArray({n}, "float32");
    py::array dense = NewArray({n, py::ssize_t{data::kCriteoDense}}, "float32");
    py::array keys = NewArray({n, py::ssize_t{data::kCriteoSlots}}, "uint64");
    std::copy(b.labels.begin(), b.labels.end(), Data<float>(labels));
    std::copy(b.dense.begin(), b.dense.end(), Data<float>(dense));
    std::copy(b.keys.begin(), b.keys.end(), Data<uint64_t>(keys));
    return py::make_tuple(b.step, labels, dense, keys);
  }

 private:
  std::unique_ptr<data::CriteoReader> reader_;
};

// (unique keys in first-seen order, index of each key in them).
py::tuple UniqueInverse(const py::object& keys_arg) {
  const absl::Span<const uint64_t> keys = KeysOf(keys_arg);
  py::array inverse =
      NewArray({static_cast<py::ssize_t>(keys.size())}, "int64");
  std::vector<uint64_t> unique;
  {
    int64_t* index = Data<int64_t>(inverse);
    py::gil_scoped_release release;
    absl::flat_hash_map<uint64_t, int64_t> seen;
    seen.reserve(keys.size());
    unique.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, added] =
          seen.try_emplace(keys[i], static_cast<int64_t>(unique.size()));
      if (added) unique.push_back(keys[i]);
      index[i] = it->second;
    }
  }
  py::array out = NewArray({static_cast<py::ssize_t>(unique.size())}, "uint64");
  std::copy(unique.begin(), unique.end(), Data<uint64_t>(out));
  return py::make_tuple(out, inverse);
}

absl::Span<const float> Scores(const py::handle& array, size_t n,
                               absl::string_view name) {
  return FloatsOf(array, n, 1, name, /*flat_ok=*/true);
}

// ValueError unless every label is 0 or 1 (scores passed as labels are
// not).
void CheckLabels(absl::Span<const float> labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      throw py::value_error(absl::StrCat("labels must be 0 or 1; labels[", i,
                                         "] is ", labels[i],
                                         " (scores passed as labels?)"));
    }
  }
}

size_t LengthOf(const py::handle& object) {
  if (!py::isinstance<py::array>(object)) {
    throw py::type_error("scores and labels must be numpy float32 arrays");
  }
  return static_cast<size_t>(py::reinterpret_borrow<py::array>(object).size());
}

}  // namespace

void BindData(py::module_& m) {
  py::class_<PyCriteoReader>(m, "CriteoReader", R"(Criteo TSV files as
training batches, parsed on a C++ thread: the reader ps_worker uses.

CriteoReader(files, batch_size=512, worker_index=0, num_workers=1,
epochs=1, include_tail=False, fatal_bad_lines=False). Iterating yields
(step, labels, dense, keys): float32 (n,), float32 (n, 13) =
log(1 + max(I, 0)), uint64 (n, 26) feature keys. Worker r of W reads the
r-th batch of every W; every worker gets the same number of steps.)")
      .def(py::init<std::vector<std::string>, int, int, int, int, bool, bool>(),
           py::arg("files"), py::kw_only(), py::arg("batch_size") = 512,
           py::arg("worker_index") = 0, py::arg("num_workers") = 1,
           py::arg("epochs") = 1, py::arg("include_tail") = false,
           py::arg("fatal_bad_lines") = false)
      .def_property_readonly("steps_per_epoch",
                             &PyCriteoReader::steps_per_epoch)
      .def_property_readonly("total_steps", &PyCriteoReader::total_steps)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyCriteoReader::Next);

  m.def("feature_key", &data::FeatureKey, py::arg("slot"), py::arg("value"),
        "The embedding key of categorical value `value` in slot `slot`.");
  m.def("missing_feature_key", &data::MissingFeatureKey, py::arg("slot"),
        "The key of an empty value in slot `slot`.");
  m.def("unique_inverse", &UniqueInverse, py::arg("keys"),
        "(unique keys in first-seen order, int64 index of every key in "
        "them): keys == unique[inverse].");
  // Keyword-only: sklearn takes (y_true, y_score), the reverse of the
  // order these once had; swapped, an AUC is silently wrong.
  m.def(
      "roc_auc",
      [](const py::object& labels, const py::object& scores) {
        const size_t n = LengthOf(scores);
        const absl::Span<const float> y = Scores(labels, n, "labels");
        CheckLabels(y);
        return dense::RocAuc(Scores(scores, n, "scores"), y);
      },
      py::kw_only(), py::arg("labels"), py::arg("scores"),
      "roc_auc(*, labels, scores): ROC AUC of float32 scores for 0/1 "
      "float32 labels (as ps_worker computes it). Keyword-only, so that "
      "neither order can be mistaken for the other.");
  m.def(
      "mean_log_loss",
      [](const py::object& labels, const py::object& logits) {
        const size_t n = LengthOf(logits);
        const absl::Span<const float> y = Scores(labels, n, "labels");
        CheckLabels(y);
        return dense::MeanLogLoss(Scores(logits, n, "logits"), y);
      },
      py::kw_only(), py::arg("labels"), py::arg("logits"),
      "mean_log_loss(*, labels, logits): mean binary cross-entropy of "
      "float32 logits for 0/1 labels. Keyword-only.");
}

}  // namespace embedps::python
