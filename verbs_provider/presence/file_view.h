// SPDX-License-Identifier: BSD-2-Clause
// The libc path functions that show the file view (sysfs_view.h) to an unmodified program: opens
// and stats here (file_view.cpp), directory streams, links and realpath in file_view_dirs.cpp.
// Each interposer first asks view::may_be_view_path (a prefix compare) and otherwise calls libc's
// own function with the caller's arguments untouched.
#pragma once
#include <dlfcn.h>
#include <sys/stat.h>

#include <atomic>

#include "sysfs_view.h"

// libc's function `fn` behind this library, found on first use (a constructor could run after
// another library's constructor has already opened a file).
#define LIBC(fn)                                                                         \
  ([]() -> decltype(&::fn) {                                                             \
    static std::atomic<void*> slot{nullptr};                                             \
    return reinterpret_cast<decltype(&::fn)>(::emu::prov::view::libc_symbol(slot, #fn)); \
  }())

namespace emu::prov::view {

inline void* libc_symbol(std::atomic<void*>& slot, const char* name) {
  void* p = slot.load(std::memory_order_acquire);
  if (!p) slot.store(p = dlsym(RTLD_NEXT, name), std::memory_order_release);
  return p;
}

// What a view entry looks like to stat: sysfs-like modes, an inode number from its path.
void fill_stat(const Node& n, struct stat* st);

}  // namespace emu::prov::view
