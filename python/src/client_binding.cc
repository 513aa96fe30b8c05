// embedps.Client, embedps.Table and embedps.Future: the training client
// (client/client.h) for Python. Network calls run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/text_proto.h"
#include "google/protobuf/util/json_util.h"
#include "python/src/bindings.h"
#include "python/src/py_common.h"

namespace embedps::python {
namespace {

using client::Client;
using client::TableHandle;

const char* ModeName(proto::ConsistencyConfig::Mode mode) {
  switch (mode) {
    case proto::ConsistencyConfig::SYNC:
      return "sync";
    case proto::ConsistencyConfig::SSP:
      return "ssp";
    default:
      return "async";
  }
}

// A call in flight. Holds the arrays it borrows and its client until it
// finished, so they outlive the call even when the Python caller drops
// them; dropping an unfinished future waits for the call (without the
// GIL).
class Future {
 public:
  Future(std::future<absl::Status> future, py::object result,
         std::vector<py::object> borrowed)
      : future_(future.share()),
        result_(std::move(result)),
        borrowed_(std::move(borrowed)) {}
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;
  ~Future() {
    // In a forked child nothing would ever complete it: not waited for.
    if (future_.valid() && !InForkedChild()) {
      py::gil_scoped_release release;
      future_.wait();
    }
  }

  bool done() const {
    return future_.wait_for(std::chrono::seconds(0)) ==
           std::future_status::ready;
  }

  // The call's value (the rows of a pull or lookup, None for a push), or
  // its error raised; TimeoutError if not done within `timeout` seconds.
  py::object result(std::optional<double> timeout) {
    bool ready = true;
    {
      NetworkCall release;
      if (timeout.has_value()) {
        const auto wait =
            std::chrono::duration<double>(std::max(0.0, *timeout));
        ready = future_.wait_for(wait) == std::future_status::ready;
      } else {
        future_.wait();
      }
    }
    if (!ready) {
      PyErr_SetString(PyExc_TimeoutError,
                      "the call did not finish within the timeout");
      throw py::error_already_set();
    }
    Check(future_.get());
    return result_;
  }

 private:
  std::shared_future<absl::Status> future_;
  py::object result_;
  std::vector<py::object> borrowed_;
};

// The first error of a text-format parse.
// Waits for `future` without the GIL, checking for signals every 50 ms:
// on one whose Python handler raises (Ctrl-C: KeyboardInterrupt), runs
// `on_interrupt` (with the GIL) and raises that exception.
absl::Status WaitOrInterrupt(std::future<absl::Status>& future,
                             const std::function<void()>& on_interrupt) {
  while (true) {
    bool ready;
    {
      NetworkCall release;
      ready = future.wait_for(std::chrono::milliseconds(50)) ==
              std::future_status::ready;
    }
    if (ready) return future.get();
    if (PyErr_CheckSignals() != 0) {
      on_interrupt();
      throw py::error_already_set();
    }
  }
}

// The shards' addresses: a list of "host:port" strings, or one string
// of them separated by commas (as ps_worker's --servers).
std::vector<std::string> ServerList(const py::object& servers) {
  if (py::isinstance<py::str>(servers)) {
    std::vector<std::string> list;
    for (absl::string_view address :
         absl::StrSplit(servers.cast<std::string>(), ',')) {
      address = absl::StripAsciiWhitespace(address);
      if (!address.empty()) list.emplace_back(address);
    }
    return list;
  }
  const auto type_name = [](const py::handle& object) {
    return std::string(py::str(py::type::of(object).attr("__name__")));
  };
  if (!py::isinstance<py::sequence>(servers)) {
    throw py::type_error(absl::StrCat(
        "servers must be a list of \"host:port\" strings (or one string of "
        "them, comma-separated), not ",
        type_name(servers)));
  }
  std::vector<std::string> list;
  size_t i = 0;
  for (const py::handle address : servers) {
    if (!py::isinstance<py::str>(address)) {
      throw py::type_error(
          absl::StrCat("servers[", i, "] must be a \"host:port\" string, not ",
                       type_name(address)));
    }
    list.push_back(address.cast<std::string>());
    ++i;
  }
  return list;
}

class PyClient {
 public:
  PyClient(std::vector<std::string> servers, double rpc_timeout,
           double retry_deadline, const std::string& wire,
           size_t max_keys_per_request, int channels_per_shard,
           security::ChannelSecurity security, std::string cluster_id) {
    CheckProcess();
    NoteGrpcUse();
    client::ClientOptions options;
    options.security = std::move(security);
    options.cluster_id = std::move(cluster_id);
    options.servers = std::move(servers);
    options.retry.rpc_timeout = SecondsOf(rpc_timeout, "rpc_timeout");
    options.retry.retry_deadline = SecondsOf(retry_deadline, "retry_deadline");
    if (wire == "float16") {
      options.wire_type = proto::FLOAT16;
    } else if (wire != "float32") {
      throw py::value_error(absl::StrCat(
          "wire must be 'float32' or 'float16', not '", wire, "'"));
    }
    if (max_keys_per_request == 0) {
      throw py::value_error("max_keys_per_request must be positive");
    }
    if (channels_per_shard < 1) {
      throw py::value_error("channels_per_shard must be at least 1");
    }
    options.max_keys_per_request = max_keys_per_request;
    options.channels_per_shard = channels_per_shard;
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(std::move(options));
    Check(client.status());
    client_ = std::move(*client);
  }

  int num_shards() const { return client_->num_shards(); }
  Client& native() { return *client_; }
  double last_call_seconds() const { return last_call_seconds_; }
  uint64_t client_id() const { return client_->client_id(); }

  // `config`: a TableConfig in text format, or (`json`) in JSON.
  TableHandle CreateTable(const std::string& config, bool json) {
    proto::TableConfig parsed;
    if (json) {
      google::protobuf::util::JsonParseOptions options;
      options.case_insensitive_enum_parsing = true;
      const auto status =
          google::protobuf::util::JsonStringToMessage(config, &parsed, options);
      if (!status.ok()) {
        RaiseStatus(absl::InvalidArgumentError(
            absl::StrCat("not a TableConfig: ", status.ToString())));
      }
    } else {
      Check(ParseTextProto(config, "the table config", &parsed));
    }
    absl::StatusOr<TableHandle> table;
    {
      NetworkCall release;
      table = client_->CreateTable(parsed);
    }
    Check(table.status());
    return *table;
  }

  void DropTable(const std::string& name) {
    absl::Status status;
    {
      NetworkCall release;
      status = client_->DropTable(name);
    }
    Check(status);
  }

  py::array Read(const TableHandle& table, const py::handle& keys_arg,
                 uint64_t step, bool unique, const py::object& out,
                 bool read_only) {
    const absl::Span<const uint64_t> keys = KeysOf(keys_arg);
    CheckTable(table);
    py::array values = RowsOut(keys.size(), table.dim, out);
    const absl::Span<float> span =
        OutputOf(values, keys.size(), static_cast<size_t>(table.dim));
    const absl::Time start = absl::Now();
    Client::CallCanceller canceller;
    std::future<absl::Status> future;
    {
      NetworkCall release;
      future = read_only ? client_->LookupAsync(table, keys, span, step,
                                                KeysAre(unique), &canceller)
                         : client_->PullAsync(table, keys, span, step,
                                              KeysAre(unique), &canceller);
    }
    // Ctrl-C: the pull is cancelled and waited for (it writes into
    // `values` until its future is ready), then KeyboardInterrupt.
    const absl::Status status = WaitOrInterrupt(future, [&] {
      canceller.Cancel();
      py::gil_scoped_release release;
      future.wait();
    });
    last_call_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
    Check(status);
    return values;
  }

  // `self`: this client's Python object, kept alive by the future.
  std::unique_ptr<Future> ReadAsync(const py::object& self,
                                    const TableHandle& table,
                                    const py::object& keys_arg, uint64_t step,
                                    bool unique, const py::object& out,
                                    bool read_only) {
    const absl::Span<const uint64_t> keys = KeysOf(keys_arg);
    CheckTable(table);
    py::array values = RowsOut(keys.size(), table.dim, out);
    const absl::Span<float> span =
        OutputOf(values, keys.size(), static_cast<size_t>(table.dim));
    std::future<absl::Status> future;
    {
      NetworkCall release;
      future =
          read_only
              ? client_->LookupAsync(table, keys, span, step, KeysAre(unique))
              : client_->PullAsync(table, keys, span, step, KeysAre(unique));
    }
    return std::make_unique<Future>(std::move(future), values,
                                    std::vector<py::object>{keys_arg, self});
  }

  void Push(const TableHandle& table, const py::handle& keys_arg,
            const py::handle& grads_arg, uint64_t step, bool unique) {
    const absl::Span<const uint64_t> keys = KeysOf(keys_arg);
    const absl::Span<const float> grads =
        FloatsOf(grads_arg, keys.size(), table.dim, "grads");
    CheckTable(table);
    const absl::Time start = absl::Now();
    std::future<absl::Status> future;
    {
      NetworkCall release;
      future = client_->PushAsync(table, keys, grads, step, KeysAre(unique));
    }
    // Ctrl-C: the push, whose requests are built (the arrays are no longer
    // read), goes on in the background to its end on every shard (a push
    // stopped half-way would be half applied); KeyboardInterrupt now.
    const absl::Status status = WaitOrInterrupt(future, [] {});
    last_call_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
    Check(status);
  }

  std::unique_ptr<Future> PushAsync(const py::object& self,
                                    const TableHandle& table,
                                    const py::object& keys_arg,
                                    const py::object& grads_arg, uint64_t step,
                                    bool unique) {
    const absl::Span<const uint64_t> keys = KeysOf(keys_arg);
    const absl::Span<const float> grads =
        FloatsOf(grads_arg, keys.size(), table.dim, "grads");
    CheckTable(table);
    std::future<absl::Status> future;
    {
      NetworkCall release;
      future = client_->PushAsync(table, keys, grads, step, KeysAre(unique));
    }
    return std::make_unique<Future>(
        std::move(future), py::none(),
        std::vector<py::object>{keys_arg, grads_arg, self});
  }

  std::vector<uint64_t> Erase(const TableHandle& table,
                              const py::handle& keys_arg) {
    const absl::Span<const uint64_t> keys = KeysOf(keys_arg);
    CheckTable(table);
    absl::StatusOr<std::vector<uint64_t>> erased;
    {
      NetworkCall release;
      erased = client_->Erase(table, keys);
    }
    Check(erased.status());
    return *erased;
  }

  uint64_t Publish(uint64_t step, const py::bytes& dense) {
    const std::string parameters = dense;
    absl::StatusOr<uint64_t> rows;
    {
      NetworkCall release;
      rows = client_->Publish(step, parameters);
    }
    Check(rows.status());
    return *rows;
  }

  py::object Checkpoint(const std::string& root, uint64_t step,
                        bool incremental) {
    Client::CheckpointOptions options;
    options.root = root;
    options.step = step;
    options.incremental = incremental;
    absl::StatusOr<proto::CheckpointManifest> manifest;
    {
      NetworkCall release;
      manifest = client_->Checkpoint(options);
    }
    Check(manifest.status());
    return DictOf(*manifest);
  }

  py::object Load(const std::string& path) {
    absl::StatusOr<proto::LoadResponse> loaded;
    {
      NetworkCall release;
      loaded = client_->Load(path);
    }
    Check(loaded.status());
    return DictOf(*loaded);
  }

  py::list Stats() {
    absl::StatusOr<std::vector<proto::StatsResponse>> stats;
    {
      NetworkCall release;
      stats = client_->Stats();
    }
    Check(stats.status());
    py::list out;
    for (const proto::StatsResponse& shard : *stats) out.append(DictOf(shard));
    return out;
  }

  // Seconds per Pull + Push pair of the C++ client alone (no Python in
  // the loop), for the binding's overhead benchmark.
  double NativePullPushSeconds(const TableHandle& table,
                               const py::handle& keys_arg, int iterations) {
    const absl::Span<const uint64_t> keys = KeysOf(keys_arg);
    CheckTable(table);
    std::vector<float> rows(keys.size() * table.dim);
    absl::Status status;
    absl::Duration took;
    {
      NetworkCall release;
      const absl::Time start = absl::Now();
      for (int i = 0; i < iterations && status.ok(); ++i) {
        status = client_->Pull(table, keys, absl::MakeSpan(rows), 0,
                               Client::Keys::kUnique);
        if (status.ok()) {
          for (float& v : rows) v = 1e-6f;
          status = client_->Push(table, keys, rows, 0, Client::Keys::kUnique);
        }
      }
      took = absl::Now() - start;
    }
    Check(status);
    return absl::ToDoubleSeconds(took) / std::max(1, iterations);
  }

 private:
  static Client::Keys KeysAre(bool unique) {
    return unique ? Client::Keys::kUnique : Client::Keys::kAny;
  }

  void CheckTable(const TableHandle& table) const {
    if (static_cast<int>(table.shard_table_ids.size()) !=
        client_->num_shards()) {
      throw py::value_error(absl::StrCat(
          "table '", table.name, "' was created through a client of ",
          table.shard_table_ids.size(), " shard(s); this one has ",
          client_->num_shards()));
    }
  }

  static py::array RowsOut(size_t rows, int32_t dim, const py::object& out) {
    if (!out.is_none()) return py::reinterpret_borrow<py::array>(out);
    return NewArray(
        {static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(dim)},
        "float32");
  }

  std::unique_ptr<Client> client_;
  // Seconds inside the C++ client of the last blocking pull, lookup or
  // push (the overhead benchmark subtracts it from the Python call's).
  double last_call_seconds_ = 0;
};

}  // namespace

client::Client& NativeClient(const py::handle& client) {
  if (!py::isinstance<PyClient>(client)) {
    throw py::type_error(
        absl::StrCat("expected an embedps.Client, not ",
                     py::str(py::type::of(client)).cast<std::string>()));
  }
  return client.cast<PyClient&>().native();
}

void BindClient(py::module_& m) {
  py::class_<TableHandle>(m, "Table", R"(A table as a client addresses it.

Returned by Client.create_table; pass it to pull, push and lookup.)")
      .def_property_readonly("name",
                             [](const TableHandle& t) { return t.name; })
      .def_property_readonly("dim", [](const TableHandle& t) { return t.dim; })
      .def_property_readonly(
          "mode", [](const TableHandle& t) { return ModeName(t.mode); },
          "'async', 'sync' or 'ssp': how pushes of several workers combine")
      .def_property_readonly(
          "num_shards",
          [](const TableHandle& t) { return t.shard_table_ids.size(); })
      .def("__repr__", [](const TableHandle& t) {
        return absl::StrCat("embedps.Table(name='", t.name, "', dim=", t.dim,
                            ", mode='", ModeName(t.mode),
                            "', shards=", t.shard_table_ids.size(), ")");
      });

  py::class_<Future>(m, "Future", R"(A pull, lookup or push in flight.

result(timeout=None) waits and returns the rows (pull, lookup) or None
(push), or raises the call's embedps.Error; done() says whether it finished.
The arrays it was given stay borrowed until then.)")
      .def("done", &Future::done)
      .def("result", &Future::result, py::arg("timeout") = py::none());

  py::class_<PyClient>(m, "_Client")
      .def(py::init([](const py::object& servers, double rpc_timeout,
                       double retry_deadline, const std::string& wire,
                       size_t max_keys_per_request, int channels_per_shard,
                       std::string tls_ca, std::string tls_cert,
                       std::string tls_key, std::string token_file,
                       std::string tls_server_name, std::string cluster_id) {
             return std::make_unique<PyClient>(
                 ServerList(servers), rpc_timeout, retry_deadline, wire,
                 max_keys_per_request, channels_per_shard,
                 SecurityOf(std::move(tls_ca), std::move(tls_cert),
                            std::move(tls_key), std::move(token_file),
                            std::move(tls_server_name)),
                 std::move(cluster_id));
           }),
           py::arg("servers"), py::kw_only(), py::arg("rpc_timeout") = 30.0,
           py::arg("retry_deadline") = 15.0, py::arg("wire") = "float32",
           py::arg("max_keys_per_request") = size_t{256} << 10,
           py::arg("channels_per_shard") = 1, py::arg("tls_ca") = "",
           py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("token_file") = "", py::arg("tls_server_name") = "",
           py::arg("cluster_id") = "")
      .def_property_readonly("num_shards", &PyClient::num_shards)
      .def_property_readonly("client_id", &PyClient::client_id)
      .def("_create_table", &PyClient::CreateTable, py::arg("config"),
           py::arg("json"))
      .def("drop_table", &PyClient::DropTable, py::arg("name"),
           "Drops the table on every shard, freeing its memory; its Table "
           "handles stop working (NotFoundError).")
      .def(
          "pull",
          [](PyClient& c, const TableHandle& t, const py::object& keys,
             uint64_t step, bool unique, const py::object& out) {
            return c.Read(t, keys, step, unique, out, /*read_only=*/false);
          },
          py::arg("table"), py::arg("keys"), py::kw_only(), py::arg("step") = 0,
          py::arg("unique") = false, py::arg("out") = py::none())
      .def(
          "lookup",
          [](PyClient& c, const TableHandle& t, const py::object& keys,
             uint64_t step, bool unique, const py::object& out) {
            return c.Read(t, keys, step, unique, out, /*read_only=*/true);
          },
          py::arg("table"), py::arg("keys"), py::kw_only(), py::arg("step") = 0,
          py::arg("unique") = false, py::arg("out") = py::none())
      .def("push", &PyClient::Push, py::arg("table"), py::arg("keys"),
           py::arg("grads"), py::kw_only(), py::arg("step") = 0,
           py::arg("unique") = false)
      .def(
          "pull_async",
          [](const py::object& self, const TableHandle& t,
             const py::object& keys, uint64_t step, bool unique,
             const py::object& out) {
            return self.cast<PyClient&>().ReadAsync(self, t, keys, step, unique,
                                                    out, false);
          },
          py::arg("table"), py::arg("keys"), py::kw_only(), py::arg("step") = 0,
          py::arg("unique") = false, py::arg("out") = py::none())
      .def(
          "lookup_async",
          [](const py::object& self, const TableHandle& t,
             const py::object& keys, uint64_t step, bool unique,
             const py::object& out) {
            return self.cast<PyClient&>().ReadAsync(self, t, keys, step, unique,
                                                    out, true);
          },
          py::arg("table"), py::arg("keys"), py::kw_only(), py::arg("step") = 0,
          py::arg("unique") = false, py::arg("out") = py::none())
      .def(
          "push_async",
          [](const py::object& self, const TableHandle& t,
             const py::object& keys, const py::object& grads, uint64_t step,
             bool unique) {
            return self.cast<PyClient&>().PushAsync(self, t, keys, grads, step,
                                                    unique);
          },
          py::arg("table"), py::arg("keys"), py::arg("grads"), py::kw_only(),
          py::arg("step") = 0, py::arg("unique") = false)
      .def("publish", &PyClient::Publish, py::arg("step"),
           py::arg("dense_parameters") = py::bytes())
      .def("checkpoint", &PyClient::Checkpoint, py::arg("root"), py::kw_only(),
           py::arg("step"), py::arg("incremental") = false)
      .def("load", &PyClient::Load, py::arg("path"))
      .def("erase", &PyClient::Erase, py::arg("table"), py::arg("keys"),
           "Removes the rows of `keys` (uint64) from every shard; returns the "
           "rows removed per shard.")
      .def("stats", &PyClient::Stats)
      .def("_native_pull_push_seconds", &PyClient::NativePullPushSeconds)
      .def_property_readonly("_last_call_seconds", [](const PyClient& c) {
        return c.last_call_seconds();
      });
}

}  // namespace embedps::python
