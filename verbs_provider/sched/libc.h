// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so: the libc function an interposed one stands in front of.
#pragma once
#include <dlfcn.h>

#include <atomic>

namespace emu_sched {

// Found on first use (a constructor could run after another library's constructor has called it).
// dlsym takes the loader's own locks, none of the interposed ones. `version`: for the functions
// glibc keeps in two versions (the condition variables), the current one.
template <typename Fn>
Fn libc_next(std::atomic<Fn>& slot, const char* name, const char* version = nullptr) {
  Fn f = slot.load(std::memory_order_acquire);
  if (!f) {
    void* p = version ? dlvsym(RTLD_NEXT, name, version) : dlsym(RTLD_NEXT, name);
    f = reinterpret_cast<Fn>(p);
    slot.store(f, std::memory_order_release);
  }
  return f;
}

// The program-wide run's end: the report (stderr, EMU_SCHEDULE_OUT), once (program.cpp).
void finish_program_run();

}  // namespace emu_sched
