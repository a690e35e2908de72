// SPDX-License-Identifier: BSD-2-Clause
// Errors cross into Python as rdmaemu.VerbsError, a subclass of OSError whose errno is the
// verb's (e.errno, e.strerror), so a test compares errnos as it would in C.
#pragma once
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

namespace pyh {

struct VerbsError : std::runtime_error {
  VerbsError(int e, const std::string& what) : std::runtime_error(what), err(e) {}
  int err;
};

// Creates the exception type in `m` and translates VerbsError into it.
void register_errors(pybind11::module_& m);

}  // namespace pyh
