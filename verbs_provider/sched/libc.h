// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so: the libc function an interposed one stands in front of.
#pragma once
#include <dlfcn.h>

#include <atomic>
#include <string>
#include <vector>

#include "emu/sched/sched.h"

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

// The program-wide run's end: the report (stderr, EMU_SCHEDULE_OUT), once (program.cpp). With
// `failure`, a run that had not failed is reported as failed with that signature.
void finish_program_run(const char* failure = nullptr);

// The run's last `n` steps, a line each, with the function of each trapped register store's
// instruction where the dynamic symbols name it (program_report.cpp).
std::string last_steps(const emu::sched::RunResult& r, size_t n);
// EMU_SCHEDULE_TRACE: the run as Perfetto trace-event JSON, a track per thread and one for the
// device (its steps run inline in the threads that rang it), the race events as instants.
bool write_program_trace(const std::string& path, const emu::sched::RunResult& r,
                         const std::vector<std::string>& races);

}  // namespace emu_sched
