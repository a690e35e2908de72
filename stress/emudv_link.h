// SPDX-License-Identifier: BSD-2-Clause
// The direct-access API of emulated devices (verbs_provider/include/emudv.h), looked up at run time
// in libemu_verbs.so, which emu-run preloads. Looked up rather than linked so that the same binary
// runs over a real device without the emulator (api = verbs): linking the provider would load the
// emulator into every run.
#pragma once

#include "emudv.h"

namespace uctlite {

struct EmudvFns {
  decltype(&emudv_init_qp) init_qp;
  decltype(&emudv_init_cq) init_cq;
  decltype(&emudv_db_write64) db_write64;
  decltype(&emudv_bf_copy) bf_copy;
  decltype(&emudv_mmio_flush) mmio_flush;
  decltype(&emudv_sq_write) sq_write;
  decltype(&emudv_sq_dbrec) sq_dbrec;
  decltype(&emudv_races_recorded) races_recorded;
  decltype(&emudv_read_races) read_races;
  decltype(&emudv_sq_device_state) sq_device_state;
  decltype(&emudv_sq_dbrec_unfenced) sq_dbrec_unfenced;  // EMUDV_1.1
  decltype(&emudv_to_device_barrier) to_device_barrier;  // EMUDV_1.1
};

// The provider's functions, or null when it is not loaded in this process (not under emu-run).
const EmudvFns* emudv_fns();

}  // namespace uctlite
