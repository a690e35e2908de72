// SPDX-License-Identifier: BSD-2-Clause
// Emulator controls: what an operator (emu-ctl), a test or a harness does to the device from
// outside the verbs API. Every control acts on the shared segment, so it may run in any attached
// process, including one that has no device open.
#pragma once
#include <cstdint>
#include <string_view>

#include "emu/port.h"
#include "emu/segment.h"
#include "emu/status.h"

namespace emu {

// The index of the device named `name` ("emu0"). Status::not_found if there is none.
Status find_device(const Segment* seg, std::string_view name, uint32_t* dev);

// The link state of port `port` (1-based, as in verbs) of device `dev`: kPortDown or kPortActive.
// Status::not_found for a device or port that does not exist.
Status get_port_state(const Segment* seg, uint32_t dev, uint32_t port, uint8_t* state);

// Takes a port down or brings it back up, as pulling and plugging its cable would. Down: the port
// reports PORT_DOWN/Disabled, and nothing leaves or arrives through it (RC requesters on either
// end stall and, once retry_cnt x timeout is spent, complete with RETRY_EXC_ERR). Only on a real
// change does every context open on the device, in any process, get IBV_EVENT_PORT_ERR or
// IBV_EVENT_PORT_ACTIVE for the port; *changed (if given) says whether there was one.
Status set_port_state(Segment* seg, uint32_t dev, uint32_t port, bool up, bool* changed = nullptr);

// Holds or releases the fabric's transport timers: while held, no QP's ACK timeout (retry_cnt) or
// RNR timer (rnr_retry) counts, in any process, so a stall neither retries nor spends its budget;
// released, each timer goes on from where it stood. For a debugger that stops one side of a
// connection, or a test that must take a port down and up without racing the retry budget.
// Scheduled runs (EMU_SCHEDULE) keep their logical clock. *changed says whether the state changed.
Status set_transport_timers_held(Segment* seg, bool held, bool* changed = nullptr);
bool transport_timers_held(const Segment* seg);

}  // namespace emu
