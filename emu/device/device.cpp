// The public entry points (emu/device.h) over this process's engine.
#include "emu/device.h"

#include "device/engine.h"
#include "device/progress.h"
#include "emu/config.h"

namespace emu {

void device_doorbell(uint64_t head) {
  Engine* eng = Engine::process_engine();
  if (config().engine == EngineMode::inline_on_doorbell)
    eng->on_doorbell(head);
  else
    ProgressThread::get(eng)->doorbell(head);
}

void device_kick_sq(QpSlot& qp, bool force_retry) {
  Engine::process_engine()->kick_sq(qp, force_retry);
}

void device_flush_rq(QpSlot& qp) { Engine::process_engine()->flush_rq(qp); }

void device_enter_error(QpSlot& qp) { Engine::process_engine()->enter_error(qp); }

bool device_thread_busy() {
  return config().engine == EngineMode::progress_thread &&
         ProgressThread::get(Engine::process_engine())->busy();
}

}  // namespace emu
