// SPDX-License-Identifier: BSD-2-Clause
// Fork-and-check: a check run in a child of fork() (which has the parent's memory and objects as
// they were at the fork), its verdict the child's exit status.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

namespace vt {

// Waits for the child `pid`: its exit status, or 128 + the number of the signal that ended it (as
// a shell reports it); -1 if waitpid failed.
inline int wait_exit_status(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Runs `check` in a child of fork(), which exits with what it returns (0: all well; at most 127),
// and waits for it: wait_exit_status's result, or -1 if fork failed.
template <typename Check>
int fork_and_check(Check check) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(check());
  return wait_exit_status(pid);
}

}  // namespace vt
