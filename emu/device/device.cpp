// SPDX-License-Identifier: BSD-2-Clause
// The public entry points (emu/device.h) over this process's engine.
#include "emu/device.h"

#include "device/engine.h"
#include "device/progress.h"
#include "emu/config.h"
#include "emu/sched/device_actor.h"

namespace emu {

// An actor of a scheduled run with a device actor gives its doorbells to that actor (one thread
// local load outside a run).
void device_doorbell(uint64_t head) {
  if (sched::DeviceActor* dev = sched::DeviceActor::for_caller()) return dev->doorbell(head);
  // Found once: every post asks (config() is a call).
  static Engine* const eng = Engine::process_engine();
  static const bool in_line = config().engine == EngineMode::inline_on_doorbell;
  if (in_line)
    eng->on_doorbell(head);
  else
    ProgressThread::get(eng)->doorbell(head);
}

void device_kick_sq(QpSlot& qp, bool force_retry) {
  if (sched::DeviceActor* dev = sched::DeviceActor::for_caller()) return dev->kick(qp, force_retry);
  Engine::process_engine()->kick_sq(qp, force_retry);
}

void device_flush_rq(QpSlot& qp) { Engine::process_engine()->flush_rq(qp); }

void device_cq_doorbell(uint32_t ctx, uint64_t stored) {
  Engine::process_engine()->on_cq_doorbell(ctx, stored);
}

void device_enter_error(QpSlot& qp) { Engine::process_engine()->enter_error(qp); }

void device_settle_rq(QpSlot& qp) { Engine::process_engine()->settle_rq(qp); }

void device_finish_for_the_dead(QpSlot& qp) { Engine::process_engine()->finish_for_the_dead(qp); }

bool device_raise_lost_event(CqSlot& cq) { return Engine::process_engine()->raise_lost_event(cq); }

bool device_tm_op(SrqSlot& srq, const TmListOp& op) {
  return Engine::process_engine()->tm_list_op(srq, op);
}

bool device_thread_busy() {
  return config().engine == EngineMode::progress_thread &&
         ProgressThread::get(Engine::process_engine())->busy();
}

}  // namespace emu
