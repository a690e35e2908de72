// SPDX-License-Identifier: BSD-2-Clause
// fork() and the provider (docs/design/verbs-provider.md, "Fork"). The segment gives a child of
// fork() a process record of its own (emu/segment.h); here the provider's side: which objects a
// child inherited. (The CM's lock, which a fork must not copy while another thread holds it, has
// its own hooks beside it: cm/events.cpp.)
#include <pthread.h>

#include "provider.h"

namespace emu::prov {

uint32_t g_fork_generation = 0;

namespace {

void child() {
  ++g_fork_generation;  // what exists now was made before the fork: the parent's
}

[[maybe_unused]] const int g_hooks = pthread_atfork(nullptr, nullptr, child);

}  // namespace

}  // namespace emu::prov
