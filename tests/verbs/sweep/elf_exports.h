// SPDX-License-Identifier: BSD-2-Clause
// The functions a loaded shared library exports, read from that library's own ELF file (.dynsym,
// .gnu.version, .gnu.version_d): the export sweep's ground truth, so a symbol a newer library adds
// shows up without anyone typing its name.
#pragma once
#include <string>
#include <vector>

namespace sweep {

struct Export {
  std::string name;
  std::vector<std::string> versions;  // every version it is defined under; "(V)" for a hidden one
  bool only_private = true;           // all its versions are IBVERBS_PRIVATE_* (the provider ABI)
};

// The loaded object whose file name contains `soname` (dl_iterate_phdr), its path in *path.
// Empty (and *error set) if it is not loaded or its file cannot be parsed.
std::vector<Export> loaded_library_exports(const char* soname, std::string* path,
                                           std::string* error);

}  // namespace sweep
