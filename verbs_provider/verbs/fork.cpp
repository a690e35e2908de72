// fork() and the provider (docs/architecture.md, "Fork"). The segment gives a child of fork() a
// process record of its own (emu/segment.h); here the provider's side: which objects a child
// inherited, and the process-local locks a fork must not copy while another thread holds them.
#include <pthread.h>

#include "cm/state.h"
#include "provider.h"

namespace emu::prov {

uint32_t g_fork_generation = 0;

namespace {

// No other thread of the parent holds the CM's lock in the child's copy of it (a thread blocked in
// GET_EVENT waits without it, so taking it here does not wait for an event).
void prepare() { cm::cm_mutex().lock(); }
void parent() { cm::cm_mutex().unlock(); }
void child() {
  cm::cm_mutex().unlock();
  ++g_fork_generation;  // what exists now was made before the fork: the parent's
}

[[maybe_unused]] const int g_hooks = pthread_atfork(prepare, parent, child);

}  // namespace

}  // namespace emu::prov
