// Helpers shared by the binding's files: numpy argument checks and the
// mapping of absl::Status to embedps.Error subclasses.
//
// Every check runs before anything is sent and raises TypeError (wrong
// dtype) or ValueError (wrong shape, non-contiguous, sizes that do not
// match), naming the argument. Functions here need the GIL.
#ifndef EMBEDPS_PYTHON_SRC_PY_COMMON_H_
#define EMBEDPS_PYTHON_SRC_PY_COMMON_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "google/protobuf/message.h"
#include "security/credentials.h"

namespace embedps::python {

namespace py = pybind11;

// Raises the embedps.Error subclass of status.code() (embedps/errors.py)
// with the status message. REQUIRES: !status.ok().
[[noreturn]] void RaiseStatus(const absl::Status& status);

// RaiseStatus unless ok.
inline void Check(const absl::Status& status) {
  if (!status.ok()) RaiseStatus(status);
}

// A 1-D C-contiguous array of 64-bit integers (uint64, or int64 read as
// the same bits: torch has no uint64), as keys.
absl::Span<const uint64_t> KeysOf(const py::handle& array,
                                  absl::string_view name = "keys");

// A C-contiguous float32 array of `rows` × `dim` values: shape (rows, dim),
// or (rows * dim,) when `flat_ok`.
absl::Span<const float> FloatsOf(const py::handle& array, size_t rows,
                                 size_t dim, absl::string_view name,
                                 bool flat_ok = false);

// A writable C-contiguous float32 array of shape (rows, dim) to write into.
absl::Span<float> OutputOf(const py::handle& array, size_t rows, size_t dim,
                           absl::string_view name = "out");

// A 1-D C-contiguous int32 or int64 array (bag offsets), copied as int32.
std::vector<int32_t> OffsetsOf(const py::handle& array,
                               absl::string_view name = "offsets");

// A new C-contiguous array of `shape` and numpy dtype name `dtype`
// ("float32", "int64", "uint64"), made by numpy itself: pybind11 2.10
// computes strides from a PyArray_Descr field that moved in numpy 2, so
// its own array constructors are not used. Write through Data<T>().
py::array NewArray(std::vector<py::ssize_t> shape, const char* dtype);

template <typename T>
T* Data(py::array& array) {
  return static_cast<T*>(array.mutable_data());
}

// A protobuf message as a Python dict: every field by its .proto name
// (unset ones with their defaults), integers as int, enums by name, bytes
// as bytes, maps as dicts, repeated fields as lists.
py::object DictOf(const google::protobuf::Message& message);

// Seconds (a Python float) as a duration; ValueError if negative.
absl::Duration SecondsOf(double seconds, absl::string_view name);

// The keyword arguments every client takes for TLS and tokens
// (security/credentials.h): tls_ca, tls_cert, tls_key, token_file,
// tls_server_name, all paths or names, "" for none.
security::ChannelSecurity SecurityOf(std::string ca, std::string cert,
                                     std::string key, std::string token_file,
                                     std::string server_name);

// gRPC cannot work in a process forked from one that already used it: its
// calls would hang. Every client notes the process that made it
// (NoteGrpcUse); CheckProcess raises RuntimeError, at once and naming the
// remedy, in a forked child of such a process — when it makes a client or
// calls one it inherited.
void NoteGrpcUse();
void CheckProcess();
// Whether CheckProcess would raise.
bool InForkedChild();

// Releases the GIL for a network call, after CheckProcess (as
// py::gil_scoped_release does).
class NetworkCall {
 public:
  NetworkCall() {
    CheckProcess();
    state_ = PyEval_SaveThread();
  }
  ~NetworkCall() { PyEval_RestoreThread(state_); }
  NetworkCall(const NetworkCall&) = delete;
  NetworkCall& operator=(const NetworkCall&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

}  // namespace embedps::python

#endif  // EMBEDPS_PYTHON_SRC_PY_COMMON_H_
