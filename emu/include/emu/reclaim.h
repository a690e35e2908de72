// Safe reclamation of shared objects that engines in any process may be using (see EngineSlot in
// layout.h). Every engine entry point opens an EngineSection; destroy paths call
// wait_for_engines() after making the object unfindable and before freeing what it owned.
#pragma once
#include "emu/segment.h"

namespace emu {

class EngineSection {
 public:
  explicit EngineSection(Segment* seg);
  ~EngineSection();
  EngineSection(const EngineSection&) = delete;
  EngineSection& operator=(const EngineSection&) = delete;

 private:
  Segment* seg_;
  bool outermost_;
};

// Returns once every engine section open at the call (in any live process) has closed.
void wait_for_engines(Segment* seg);

// In a child of fork(): the calling thread's engine slot was its parent's (the child starts with a
// process record and slots of its own).
void forget_engine_slot();

// A dead process's sections never close: forget them (with its slot) before the slot is reused.
void reset_engine_slots(Segment* seg, uint32_t proc);

}  // namespace emu
