// SPDX-License-Identifier: BSD-2-Clause
// A context's doorbell registers as the program maps them (emudv_init_qp's uar.db and uar.bf):
// the segment's register pages mapped again without write permission, so that a read shows what
// the device holds and a plain store is an MMIO exit (mmio/mmio_trap.h), completed into a scratch
// mirror of the process's own from which the device takes the stored bytes (emu/mmio.h's
// mmio_plain_store). Laid out as the context's UarReg array, register i at i * sizeof(UarReg). Made
// at the first emudv_init_qp of the context (EMU_MMIO=trap, the default); under EMU_MMIO=call the
// registers handed out are the segment's own, which the device reads only through the emudv_*
// calls.
#pragma once
#include <cstdint>

#include "emu/mmio.h"

namespace emu::prov {

struct EmuContext;

struct RegisterPages {
  uint8_t* view = nullptr;    // what the program stores into: the segment's pages, read-only
  uint8_t* mirror = nullptr;  // the scratch the trap completes stores into
  uint64_t len = 0;
  int window = -1;                    // the trap's handle
  StoreAssembly* assembly = nullptr;  // per register
  EmuContext* ctx = nullptr;
};

// The context's register pages, made on first use; nullptr under EMU_MMIO=call or if they could
// not be made (then the segment's registers are handed out, as under EMU_MMIO=call).
RegisterPages* register_pages(EmuContext* ctx);
// Where the program finds register idx's byte `at` (its view, or the segment's register).
uint8_t* register_address(EmuContext* ctx, uint32_t idx, uint32_t at);
// At context close: stores to the pages fault as the program's own from here on.
void register_pages_close(EmuContext* ctx);

}  // namespace emu::prov
