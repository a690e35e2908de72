// The device as a driver reaches it: the entry points a doorbell, a receive post, a QP state change
// or a poll have into the NIC. The NIC itself (emu/device/: the engine and its steps) is private
// to emu/; these calls run its steps on this process's engine, in this thread or on the device
// thread (EMU_ENGINE).
#pragma once
#include <cstdint>

#include "emu/layout.h"
#include "emu/segment.h"

namespace emu {

// A doorbell write reached the device: the 8-byte doorbell value, or the first 8 bytes of a
// BlueFlame copy (the head of a control segment). The device runs the QP it names: now, in this
// thread (EMU_ENGINE=inline), or on the process's device thread.
void device_doorbell(uint64_t ctrl_head);

// Runs qp's send queue until it is empty or stalled. force_retry: try a stalled head WQE now (the
// responder just posted the receive it waited for).
void device_kick_sq(QpSlot& qp, bool force_retry = false);

// Flushes the receive queue of a QP in ERR (WR_FLUSH_ERR for every posted receive).
void device_flush_rq(QpSlot& qp);

// Moves a QP to ERR and flushes both queues, as a device does after an error.
void device_enter_error(QpSlot& qp);

// EMU_ENGINE=thread: doorbells are queued to the device thread and not yet taken (a poller that
// finds its CQ empty then yields to it).
bool device_thread_busy();

// The QP went to RESET: the device forgets what it saw of its rings and doorbells (driver
// counters restart at 0).
void reset_race_state(Segment* seg, QpSlot& qp);

}  // namespace emu
