// SPDX-License-Identifier: BSD-2-Clause
// Runs this test binary again (/proc/self/exe) as a process of its own: the one way the tests
// start a second process of their own code (a peer of peer.h, a probe of the unit tests), which a
// constructor of the file that owns its role runs before GoogleTest starts.
#pragma once
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <initializer_list>
#include <string>
#include <vector>

// A descriptor of this process given to the child under another number.
struct FdAs {
  int fd;
  int child_fd;
};

// Starts /proc/self/exe with argv[0] `name`, exactly the environment `env` (K=V entries) and the
// descriptors `fds` dup2'ed onto their child numbers. The child's pid, or -1.
inline pid_t spawn_self_process(const char* name, std::vector<std::string>& env,
                                std::initializer_list<FdAs> fds) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (const FdAs& f : fds) posix_spawn_file_actions_adddup2(&fa, f.fd, f.child_fd);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string arg0 = name;
  char* argv[] = {arg0.data(), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// A probe of the unit tests, selected by EMU_UNIT_PROBE in env (the probe's whole environment).
// Returns its exit status, or -SIGNAL if a signal ended it, and appends what it wrote to stdout
// and stderr to *out.
inline int spawn_self(std::vector<std::string> env, std::string* out) {
  int p[2];
  if (pipe(p) != 0) return -1000;
  pid_t pid = spawn_self_process("probe", env, {{p[1], 1}, {p[1], 2}});
  close(p[1]);
  if (pid < 0) {
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
