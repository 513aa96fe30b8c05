// The parts of the _embedps module, each defined in its own file.
#ifndef EMBEDPS_PYTHON_SRC_BINDINGS_H_
#define EMBEDPS_PYTHON_SRC_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace embedps::python {

// Client, Table, Future (client_binding.cc).
void BindClient(pybind11::module_& m);
// ServingClient, Slot, Predictor (serving_binding.cc).
void BindServing(pybind11::module_& m);
// CriteoReader, feature_key, unique_inverse, roc_auc, mean_log_loss
// (data_binding.cc).
void BindData(pybind11::module_& m);

}  // namespace embedps::python

#endif  // EMBEDPS_PYTHON_SRC_BINDINGS_H_
