// SPDX-License-Identifier: BSD-2-Clause
#include "errors.h"

namespace py = pybind11;

namespace pyh {

void register_errors(py::module_& m) {
  static py::exception<VerbsError> type(m, "VerbsError", PyExc_OSError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const VerbsError& e) {
      // OSError(errno, strerror) fills e.errno and e.strerror.
      PyErr_SetObject(type.ptr(), py::make_tuple(e.err, e.what()).ptr());
    }
  });
}

}  // namespace pyh
