// SPDX-License-Identifier: BSD-2-Clause
// Runs this test binary again as a probe: a process of its own that attaches (or dies) as a test
// needs, selected by EMU_UNIT_PROBE in its environment (a constructor of the test file acts on it
// before GoogleTest starts).
#pragma once
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

// env: the probe's whole environment (K=V). Returns its exit status, or -SIGNAL if a signal ended
// it, and appends what it wrote to stdout and stderr to *out.
inline int spawn_self(std::vector<std::string> env, std::string* out) {
  int p[2];
  if (pipe(p) != 0) return -1000;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char arg0[] = "probe";
  char* argv[] = {arg0, nullptr};
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    return -1000;
  }
  char buf[1024];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}
