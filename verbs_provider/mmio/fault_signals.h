// SPDX-License-Identifier: BSD-2-Clause
// The process's fault signals (SIGSEGV, SIGBUS, SIGTRAP), shared by the emulation's claimants and
// the program. Once a claimant is added for a signal, the emulation's handler is installed for it
// and stays in front: a fault goes to each claimant in turn, and one that none claims goes to the
// handler the program set, as the kernel would have delivered it. sigaction() and signal() are
// interposed for these signals once ours is installed (what the program sets is what it reads back
// and what its faults reach; nothing it does takes our handler away): libemu_verbs.so exports
// them, except in the sanitizer builds (under TSan the runtime's sigaction interceptor resolved
// its real function to ours and the library crashed at load), where a handler set after ours
// replaces it. A sanitizer's handler installed before ours is the program's, from our side.
#pragma once
#include <signal.h>

namespace emu::mmio {

// Claims the fault (handles it and returns true) or leaves it (false). Runs in signal context.
using FaultClaimant = bool (*)(int sig, siginfo_t* si, void* ucontext);

// Adds a claimant for sig (SIGSEGV, SIGBUS or SIGTRAP), installing the handler if it is not yet.
// Claimants are tried in the order they were added; adding one twice adds it once.
void fault_claimant_add(int sig, FaultClaimant claimant);

}  // namespace emu::mmio
