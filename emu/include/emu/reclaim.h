// SPDX-License-Identifier: BSD-2-Clause
// Safe reclamation of shared objects that engines in any process may be using (see EngineSlot in
// layout.h). Every engine entry point opens an EngineSection; destroy paths call
// wait_for_engines() after making the object unfindable and before freeing what it owned.
#pragma once
#include "emu/barriers.h"  // EMU_FAST_TLS
#include "emu/segment.h"

namespace emu {

namespace detail {
// How many engine sections the calling thread has open (reclaim.cpp).
extern EMU_FAST_TLS constinit uint32_t t_engine_depth;
}  // namespace detail

// Sections nest (the post path opens one around the doorbell, the engine's entry points their
// own): only the outermost marks the thread's slot; an inner one is a thread-local count, inline.
class EngineSection {
 public:
  explicit EngineSection(Segment* seg) : seg_(seg) {
    if (detail::t_engine_depth++ == 0) enter();
  }
  ~EngineSection() {
    if (--detail::t_engine_depth == 0) leave();
  }
  EngineSection(const EngineSection&) = delete;
  EngineSection& operator=(const EngineSection&) = delete;

 private:
  void enter();
  void leave();
  Segment* seg_;
};

// Returns once every engine section open at the call (in any live process) has closed.
void wait_for_engines(Segment* seg);

// In a child of fork(): the calling thread's engine slot was its parent's (the child starts with a
// process record and slots of its own).
void forget_engine_slot();

// A dead process's sections never close: forget them (with its slot) before the slot is reused.
void reset_engine_slots(Segment* seg, uint32_t proc);

}  // namespace emu
