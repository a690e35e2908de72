// SPDX-License-Identifier: BSD-2-Clause
// What the endpoint implementations share inside the library.
#pragma once

#include "emudv_link.h"
#include "uctlite.h"

namespace uctlite {

// A doorbell register as UCT keeps it: shared by every QP of the worker that rings it.
struct Worker::Register {
  emudv_uar uar;                       // as emudv_init_qp gave it
  SpinLock lock;                       // bf_post_mt, db_lock
  std::atomic<uint32_t> bf_offset{0};  // 0 or bf_size: the BlueFlame buffer the next post uses
};

std::unique_ptr<Ep> make_verbs_ep(ibv_qp* qp, ibv_cq* cq, std::mutex* worker_lock,
                                  std::string* err);

// reg: the worker's Register for this QP's emudv register (found by the caller through dv.uar).
std::unique_ptr<Ep> make_direct_ep(ibv_qp* qp, const emudv_qp& dv, const emudv_cq& dvcq,
                                   Worker::Register* reg, MmioMode mmio, bool dbrec_fence,
                                   bool plain_stores, std::mutex* worker_lock);

// Whether the device has taken everything the send doorbell record names (dbrec: emudv_qp.dbrec)
// and waits on no timer; nullopt when the emulator cannot say.
std::optional<bool> emu_sq_idle(ibv_qp* qp, volatile uint32_t* dbrec);

}  // namespace uctlite
