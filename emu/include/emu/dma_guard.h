// SPDX-License-Identifier: BSD-2-Clause
// Copies that survive a program's memory mistakes. A program may munmap a buffer it registered
// and never deregistered; on hardware the MR keeps its pinned pages and the device goes on
// writing them, so the program's mistake costs it nothing but the data. Here the device copies
// with memcpy through the program's own addresses (same process) or a shared mapping, and a
// missing page would end the process with SIGSEGV (or SIGBUS: a file truncated under a mapping).
// Such copies run guarded instead: the thread records where to resume (a setjmp, no system
// call), and the process's SIGSEGV/SIGBUS handler (the provider's,
// verbs_provider/memory/page_move.cpp) asks dma_fault_recover first, which resumes there when the
// fault is in a guarded copy of its own thread. The copy then reports the fault and the device uses
// the MR's pages another way or completes with the error hardware gives
// (docs/design/registered-memory.md, "Registered memory a program unmapped").
#pragma once
#include <signal.h>

#include <cstddef>
#include <cstdint>

namespace emu {

class Segment;

// From a SIGSEGV or SIGBUS handler: if the fault came from a guarded copy of the calling thread,
// does not return (the copy returns its fault). Otherwise returns, having done nothing.
// Async-signal-safe.
void dma_fault_recover(const siginfo_t* si, void* ucontext);

// memcpy that returns false instead of faulting when a page of either side is missing (with the
// handler above installed; without it, a fault is the process's as before).
bool guarded_copy(void* dst, const void* src, size_t n);

// After a guarded copy into [addr, addr + len) of this process's MR `lkey` faulted: the address
// here of those bytes in the MR's pages in the registration file (EMU_SHARED_MR moved them
// there; the MR keeps them after the program unmapped its own mapping), or 0 if they are not
// there (EMU_SHARED_MR=0, a partial page, ODP). addr is an I/O address of the MR.
uint64_t own_mr_pages(Segment* seg, uint32_t lkey, uint64_t addr, uint64_t len);

}  // namespace emu
