// SPDX-License-Identifier: BSD-2-Clause
// Multi-process XRC scenarios (docs/design/xrc.md). A Player is a process of the test binary
// re-executed in role "xrc-player" (peer.h) that runs one verbs step per command it reads; the
// parent can also SIGKILL it at any point. A census is taken by a short-lived process in role
// "xrc-census": it attaches to the fabric (which sweeps dead processes first, as every attach
// does), runs emu::take_census and reports it; the test process itself never attaches a second time
// (the preloaded provider already has the segment mapped).
//
// Wire format, both directions: frames of a native uint32 length and that many bytes of text.
// Commands are words ("open_xrcd PATH OFLAGS"); replies are "ok [values...]" or "err ERRNO what".
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "peer.h"

namespace vt {

// Longest a player may take to answer one step. A send to a vanished TGT QP completes with
// RETRY_EXC_ERR after microseconds of emulated timeouts; the rest is process scheduling.
constexpr std::chrono::seconds kStepDeadline{10};

struct Reply {
  bool answered = false;   // false: the player died or did not answer before the deadline
  int err = 0;             // errno of the verb when the reply was "err"
  std::vector<long> vals;  // the numbers after "ok"
  std::string text;
  bool ok() const { return answered && err == 0; }
  long val(size_t i) const { return i < vals.size() ? vals[i] : -1; }
};

class Player {
 public:
  // Starts the process and opens emu0 in it (false: it did not come up).
  bool start();
  // Runs one step and waits (bounded) for its reply.
  Reply call(const std::string& cmd, std::chrono::milliseconds deadline = kStepDeadline);
  // Sends a command without waiting for the reply (to kill the player in the middle of it).
  bool send_only(const std::string& cmd);
  Reply reply(std::chrono::milliseconds deadline = kStepDeadline);
  void kill_now();  // SIGKILL and reap: the pid is gone when this returns
  // "exit": the player answers, then exits normally without releasing anything; reaped here.
  bool exit_normally();
  pid_t pid() const { return pid_; }
  bool alive() const { return alive_; }

 private:
  std::unique_ptr<Peer> peer_;
  pid_t pid_ = -1;
  bool alive_ = false;
};

// The census as the test reads it (a subset of emu::Census, plus its JSON for failure messages).
struct CensusView {
  struct Tgt {
    uint32_t qpn = 0, xrcd = 0, handles = 0;
    bool dies_with_xrcd = false, orphaned = false, creator_alive = false;
    int creator_pid = 0;
    std::string state;
    std::vector<int> holders;  // pids holding a handle
    std::vector<bool> holder_alive;
  };
  struct Xrcd {
    uint32_t index = 0, opens = 0, objects = 0;
    uint64_t inode = 0;
    std::string policy;
    std::vector<int> openers;
    std::vector<bool> opener_alive;
  };
  struct Object {
    std::string kind, type;
    int owner_pid = 0;
    bool owner_alive = false;
  };
  bool ok = false;
  std::vector<Tgt> tgts;
  std::vector<Xrcd> xrcds;
  std::vector<Object> objects;
  size_t dead_owned = 0;
  long leaked_heap_blocks = -1;  // the heap audit's count (-1: not run)
  std::string json;

  const Tgt* tgt(uint32_t qpn) const;
  const Xrcd* xrcd_of_inode(uint64_t inode) const;
  size_t count(const std::string& kind, const std::string& type = "") const;
};

// Takes the census in a short-lived process (which attaches, so it sweeps the dead first).
CensusView take_census_view();

// A fresh file for a domain (in $TMPDIR or /tmp), removed by the destructor.
struct DomainFile {
  DomainFile();
  ~DomainFile();
  std::string path;
  uint64_t inode = 0;
};

}  // namespace vt
