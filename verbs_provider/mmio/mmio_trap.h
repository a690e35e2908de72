// SPDX-License-Identifier: BSD-2-Clause
// Trapped register windows: how a plain store by any code to an emulated device register reaches
// the device, as a store to a NIC's BAR does, without the program calling anything.
//
// A window is a range of the program's address space mapped without write permission (the view,
// what the program is given as the register) over device memory the emulation can write (the
// device side: the same pages mapped writable elsewhere, or other memory). A store into the view
// faults; the fault handler completes the store into the device side and reports it to the
// window's sink, on the storing thread, before the program's next instruction runs (an "MMIO
// exit", as a hypervisor's emulated device gets one):
//   - a store from a general register or an immediate, and the string stores (REP MOVS/STOS), are
//     decoded and made by the handler: one signal;
//   - a vector store (SSE, AVX, AVX-512, masked or not) is made by the CPU itself: the handler
//     points the instruction's address register at the device side, sets the trap flag, and when
//     the single step's SIGTRAP comes puts the register back: two signals, no window of time in
//     which another thread could store unobserved (only the storing thread's register moves).
// Each store is reported once, as (offset in the window, the bytes it stored); the sink runs in the
// signal handler of the thread that stored: it may use atomics, futexes and the device's lock-free
// paths, nothing that could be held by the code the store interrupted (a store to a register is
// never made inside the emulation's own locks).
//
// Faults that are not on a window, and stores the decoder does not know (store_decode.h), go to
// the program's own SIGSEGV handler as if the emulation were not there (fault_signals.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace emu::mmio {

// A completed store: `bytes` at `offset` of the window now hold the stored value in the device
// side, and `stored` holds them as this store made them (the device side may already hold another
// thread's store to the same bytes: two threads ringing one doorbell word are two doorbells).
// Runs on the storing thread, in signal context. A string store is reported in pieces of at most
// kStringPiece bytes (the instruction resumes with the rest, as after an interrupt).
using StoreSink = void (*)(void* cookie, uint64_t offset, const uint8_t* stored, uint32_t bytes);
constexpr uint32_t kStringPiece = 256;

// In a sink: the address of the instruction that made the store being reported.
uint64_t storing_instruction();
// In a sink, for a scheduled run's report (not cheap: it unwinds the stack): the first frame of
// the storing thread that is neither the emulation's nor the C library's, so that a BlueFlame
// copy made by memcpy is named by memcpy's caller; the instruction's address when none is.
// backtrace() must have been called once outside the handler (it loads the unwinder).
uint64_t store_site();

// Traps stores to [view, view + len) (page-aligned, mapped without PROT_WRITE by the caller) into
// device + offset. Returns a handle (>= 0), or -ENOSPC when every slot is taken, -EINVAL for a
// range that is not page-aligned.
int trap_window_add(void* view, size_t len, void* device, StoreSink sink, void* cookie);
// The window's stores fault as the program's own from now on (unmap the view after this).
void trap_window_remove(int handle);

// Maps len bytes of fd at offset twice: *view read-only (the register the program gets) and
// *device writable (the device side). 0, or -errno.
int map_trapped_pages(int fd, uint64_t offset, size_t len, void** view, void** device);

// Stores completed so far by the handler (decoded, stepped), for the benchmark and tests.
struct TrapCounts {
  uint64_t decoded;
  uint64_t stepped;
  uint64_t unknown;  // stores into a window the decoder did not know (handed to the program)
};
TrapCounts trap_counts();

}  // namespace emu::mmio
