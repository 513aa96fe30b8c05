// embedps.ServingClient (client/serving_client.h) and embedps.Predictor
// (ps_predictor's Predict) for Python. Network calls run without the GIL.
#include <grpcpp/grpcpp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/serving_client.h"
#include "proto/serving.grpc.pb.h"
#include "proto/tables.pb.h"
#include "python/src/bindings.h"
#include "python/src/py_common.h"
#include "wire/grpc_status.h"

namespace embedps::python {
namespace {

proto::Pooling PoolingOf(const std::string& name) {
  if (name == "sum") return proto::POOLING_SUM;
  if (name == "mean") return proto::POOLING_MEAN;
  if (name == "none") return proto::POOLING_NONE;
  throw py::value_error(absl::StrCat(
      "pooling must be 'sum', 'mean' or 'none', not '", name, "'"));
}

// One slot of a Lookup, holding its arrays.
struct Slot {
  std::string table;
  int32_t dim = 0;
  py::object keys;
  std::vector<int32_t> offsets;
  proto::Pooling pooling = proto::POOLING_SUM;
};

class PyServingClient {
 public:
  PyServingClient(std::vector<std::vector<std::string>> replicas,
                  double deadline, double attempt_timeout, double down_for,
                  size_t cache_rows, double cache_ttl, const std::string& wire,
                  security::ChannelSecurity security, std::string cluster_id) {
    CheckProcess();
    NoteGrpcUse();
    client::ServingClientOptions options;
    options.security = std::move(security);
    options.cluster_id = std::move(cluster_id);
    options.replicas = std::move(replicas);
    options.deadline = SecondsOf(deadline, "deadline");
    options.attempt_timeout = SecondsOf(attempt_timeout, "attempt_timeout");
    options.down_for = SecondsOf(down_for, "down_for");
    options.cache_rows = cache_rows;
    options.cache_ttl = SecondsOf(cache_ttl, "cache_ttl");
    if (wire == "float16") {
      options.wire_type = proto::FLOAT16;
    } else if (wire != "float32") {
      throw py::value_error(absl::StrCat(
          "wire must be 'float32' or 'float16', not '", wire, "'"));
    }
    auto client = client::ServingClient::Connect(std::move(options));
    Check(client.status());
    client_ = std::move(*client);
  }

  // (list of arrays, the version that answered).
  py::tuple Lookup(const std::vector<Slot>& slots, uint64_t version) {
    std::vector<client::ServingSlot> request(slots.size());
    for (size_t s = 0; s < slots.size(); ++s) {
      request[s].table = slots[s].table;
      request[s].dim = slots[s].dim;
      request[s].keys = KeysOf(slots[s].keys, "Slot.keys");
      request[s].offsets = slots[s].offsets;
      request[s].pooling = slots[s].pooling;
    }
    std::vector<std::vector<float>> out;
    uint64_t served = 0;
    absl::Status status;
    {
      NetworkCall release;
      status = client_->Lookup(request, &out, version, &served);
    }
    Check(status);
    py::list arrays;
    for (size_t s = 0; s < out.size(); ++s) {
      const py::ssize_t dim = slots[s].dim;
      const py::ssize_t rows = dim > 0 ? out[s].size() / dim : 0;
      py::array array = NewArray({rows, dim}, "float32");
      std::copy(out[s].begin(), out[s].end(), Data<float>(array));
      arrays.append(array);
    }
    return py::make_tuple(arrays, served);
  }

  // versions[shard][replica]: a ServingVersionResponse as a dict.
  py::list Versions() {
    std::vector<std::vector<proto::ServingVersionResponse>> versions;
    {
      NetworkCall release;
      versions = client_->Versions();
    }
    py::list out;
    for (const auto& shard : versions) {
      py::list replicas;
      for (const proto::ServingVersionResponse& v : shard) {
        replicas.append(DictOf(v));
      }
      out.append(replicas);
    }
    return out;
  }

  py::dict Stats() const {
    const client::ServingClientStats s = client_->stats();
    py::dict d;
    d["lookups"] = s.lookups;
    d["cache_hits"] = s.cache_hits;
    d["cache_misses"] = s.cache_misses;
    d["failovers"] = s.failovers;
    d["failed"] = s.failed;
    return d;
  }

  int32_t ShardOf(uint64_t key) const { return client_->ShardOf(key); }

 private:
  std::unique_ptr<client::ServingClient> client_;
};

class PyPredictor {
 public:
  PyPredictor(const std::string& address, double timeout,
              const security::ChannelSecurity& security)
      : timeout_(SecondsOf(timeout, "timeout")) {
    CheckProcess();
    NoteGrpcUse();
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        security::MakeChannelCredentials(security);
    Check(credentials.status());
    grpc::ChannelArguments args;
    security::AddChannelArguments(security, &args);
    stub_ = proto::Predictor::NewStub(
        grpc::CreateCustomChannel(address, *credentials, args));
  }

  // (probabilities, version) of raw Criteo lines without their label.
  py::tuple Predict(const std::vector<std::string>& lines) {
    proto::PredictRequest request;
    for (const std::string& line : lines) request.add_line(line);
    proto::PredictResponse response;
    grpc::Status status;
    {
      NetworkCall release;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
      status = stub_->Predict(&context, request, &response);
    }
    Check(wire::FromGrpcStatus(status));
    py::array out = NewArray({response.probability_size()}, "float32");
    std::copy(response.probability().begin(), response.probability().end(),
              Data<float>(out));
    return py::make_tuple(out, response.version());
  }

 private:
  const absl::Duration timeout_;
  std::unique_ptr<proto::Predictor::Stub> stub_;
};

}  // namespace

void BindServing(py::module_& m) {
  py::class_<Slot>(m, "Slot", R"(One slot of a ServingClient.lookup.

Slot(table, dim, keys, offsets=None, pooling='sum'): keys a 1-D uint64 (or
int64) array; offsets bags + 1 entries from 0 to len(keys) (None: one key a
bag); pooling 'sum', 'mean' or 'none' (the rows).)")
      .def(py::init([](std::string table, int32_t dim, py::object keys,
                       py::object offsets, const std::string& pooling) {
             Slot slot;
             slot.table = std::move(table);
             if (dim <= 0) throw py::value_error("dim must be positive");
             slot.dim = dim;
             KeysOf(keys, "Slot.keys");  // checked now, read at lookup
             slot.keys = std::move(keys);
             if (!offsets.is_none()) {
               slot.offsets = OffsetsOf(offsets, "Slot.offsets");
             }
             slot.pooling = PoolingOf(pooling);
             return slot;
           }),
           py::arg("table"), py::arg("dim"), py::arg("keys"),
           py::arg("offsets") = py::none(), py::arg("pooling") = "sum");

  py::class_<PyServingClient>(m, "ServingClient", R"(Reads pooled embeddings
from serving replicas (ps_server --role=serving).

ServingClient(replicas, deadline=0.05, attempt_timeout=0.02, down_for=0.5,
cache_rows=0, cache_ttl=1.0, wire='float32', tls_ca='', tls_cert='',
tls_key='', token_file='', tls_server_name='', cluster_id=''): replicas[s]
lists the "host:port" of every replica of serving shard s; times in
seconds; the tls_ and token arguments as for Client. Every replica must
state that it is a serving replica of its shard (of cluster_id, when
given): one that says otherwise raises RuntimeError (FAILED_PRECONDITION)
naming it; one down at first is used once it has.)")
      .def(py::init([](std::vector<std::vector<std::string>> replicas,
                       double deadline, double attempt_timeout, double down_for,
                       size_t cache_rows, double cache_ttl,
                       const std::string& wire, std::string tls_ca,
                       std::string tls_cert, std::string tls_key,
                       std::string token_file, std::string tls_server_name,
                       std::string cluster_id) {
             return std::make_unique<PyServingClient>(
                 std::move(replicas), deadline, attempt_timeout, down_for,
                 cache_rows, cache_ttl, wire,
                 SecurityOf(std::move(tls_ca), std::move(tls_cert),
                            std::move(tls_key), std::move(token_file),
                            std::move(tls_server_name)),
                 std::move(cluster_id));
           }),
           py::arg("replicas"), py::kw_only(), py::arg("deadline") = 0.05,
           py::arg("attempt_timeout") = 0.02, py::arg("down_for") = 0.5,
           py::arg("cache_rows") = 0, py::arg("cache_ttl") = 1.0,
           py::arg("wire") = "float32", py::arg("tls_ca") = "",
           py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("token_file") = "", py::arg("tls_server_name") = "",
           py::arg("cluster_id") = "")
      .def("lookup", &PyServingClient::Lookup, py::arg("slots"), py::kw_only(),
           py::arg("version") = 0,
           "(list of arrays: bags × dim, or keys × dim for 'none'; the "
           "version that answered). version 0: the latest; otherwise that "
           "exact training step.")
      .def("versions", &PyServingClient::Versions)
      .def("stats", &PyServingClient::Stats)
      .def("shard_of", &PyServingClient::ShardOf, py::arg("key"));

  py::class_<PyPredictor>(m, "Predictor", R"(Click probabilities from
ps_predictor.

Predictor(address, timeout=1.0, tls_ca='', tls_cert='', tls_key='',
token_file='', tls_server_name=''); predict(lines) takes Criteo TSV lines
without their label and returns (probabilities, version).)")
      .def(py::init([](const std::string& address, double timeout,
                       std::string tls_ca, std::string tls_cert,
                       std::string tls_key, std::string token_file,
                       std::string tls_server_name) {
             return std::make_unique<PyPredictor>(
                 address, timeout,
                 SecurityOf(std::move(tls_ca), std::move(tls_cert),
                            std::move(tls_key), std::move(token_file),
                            std::move(tls_server_name)));
           }),
           py::arg("address"), py::kw_only(), py::arg("timeout") = 1.0,
           py::arg("tls_ca") = "", py::arg("tls_cert") = "",
           py::arg("tls_key") = "", py::arg("token_file") = "",
           py::arg("tls_server_name") = "")
      .def("predict", &PyPredictor::Predict, py::arg("lines"));
}

}  // namespace embedps::python
