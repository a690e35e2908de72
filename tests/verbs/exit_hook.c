// SPDX-License-Identifier: BSD-2-Clause
/* Linked by the test program, this library is initialized before the preloaded provider and so
 * finalized after it (the dynamic loader finalizes in reverse order of initialization): its
 * destructor runs the callback the test program set, so that verbs run
 * after the provider's static destructors, as they do in a thread still inside a verb while
 * another thread's exit() runs those destructors (rping's CM thread exits as its main thread
 * deregisters its memory). */
static void (*g_after)(void);

void exit_hook_set(void (*fn)(void)) { g_after = fn; }

__attribute__((destructor)) static void run_after(void) {
  if (g_after) g_after();
}
