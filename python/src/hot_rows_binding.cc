// _HotRows: the hot-row tier of an embedps.torch.EmbeddingBagCollection
// (docs/architecture.md "Hot rows"): worker::HotRows — the tier ps_worker
// keeps, with the servers' own optimizer code — over the module's tables,
// and the client calls that choose, read and write back its rows. When
// each happens is the module's (embedps/torch.py); every array is checked
// here before it is used.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/status_macros.h"
#include "dense/collective/communicator.h"
#include "embedding/table_spec.h"
#include "python/src/bindings.h"
#include "python/src/py_common.h"
#include "server/table_config.h"
#include "worker/hot_rows.h"

namespace embedps::python {
namespace {

using client::Client;
using client::TableHandle;

// A dense::Communicator over a Python object with rank, world_size and the
// methods all_gather(a) -> world_size × len(a) values, all_reduce(a) -> a
// summed, broadcast(a, root) -> root's a, barrier() (embedps/torch.py's
// over torch.distributed), each on 1-D float32 numpy arrays. Called
// without the GIL: takes it for each collective. A Python exception
// becomes ABORTED with its text.
class PythonCommunicator : public dense::Communicator {
 public:
  explicit PythonCommunicator(py::object collectives)
      : collectives_(std::move(collectives)),
        rank_(collectives_.attr("rank").cast<int>()),
        world_size_(collectives_.attr("world_size").cast<int>()) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool buffers_on_device() const override { return false; }

  absl::Status AllReduce(absl::Span<float> buffer,
                         dense::ReduceOp op) override {
    RETURN_IF_ERROR(Call("all_reduce", buffer, buffer.size(), {}, buffer));
    if (op == dense::ReduceOp::kMean) {
      for (float& v : buffer) v /= static_cast<float>(world_size_);
    }
    return absl::OkStatus();
  }
  absl::Status Broadcast(absl::Span<float> buffer, int root) override {
    RETURN_IF_ERROR(dense::CheckBroadcastRoot(root, world_size_));
    return Call("broadcast", buffer, buffer.size(), py::int_(root), buffer);
  }
  absl::Status AllGather(absl::Span<const float> input,
                         absl::Span<float> output) override {
    RETURN_IF_ERROR(
        dense::CheckAllGatherSizes(input.size(), output.size(), world_size_));
    return Call("all_gather", input, output.size(), {}, output);
  }
  absl::Status Barrier() override {
    py::gil_scoped_acquire gil;
    try {
      collectives_.attr("barrier")();
    } catch (const py::error_already_set& e) {
      return absl::AbortedError(absl::StrCat("barrier: ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  // collectives.<method>(input[, extra]) into `output` (`expected` floats).
  absl::Status Call(const char* method, absl::Span<const float> input,
                    size_t expected, py::object extra,
                    absl::Span<float> output) {
    py::gil_scoped_acquire gil;
    try {
      py::array values =
          NewArray({static_cast<py::ssize_t>(input.size())}, "float32");
      if (!input.empty()) {
        std::memcpy(Data<float>(values), input.data(),
                    input.size() * sizeof(float));
      }
      py::object result = extra ? collectives_.attr(method)(values, extra)
                                : collectives_.attr(method)(values);
      const absl::Span<const float> got =
          FloatsOf(result, expected, 1, method, /*flat_ok=*/true);
      if (!got.empty()) {
        std::memcpy(output.data(), got.data(), expected * sizeof(float));
      }
    } catch (const py::error_already_set& e) {
      return absl::AbortedError(absl::StrCat(method, ": ", e.what()));
    } catch (const std::exception& e) {
      return absl::AbortedError(absl::StrCat(method, ": ", e.what()));
    }
    return absl::OkStatus();
  }

  py::object collectives_;
  const int rank_;
  const int world_size_;
};

template <typename T>
absl::Span<const T> Typed(const py::handle& handle, const char* dtype,
                          absl::string_view name) {
  if (!py::isinstance<py::array>(handle)) {
    throw py::type_error(absl::StrCat(name, " must be a numpy array"));
  }
  py::array array = py::reinterpret_borrow<py::array>(handle);
  if (py::str(array.attr("dtype")).cast<std::string>() != dtype) {
    throw py::type_error(absl::StrCat(name, " must be ", dtype));
  }
  if (array.ndim() != 1 || !(array.flags() & py::array::c_style)) {
    throw py::value_error(
        absl::StrCat(name, " must be a 1-D C-contiguous array"));
  }
  return absl::MakeConstSpan(static_cast<const T*>(array.data()),
                             static_cast<size_t>(array.shape(0)));
}

class PyHotRows {
 public:
  PyHotRows(std::vector<TableHandle> tables, int threads)
      : tables_(std::move(tables)) {
    std::vector<embedding::TableSpec> specs;
    for (const TableHandle& table : tables_) {
      if (table.config == nullptr) {
        throw py::value_error(
            absl::StrCat("table '", table.name, "' carries no config"));
      }
      absl::StatusOr<embedding::TableSpec> spec =
          server::SpecFromConfig(*table.config);
      Check(spec.status());
      eligible_.push_back(spec->eviction.ttl == 0 &&
                          spec->eviction.max_rows == 0);
      specs.push_back(*std::move(spec));
    }
    bytes_per_row_.reserve(specs.size());
    for (const embedding::TableSpec& spec : specs) {
      bytes_per_row_.push_back(worker::HotRows::BytesPerRow(spec));
    }
    tier_ = std::make_unique<worker::HotRows>(specs, threads);
  }

  ~PyHotRows() {
    if (!applying_.valid()) return;
    if (InForkedChild()) {
      // The update's thread was the parent's: waiting would never end,
      // and neither would the future's own destructor.
      new std::future<absl::Status>(std::move(applying_));
      return;
    }
    py::gil_scoped_release release;
    applying_.wait();
  }

  bool eligible(int t) const { return eligible_[Index(t)]; }
  size_t bytes_per_row(int t) const { return bytes_per_row_[Index(t)]; }
  size_t size(int t) const { return tier_->keys(Index(t)).size(); }

  // The `count` keys of table t pulled most (HotKeys over every shard).
  py::array Choose(const py::handle& client, int t, uint32_t count) {
    Client& native = NativeClient(client);
    absl::StatusOr<std::vector<Client::HotKey>> hot;
    {
      NetworkCall release;
      hot = native.HotKeys(tables_[Index(t)], count);
    }
    Check(hot.status());
    py::array keys =
        NewArray({static_cast<py::ssize_t>(hot->size())}, "uint64");
    for (size_t i = 0; i < hot->size(); ++i) {
      Data<uint64_t>(keys)[i] = (*hot)[i].key;
    }
    return keys;
  }

  // Table t holds the rows of `keys` (distinct), read with their optimizer
  // state as a Pull of `step` would see them; keys without a row (erased
  // since they were chosen) are left out. Returns the rows held.
  size_t Load(const py::handle& client, int t, const py::handle& keys_arg,
              uint64_t step) {
    Wait();
    Client& native = NativeClient(client);
    const int i = Index(t);
    const absl::Span<const uint64_t> keys = KeysOf(keys_arg);
    const size_t record_bytes = tier_->record_bytes(i);
    std::vector<char> records(keys.size() * record_bytes);
    std::unique_ptr<bool[]> found(new bool[keys.size()]());
    absl::Status status;
    {
      NetworkCall release;
      status = native.ReadRows(tables_[i], keys, step, absl::MakeSpan(records),
                               absl::MakeSpan(found.get(), keys.size()));
    }
    Check(status);
    std::vector<uint64_t> kept;
    kept.reserve(keys.size());
    for (size_t k = 0; k < keys.size(); ++k) {
      if (!found[k]) continue;
      std::memmove(records.data() + kept.size() * record_bytes,
                   records.data() + k * record_bytes, record_bytes);
      kept.push_back(keys[k]);
    }
    records.resize(kept.size() * record_bytes);
    const size_t held = kept.size();
    Check(tier_->Assign(i, std::move(kept), records));
    return held;
  }

  // Table t holds no row.
  void Clear(int t) {
    Wait();
    Check(tier_->Assign(Index(t), {}, {}));
  }

  // Writes the rows table t used since the last write-back to their shards
  // at `step`; their counts start over. Returns the rows not written (erased
  // on their shard since they were read).
  uint64_t WriteBack(const py::handle& client, int t, uint64_t step) {
    Wait();
    Client& native = NativeClient(client);
    const int i = Index(t);
    std::vector<uint64_t> keys;
    std::vector<char> records;
    tier_->UsedRecords(i, keys, records);
    if (keys.empty()) return 0;
    std::unique_ptr<bool[]> written(new bool[keys.size()]());
    absl::Status status;
    {
      NetworkCall release;
      status = native.WriteRows(tables_[i], keys, records, step,
                                absl::MakeSpan(written.get(), keys.size()));
    }
    if (!status.ok()) {
      RaiseStatus(absl::Status(
          status.code(),
          absl::StrCat("writing the hot rows of table '", tables_[i].name,
                       "' back at step ", step, ": ", status.message())));
    }
    tier_->ClearCounts(i);
    uint64_t lost = 0;
    for (size_t k = 0; k < keys.size(); ++k) lost += written[k] ? 0 : 1;
    return lost;
  }

  // None when no key of `unique` (a step's distinct keys of table t) is
  // held; else (cold keys, their positions in unique, the held keys'
  // positions, their slots), each part in unique's order.
  py::object Split(int t, const py::handle& unique_arg) const {
    const int i = Index(t);
    const absl::Span<const uint64_t> unique = KeysOf(unique_arg, "unique");
    std::vector<uint64_t> keys(unique.begin(), unique.end());
    std::vector<int32_t> remap, slots;
    const size_t cold = tier_->Split(i, keys, remap, slots);
    if (slots.empty()) return py::none();
    py::array cold_keys = NewArray({static_cast<py::ssize_t>(cold)}, "uint64");
    py::array cold_positions =
        NewArray({static_cast<py::ssize_t>(cold)}, "int64");
    py::array hot_positions =
        NewArray({static_cast<py::ssize_t>(slots.size())}, "int64");
    py::array hot_slots =
        NewArray({static_cast<py::ssize_t>(slots.size())}, "int32");
    if (cold > 0) {
      std::memcpy(Data<uint64_t>(cold_keys), keys.data(),
                  cold * sizeof(uint64_t));
    }
    std::memcpy(Data<int32_t>(hot_slots), slots.data(),
                slots.size() * sizeof(int32_t));
    for (size_t k = 0; k < remap.size(); ++k) {
      const size_t to = static_cast<size_t>(remap[k]);
      if (to < cold) {
        Data<int64_t>(cold_positions)[to] = static_cast<int64_t>(k);
      } else {
        Data<int64_t>(hot_positions)[to - cold] = static_cast<int64_t>(k);
      }
    }
    return py::make_tuple(cold_keys, cold_positions, hot_positions, hot_slots);
  }

  // A step's rows of table t in its distinct keys' order: row
  // cold_positions[j] is pulled[j], row hot_positions[j] the tier's row of
  // hot_slots[j] (Split's parts).
  py::array Assemble(int t, const py::handle& pulled_arg,
                     const py::handle& cold_positions_arg,
                     const py::handle& hot_positions_arg,
                     const py::handle& hot_slots_arg) {
    const int i = Index(t);
    const absl::Span<const int64_t> cold_positions =
        Typed<int64_t>(cold_positions_arg, "int64", "cold_positions");
    const absl::Span<const int64_t> hot_positions =
        Typed<int64_t>(hot_positions_arg, "int64", "hot_positions");
    const absl::Span<const int32_t> slots =
        Typed<int32_t>(hot_slots_arg, "int32", "hot_slots");
    if (hot_positions.size() != slots.size()) {
      throw py::value_error(absl::StrCat(slots.size(), " hot slots but ",
                                         hot_positions.size(), " positions"));
    }
    const size_t dim = static_cast<size_t>(tables_[i].dim);
    const absl::Span<const float> pulled =
        FloatsOf(pulled_arg, cold_positions.size(), dim, "pulled");
    Wait();
    CheckSlots(i, slots, /*distinct=*/false);
    const size_t rows = cold_positions.size() + hot_positions.size();
    // Every row written once: the positions are a permutation of [0, rows).
    seen_.assign(rows, false);
    for (const absl::Span<const int64_t>& part :
         {cold_positions, hot_positions}) {
      for (const int64_t p : part) {
        if (p < 0 || static_cast<size_t>(p) >= rows || seen_[p]) {
          throw py::value_error(absl::StrCat("positions must cover each of ",
                                             rows, " rows once; ", p,
                                             " is outside or repeats"));
        }
        seen_[p] = true;
      }
    }
    py::array out = NewArray(
        {static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(dim)},
        "float32");
    float* target = Data<float>(out);
    for (size_t j = 0; j < cold_positions.size(); ++j) {
      std::memcpy(target + cold_positions[j] * dim, pulled.data() + j * dim,
                  dim * sizeof(float));
    }
    gathered_.resize(slots.size() * dim);
    tier_->Gather(i, slots, absl::MakeSpan(gathered_));
    for (size_t j = 0; j < slots.size(); ++j) {
      std::memcpy(target + hot_positions[j] * dim, gathered_.data() + j * dim,
                  dim * sizeof(float));
    }
    return out;
  }

  // One step's gradient sums of every table (slots[t]: distinct int32
  // slots, grads[t]: one float32 row of dim per slot) through
  // HotRows::Apply; `collectives` None for one worker. One worker's update
  // runs on a thread of its own (as ps_worker's): every other call but
  // split waits for it first, and raises its error.
  void Apply(const std::vector<py::object>& slots_args,
             const std::vector<py::object>& grads_args,
             const py::object& collectives) {
    Wait();
    const size_t n = tables_.size();
    if (slots_args.size() != n || grads_args.size() != n) {
      throw py::value_error(absl::StrCat(
          "one slots and one grads array per "
          "table (",
          n, "), got ", slots_args.size(), " and ", grads_args.size()));
    }
    std::vector<absl::Span<const int32_t>> slots(n);
    std::vector<absl::Span<const float>> grads(n);
    for (size_t t = 0; t < n; ++t) {
      slots[t] = Typed<int32_t>(slots_args[t], "int32", "slots");
      CheckSlots(static_cast<int>(t), slots[t], /*distinct=*/true);
      grads[t] =
          FloatsOf(grads_args[t], slots[t].size(), tables_[t].dim, "grads");
    }
    if (collectives.is_none()) {
      // The arrays stay referenced until the thread is done with them.
      held_ = {slots_args, grads_args};
      applying_ = std::async(std::launch::async, [this, slots, grads] {
        return tier_->Apply(slots, grads, nullptr);
      });
      return;
    }
    PythonCommunicator communicator(collectives);
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = tier_->Apply(slots, grads, &communicator);
    }
    Check(status);
  }

  // Waits for an update in flight; raises its error.
  void Wait() {
    if (!applying_.valid()) return;
    if (InForkedChild()) {
      RaiseStatus(absl::FailedPreconditionError(
          "this hot-row tier was updating its rows on a thread of the "
          "process it was forked from: use the module in that process "
          "(DataLoader workers should only load data)"));
    }
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = applying_.get();
    }
    held_.clear();
    Check(status);
  }

 private:
  int Index(int t) const {
    if (t < 0 || static_cast<size_t>(t) >= tables_.size()) {
      throw py::index_error(
          absl::StrCat("table index ", t, " of ", tables_.size()));
    }
    return t;
  }

  void CheckSlots(int t, absl::Span<const int32_t> slots, bool distinct) {
    const size_t held = tier_->keys(t).size();
    if (distinct) seen_.assign(held, false);
    for (const int32_t slot : slots) {
      if (slot < 0 || static_cast<size_t>(slot) >= held) {
        throw py::value_error(absl::StrCat("slot ", slot, " of table '",
                                           tables_[t].name, "': it holds ",
                                           held, " rows"));
      }
      if (!distinct) continue;
      if (seen_[slot]) {
        throw py::value_error(absl::StrCat("slot ", slot, " repeats"));
      }
      seen_[slot] = true;
    }
  }

  const std::vector<TableHandle> tables_;
  std::vector<bool> eligible_;
  std::vector<size_t> bytes_per_row_;
  std::unique_ptr<worker::HotRows> tier_;
  std::vector<bool> seen_;
  std::vector<float> gathered_;
  // One worker's update in flight, and the arrays it reads.
  std::future<absl::Status> applying_;
  std::vector<std::vector<py::object>> held_;
};

}  // namespace

void BindHotRows(py::module_& m) {
  py::class_<PyHotRows>(m, "_HotRows",
                        "embedps.torch's hot-row tier (worker::HotRows)")
      .def(py::init<std::vector<TableHandle>, int>(), py::arg("tables"),
           py::arg("threads"))
      .def("eligible", &PyHotRows::eligible, py::arg("t"))
      .def("bytes_per_row", &PyHotRows::bytes_per_row, py::arg("t"))
      .def("size", &PyHotRows::size, py::arg("t"))
      .def("choose", &PyHotRows::Choose, py::arg("client"), py::arg("t"),
           py::arg("count"))
      .def("load", &PyHotRows::Load, py::arg("client"), py::arg("t"),
           py::arg("keys"), py::arg("step"))
      .def("clear", &PyHotRows::Clear, py::arg("t"))
      .def("write_back", &PyHotRows::WriteBack, py::arg("client"), py::arg("t"),
           py::arg("step"))
      .def("split", &PyHotRows::Split, py::arg("t"), py::arg("unique"))
      .def("assemble", &PyHotRows::Assemble, py::arg("t"), py::arg("pulled"),
           py::arg("cold_positions"), py::arg("hot_positions"),
           py::arg("hot_slots"))
      .def("apply", &PyHotRows::Apply, py::arg("slots"), py::arg("grads"),
           py::arg("collectives"))
      .def("wait", &PyHotRows::Wait);
}

}  // namespace embedps::python
