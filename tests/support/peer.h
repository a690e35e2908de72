// SPDX-License-Identifier: BSD-2-Clause
// A second process for a test. The test binary re-executes itself (/proc/self/exe) with
// EMU_TEST_PEER=<role> in its environment; a static initializer in the file that owns the role
// (a PeerRole) sees the variable, runs the peer and _exits before GoogleTest starts (it ignores
// the roles of other files). Parent and peer talk over two pipes (peer fds 3 and 4).
//
// The usual conversation: the peer sets up and sends its first message, an Info with `ok` and
// `err` (peer_fail sends it with ok 0 and exits); the parent answers with its own connection data;
// the peer may send a "ready" byte; at the end it sends a Report with `ok` and `err` and exits 0
// (peer_finish). Peer::start, expect_ready and finish are the parent's side of the same.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "spawn_self.h"

extern char** environ;

namespace vt {

constexpr const char* kPeerEnv = "EMU_TEST_PEER";
constexpr int kPeerIn = 3;   // peer reads the parent's messages here
constexpr int kPeerOut = 4;  // and writes its own here

// The role this process was started in, or "" in the test process itself.
inline std::string peer_role() {
  const char* r = std::getenv(kPeerEnv);
  return r ? r : "";
}

// A role of this binary's peers: a process started in `role` runs `run`, which must not return,
// before GoogleTest starts. One object at namespace scope per role, in the file that owns it.
struct PeerRole {
  PeerRole(const char* role, void (*run)()) {
    if (peer_role() == role) run();
  }
};

// Repeats `io` (read or write) until n bytes moved; false at end of file or on an error.
template <typename Byte, typename Io>
bool move_all(Io io, int fd, Byte* c, size_t n) {
  while (n) {
    ssize_t r = io(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline bool read_all(int fd, void* p, size_t n) {
  return move_all(::read, fd, static_cast<char*>(p), n);
}

inline bool write_all(int fd, const void* p, size_t n) {
  return move_all(::write, fd, static_cast<const char*>(p), n);
}

// In a peer: emu0 opened without GoogleTest (which has not started there), or nullptr.
inline ibv_context* peer_open_emu0() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n && !ctx; ++i)
    if (std::string(ibv_get_device_name(list[i])) == "emu0") ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  return ctx;
}

// In a peer: `msg` to the parent; a parent that is gone ends the peer (exit 3).
template <typename T>
void peer_tell(const T& msg) {
  if (!write_all(kPeerOut, &msg, sizeof msg)) _exit(3);
}

// In a peer: the parent's next message; a parent that is gone ends the peer (exit 3).
template <typename T>
T peer_hear() {
  T msg;
  if (!read_all(kPeerIn, &msg, sizeof msg)) _exit(3);
  return msg;
}

// In a peer: `info` (an Info or Report with `err`, its `ok` left 0) says what failed and errno;
// sent to the parent, then exit 2.
template <typename Info>
[[noreturn]] void peer_fail(Info& info, const char* what) {
  std::snprintf(info.err, sizeof info.err, "%s (errno %d)", what, errno);
  write_all(kPeerOut, &info, sizeof info);
  _exit(2);
}

// In a peer: `rep` (a Report with `ok` and `err`) says the check failed, and why (printf-style).
template <typename Report>
__attribute__((format(printf, 2, 3))) void peer_report_failure(Report& rep, const char* fmt, ...) {
  rep.ok = 0;
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(rep.err, sizeof rep.err, fmt, ap);
  va_end(ap);
}

// In a peer: the final report to the parent, then exit 0 (the parent checks the report).
template <typename Report>
[[noreturn]] void peer_finish(const Report& rep) {
  write_all(kPeerOut, &rep, sizeof rep);
  _exit(0);
}

// In a peer: emu0 with a PD and one CQ of `cqe` entries (for sends and receives alike).
struct PeerDevice {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  uint16_t lid = 0;  // port 1's
};

// In a peer: opens PeerDevice, or sends `info` with what failed (peer_fail).
template <typename Info>
PeerDevice peer_open_device(Info& info, int cqe) {
  PeerDevice d;
  d.ctx = peer_open_emu0();
  if (!d.ctx) peer_fail(info, "open emu0");
  d.pd = ibv_alloc_pd(d.ctx);
  d.cq = d.pd ? ibv_create_cq(d.ctx, cqe, nullptr, nullptr, 0) : nullptr;
  if (!d.cq) peer_fail(info, "pd/cq");
  ibv_port_attr pa;
  if (ibv_query_port(d.ctx, 1, &pa)) peer_fail(info, "query_port");
  d.lid = pa.lid;
  return d;
}

class Peer {
 public:
  // Spawns /proc/self/exe as a peer in `role` (extra_env "NAME=value ..." replaces each NAME).
  bool spawn(const char* role, const std::string& extra_env = "") {
    int to_peer[2], from_peer[2];
    if (pipe2(to_peer, O_CLOEXEC) || pipe2(from_peer, O_CLOEXEC)) return false;
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, kPeerEnv, std::strlen(kPeerEnv)) != 0) env_s.push_back(*e);
    for (size_t at = 0; at < extra_env.size();) {  // space-separated NAME=value entries
      size_t end = std::min(extra_env.find(' ', at), extra_env.size());
      std::string one = extra_env.substr(at, end - at);
      at = end + 1;
      if (one.empty()) continue;
      std::string key = one.substr(0, one.find('=') + 1);
      env_s.erase(std::remove_if(env_s.begin(), env_s.end(),
                                 [&](const std::string& e) { return e.rfind(key, 0) == 0; }),
                  env_s.end());
      env_s.push_back(one);
    }
    env_s.push_back(std::string(kPeerEnv) + "=" + role);
    pid_ = spawn_self_process("emu_verbs_tests-peer", env_s,
                              {{to_peer[0], kPeerIn}, {from_peer[1], kPeerOut}});
    close(to_peer[0]);
    close(from_peer[1]);
    out_ = to_peer[1];
    in_ = from_peer[0];
    return pid_ >= 0;
  }
  // Spawns the peer in `role` and reads its first message into *info: a fatal failure if the
  // peer did not start or reported a failure (info->ok 0).
  template <typename Info>
  void start(const char* role, Info* info, const std::string& extra_env = "") {
    ASSERT_TRUE(spawn(role, extra_env)) << "posix_spawn";
    ASSERT_TRUE(recv(info, sizeof *info)) << "peer died before reporting";
    ASSERT_EQ(info->ok, 1u) << "peer: " << info->err;
  }
  // The peer's "ready" byte: 1 once it connected its side.
  void expect_ready() {
    uint8_t ready = 0;
    ASSERT_TRUE(recv(&ready, 1));
    ASSERT_EQ(ready, 1) << "peer could not connect";
  }
  // The peer's final report (by the deadline), which must say ok, and its clean exit.
  template <typename Report>
  void finish(Report* rep, std::chrono::milliseconds deadline) {
    ASSERT_TRUE(recv_by(rep, sizeof *rep, std::chrono::steady_clock::now() + deadline))
        << "no report from the peer";
    EXPECT_EQ(rep->ok, 1u) << "peer: " << rep->err;
    int st = wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "peer status " << st;
  }
  ~Peer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
  }
  bool send(const void* p, size_t n) { return write_all(out_, p, n); }
  bool recv(void* p, size_t n) { return read_all(in_, p, n); }
  // n bytes from the peer, or false if they did not all come before `until`.
  bool recv_by(void* p, size_t n, std::chrono::steady_clock::time_point until) {
    // A read that finds nothing by `until` counts as the end of the stream.
    auto read_by = [until](int fd, char* c, size_t left) -> ssize_t {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      pollfd pf = {fd, POLLIN, 0};
      if (poll(&pf, 1, ms.count() > 0 ? static_cast<int>(ms.count()) : 0) != 1) return 0;
      return read(fd, c, left);
    };
    return move_all(read_by, in_, static_cast<char*>(p), n);
  }
  // One byte from the peer, or false if none came before `until`.
  bool recv_byte_by(uint8_t* b, std::chrono::steady_clock::time_point until) {
    return recv_by(b, 1, until);
  }
  // Waits for the peer to exit; returns its wait status.
  int wait() {
    int st = -1;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return st;
  }
  pid_t pid() const { return pid_; }
  void kill_now() {
    ASSERT_EQ(kill(pid_, SIGKILL), 0);
    int st = wait();
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
};

}  // namespace vt
