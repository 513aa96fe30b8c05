// The parts of the _embedps module, each defined in its own file.
#ifndef EMBEDPS_PYTHON_SRC_BINDINGS_H_
#define EMBEDPS_PYTHON_SRC_BINDINGS_H_

#include <pybind11/pybind11.h>

#include "client/client.h"

namespace embedps::python {

// Client, Table, Future (client_binding.cc).
void BindClient(pybind11::module_& m);
// The C++ client of an embedps.Client; TypeError for another object
// (client_binding.cc).
client::Client& NativeClient(const pybind11::handle& client);
// _HotRows, embedps.torch's hot-row tier (hot_rows_binding.cc).
void BindHotRows(pybind11::module_& m);
// ServingClient, Slot, Predictor (serving_binding.cc).
void BindServing(pybind11::module_& m);
// CriteoReader, feature_key, unique_inverse, roc_auc, mean_log_loss
// (data_binding.cc).
void BindData(pybind11::module_& m);

}  // namespace embedps::python

#endif  // EMBEDPS_PYTHON_SRC_BINDINGS_H_
