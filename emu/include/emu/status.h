// SPDX-License-Identifier: BSD-2-Clause
// The status type used inside the device model. The verbs edge maps it to an errno per verb (the
// same status means different errnos to different verbs, e.g. verbs_provider/verbs/xrc.cpp's
// errno_of).
#pragma once

namespace emu {

enum class Status {
  ok = 0,
  invalid,    // bad argument or state transition
  no_memory,  // segment or table full
  busy,       // object still in use
  not_found,  // no such object
  not_supported,
  layout_mismatch,  // shared segment made by another layout version
  io,               // system-level failure
};

const char* status_name(Status s);

}  // namespace emu
