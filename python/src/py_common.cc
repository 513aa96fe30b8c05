#include "python/src/py_common.h"

#include <pybind11/stl.h>
#include <unistd.h>

#include <atomic>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace embedps::python {
namespace {

const char* ErrorClassOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kCancelled:
      return "CancelledError";
    case absl::StatusCode::kInvalidArgument:
      return "InvalidArgumentError";
    case absl::StatusCode::kDeadlineExceeded:
      return "DeadlineExceededError";
    case absl::StatusCode::kNotFound:
      return "NotFoundError";
    case absl::StatusCode::kAlreadyExists:
      return "AlreadyExistsError";
    case absl::StatusCode::kPermissionDenied:
      return "PermissionDeniedError";
    case absl::StatusCode::kResourceExhausted:
      return "ResourceExhaustedError";
    case absl::StatusCode::kFailedPrecondition:
      return "FailedPreconditionError";
    case absl::StatusCode::kAborted:
      return "AbortedError";
    case absl::StatusCode::kOutOfRange:
      return "OutOfRangeError";
    case absl::StatusCode::kUnimplemented:
      return "UnimplementedError";
    case absl::StatusCode::kInternal:
      return "InternalError";
    case absl::StatusCode::kUnavailable:
      return "UnavailableError";
    case absl::StatusCode::kDataLoss:
      return "DataLossError";
    case absl::StatusCode::kUnauthenticated:
      return "UnauthenticatedError";
    default:
      return "UnknownError";
  }
}

// The array as numpy sees it; TypeError for anything that is not one.
py::array ArrayOf(const py::handle& object, absl::string_view name) {
  if (!py::isinstance<py::array>(object)) {
    throw py::type_error(absl::StrCat(
        name, " must be a numpy array, not ",
        std::string(py::str(py::type::of(object).attr("__name__"))),
        " (torch tensors: .numpy())"));
  }
  return py::reinterpret_borrow<py::array>(object);
}

// The dtype's item size, read as numpy reports it: pybind11 2.10 reads
// the PyArray_Descr field, which moved in numpy 2.
int ItemSize(const py::dtype& dtype) {
  return dtype.attr("itemsize").cast<int>();
}

std::string ShapeOf(const py::array& array) {
  std::string out = "(";
  for (py::ssize_t i = 0; i < array.ndim(); ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", array.shape(i));
  }
  return absl::StrCat(out, array.ndim() == 1 ? ",)" : ")");
}

void RequireContiguous(const py::array& array, absl::string_view name) {
  if (!(array.flags() & py::array::c_style)) {
    throw py::value_error(absl::StrCat(
        name, " must be C-contiguous (np.ascontiguousarray copies it)"));
  }
}

}  // namespace

void RaiseStatus(const absl::Status& status) {
  // Held for the life of the process: the module is never unloaded.
  static py::object* errors =
      new py::object(py::module_::import("embedps.errors"));
  const int code = static_cast<int>(status.code());
  py::object cls = errors->attr(ErrorClassOf(status.code()));
  py::object error = cls(std::string(status.message()), code);
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

py::array NewArray(std::vector<py::ssize_t> shape, const char* dtype) {
  static py::object* empty =
      new py::object(py::module_::import("numpy").attr("empty"));
  return (*empty)(py::tuple(py::cast(shape)), dtype);
}

absl::Span<const uint64_t> KeysOf(const py::handle& object,
                                  absl::string_view name) {
  py::array array = ArrayOf(object, name);
  const py::dtype dtype = array.dtype();
  if ((dtype.kind() != 'u' && dtype.kind() != 'i') || ItemSize(dtype) != 8) {
    throw py::type_error(
        absl::StrCat(name, " must be uint64 or int64, not ",
                     std::string(py::str(static_cast<py::object>(dtype)))));
  }
  if (array.ndim() != 1) {
    throw py::value_error(
        absl::StrCat(name, " must be 1-D, not of shape ", ShapeOf(array)));
  }
  RequireContiguous(array, name);
  return absl::MakeConstSpan(static_cast<const uint64_t*>(array.data()),
                             static_cast<size_t>(array.shape(0)));
}

absl::Span<const float> FloatsOf(const py::handle& object, size_t rows,
                                 size_t dim, absl::string_view name,
                                 bool flat_ok) {
  py::array array = ArrayOf(object, name);
  if (!array.dtype().is(py::dtype::of<float>())) {
    throw py::type_error(absl::StrCat(
        name, " must be float32, not ",
        std::string(py::str(static_cast<py::object>(array.dtype())))));
  }
  const bool matrix = array.ndim() == 2 &&
                      static_cast<size_t>(array.shape(0)) == rows &&
                      static_cast<size_t>(array.shape(1)) == dim;
  const bool flat = flat_ok && array.ndim() == 1 &&
                    static_cast<size_t>(array.shape(0)) == rows * dim;
  if (!matrix && !flat) {
    throw py::value_error(absl::StrCat(name, " must be of shape (", rows, ", ",
                                       dim, ") (keys × dim), not ",
                                       ShapeOf(array)));
  }
  RequireContiguous(array, name);
  return absl::MakeConstSpan(static_cast<const float*>(array.data()),
                             rows * dim);
}

absl::Span<float> OutputOf(const py::handle& object, size_t rows, size_t dim,
                           absl::string_view name) {
  absl::Span<const float> floats = FloatsOf(object, rows, dim, name);
  py::array array = ArrayOf(object, name);
  if (!array.writeable()) {
    throw py::value_error(absl::StrCat(name, " must be writable"));
  }
  return absl::MakeSpan(const_cast<float*>(floats.data()), floats.size());
}

std::vector<int32_t> OffsetsOf(const py::handle& object,
                               absl::string_view name) {
  py::array array = ArrayOf(object, name);
  const py::dtype dtype = array.dtype();
  const int item_size = ItemSize(dtype);
  if (dtype.kind() != 'i' || (item_size != 4 && item_size != 8)) {
    throw py::type_error(
        absl::StrCat(name, " must be int32 or int64, not ",
                     std::string(py::str(static_cast<py::object>(dtype)))));
  }
  if (array.ndim() != 1) {
    throw py::value_error(
        absl::StrCat(name, " must be 1-D, not of shape ", ShapeOf(array)));
  }
  RequireContiguous(array, name);
  std::vector<int32_t> out(array.shape(0));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t v = item_size == 4
                          ? static_cast<const int32_t*>(array.data())[i]
                          : static_cast<const int64_t*>(array.data())[i];
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      throw py::value_error(
          absl::StrCat(name, "[", i, "] = ", v, " is out of range"));
    }
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Reflection;

py::object FieldValue(const google::protobuf::Message& message,
                      const FieldDescriptor* field, int index);

// One value of a field (index -1: a singular field).
py::object FieldValue(const google::protobuf::Message& message,
                      const FieldDescriptor* field, int index) {
  const Reflection* r = message.GetReflection();
  const bool repeated = index >= 0;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return py::int_(repeated ? r->GetRepeatedInt32(message, field, index)
                               : r->GetInt32(message, field));
    case FieldDescriptor::CPPTYPE_INT64:
      return py::int_(repeated ? r->GetRepeatedInt64(message, field, index)
                               : r->GetInt64(message, field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return py::int_(repeated ? r->GetRepeatedUInt32(message, field, index)
                               : r->GetUInt32(message, field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return py::int_(repeated ? r->GetRepeatedUInt64(message, field, index)
                               : r->GetUInt64(message, field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return py::float_(repeated ? r->GetRepeatedDouble(message, field, index)
                                 : r->GetDouble(message, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return py::float_(repeated ? r->GetRepeatedFloat(message, field, index)
                                 : r->GetFloat(message, field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return py::bool_(repeated ? r->GetRepeatedBool(message, field, index)
                                : r->GetBool(message, field));
    case FieldDescriptor::CPPTYPE_ENUM:
      return py::str((repeated ? r->GetRepeatedEnum(message, field, index)
                               : r->GetEnum(message, field))
                         ->name());
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string value =
          repeated ? r->GetRepeatedString(message, field, index)
                   : r->GetString(message, field);
      if (field->type() == FieldDescriptor::TYPE_BYTES) return py::bytes(value);
      return py::str(value);
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return DictOf(repeated ? r->GetRepeatedMessage(message, field, index)
                             : r->GetMessage(message, field));
  }
  return py::none();
}

}  // namespace

py::object DictOf(const google::protobuf::Message& message) {
  py::dict out;
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const py::str name(field->name());
    if (field->is_map()) {
      py::dict map;
      const FieldDescriptor* key = field->message_type()->map_key();
      const FieldDescriptor* value = field->message_type()->map_value();
      for (int k = 0; k < r->FieldSize(message, field); ++k) {
        const google::protobuf::Message& entry =
            r->GetRepeatedMessage(message, field, k);
        map[FieldValue(entry, key, -1)] = FieldValue(entry, value, -1);
      }
      out[name] = map;
    } else if (field->is_repeated()) {
      py::list list;
      for (int k = 0; k < r->FieldSize(message, field); ++k) {
        list.append(FieldValue(message, field, k));
      }
      out[name] = list;
    } else {
      out[name] = FieldValue(message, field, -1);
    }
  }
  return out;
}

absl::Duration SecondsOf(double seconds, absl::string_view name) {
  if (!(seconds >= 0)) {
    throw py::value_error(
        absl::StrCat(name, " must be >= 0 seconds, not ", seconds));
  }
  return absl::Seconds(seconds);
}

security::ChannelSecurity SecurityOf(std::string ca, std::string cert,
                                     std::string key, std::string token_file,
                                     std::string server_name) {
  security::ChannelSecurity security;
  security.ca_file = std::move(ca);
  security.cert_file = std::move(cert);
  security.key_file = std::move(key);
  security.token_file = std::move(token_file);
  security.server_name = std::move(server_name);
  return security;
}

namespace {
// The process whose clients started gRPC (0: none yet).
std::atomic<pid_t> grpc_process{0};
}  // namespace

void NoteGrpcUse() {
  pid_t none = 0;
  grpc_process.compare_exchange_strong(none, getpid());
}

bool InForkedChild() {
  const pid_t owner = grpc_process.load();
  return owner != 0 && owner != getpid();
}

void CheckProcess() {
  if (!InForkedChild()) return;
  const pid_t owner = grpc_process.load();
  PyErr_SetString(
      PyExc_RuntimeError,
      absl::StrCat(
          "embedps: this process (", getpid(), ") was forked from process ",
          owner,
          " after it had made embedps clients; gRPC cannot work in such a "
          "child (its calls would hang). Make the clients only in the "
          "processes that use them, started with the 'spawn' or "
          "'forkserver' method (torch DataLoader(..., "
          "multiprocessing_context='spawn'), or "
          "multiprocessing.set_start_method('spawn')), or fork before the "
          "parent makes any client")
          .c_str());
  throw py::error_already_set();
}

}  // namespace embedps::python
