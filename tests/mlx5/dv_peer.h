// SPDX-License-Identifier: BSD-2-Clause
// What the two-process mlx5dv programs (dv_post.c, dv_dc.c) share: the socket to the other
// process, the line a failure prints (which test, which side), a clock for hang guards, the byte
// pattern every payload carries, and starting the other side as this same program.
#pragma once
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char* g_test;                // the run's name: first word of a FAIL line
static const char* g_role = "requester";  // or "target"
static int g_peer_fd = -1;                // the socket to the other process

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s (%s): ", g_test, g_role);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void tell(const void* p, size_t n) {
  if (write(g_peer_fd, p, n) != (ssize_t)n) die("write to peer");
}

static void hear(void* p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(g_peer_fd, (char*)p + got, n - got);
    if (r <= 0) die("peer went away");
    got += (size_t)r;
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static uint8_t pattern(uint32_t seed, uint32_t i) { return (uint8_t)(seed * 31 + i * 7 + 3); }

static struct ibv_device* pick_device(const char* name) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n; ++i)
    if (!name || strcmp(ibv_get_device_name(list[i]), name) == 0) return list[i];
  die("no device %s", name ? name : "at all");
}

// Runs this program again as the target, its socket's number in the environment variable `env`
// (the target finds it there: target_fd); this process keeps the other end as the requester.
static void start_target(char** argv, const char* env) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) die("socketpair");
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", sv[1]);
    setenv(env, fd, 1);
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  if (pid < 0) die("fork");
  close(sv[1]);  // the target's end: its exit is then the end of this one's stream
  g_peer_fd = sv[0];
}

// In the target: true, with g_peer_fd set, when start_target started this process.
static int is_target(const char* env) {
  if (!getenv(env)) return 0;
  g_peer_fd = atoi(getenv(env));
  g_role = "target";
  return 1;
}
