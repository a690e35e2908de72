// SPDX-License-Identifier: BSD-2-Clause
// The census: every live object of the fabric with the process that owns it (alive or dead), XRC
// domains with their inode and use counts, TGT QPs with their handles and the processes holding
// them, and orphaned TGT QPs (creator gone) — in the spirit of `rdma resource show`. A C++ API for
// the harness and the kill tests; `emu-ctl census [--json]` prints it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "emu/race_log.h"
#include "emu/segment.h"

namespace emu {

struct CensusProc {
  uint32_t index;  // ProcRecord slot
  int pid;
  bool alive;  // the recorded pid still runs with the recorded start time
};

// A verbs object in a table: kind is "context", "pd", "mr", "cq", "qp", "srq".
struct CensusObject {
  std::string kind;
  uint32_t index;     // table slot
  uint32_t dev;       // device index (emuN), where the object has one
  uint64_t number;    // qpn, srqn, MR key, or the slot for the others
  std::string type;   // QPs: "RC", "UC", "UD", "XRC_SEND", "XRC_RECV"; SRQs: "BASIC", "XRC"
  std::string state;  // QPs: "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"; else ""
  int owner_pid;      // the process that made it (a TGT QP: its creator)
  bool owner_alive;
  bool dying;  // being destroyed (unfindable, waiting for engines to leave)
  // QPs: send WQEs rung in but not yet executed by the device (it owes their completions; a
  // process with none outstanding that waits for a receive from a dead peer waits for good, as
  // on hardware: the kill sweeps tell that from a hang by it).
  uint32_t sq_pending = 0;
};

struct CensusHandle {
  uint32_t index;  // XrcHandle slot
  int pid;
  bool alive;
  uint32_t ctx;  // context slot it was made on
};

struct CensusXrcd {
  uint32_t index;
  uint32_t dev;
  bool shared;         // opened through a file (else fd -1: private)
  uint64_t inode_dev;  // st_dev of the file (+1 internally; reported as st_dev)
  uint64_t inode;
  std::string policy;  // "kernel", "xrcd", "creator"
  uint32_t opens;
  uint32_t objects;  // TGT QPs and XRC SRQs
  int creator_pid;
  bool creator_alive;
  std::vector<CensusHandle> openers;
};

struct CensusTgtQp {
  uint32_t qpn;
  uint32_t xrcd;  // CensusXrcd::index
  std::string state;
  uint32_t handles;
  bool dies_with_xrcd;  // kept when its handles' processes exit (2a / 2b "xrcd")
  int creator_pid;
  bool creator_alive;
  bool orphaned;  // the creator is gone (the QP lives on through other handles or the policy)
  std::vector<CensusHandle> holders;
};

struct Census {
  std::string fabric;
  std::vector<CensusProc> procs;      // attached process records
  std::vector<CensusObject> objects;  // every live (or dying) object, TGT QPs included
  std::vector<CensusXrcd> xrcds;
  std::vector<CensusTgtQp> tgt_qps;
  // Objects whose owner is dead and that no policy keeps (a TGT QP alive through a handle or its
  // domain is kept on purpose): what the kill tests require to be empty after a sweep.
  std::vector<CensusObject> dead_owned;
  // The heap audit (Segment::audit_heap, waiting for objects being made): blocks neither free nor
  // named by an object, which the sweep of the dead gives back. leaked_heap_blocks is -1 if the
  // audit could not run.
  int64_t leaked_heap_blocks = -1;
  uint64_t leaked_heap_bytes = 0;
  // Shared locks (ShmLock: table, XRC, atomics, QP send engines and receive queues, SRQs) whose
  // recorded holder is dead: each is taken over by its next taker, and the sweep frees the queue
  // locks; after a sweep, with no taker since, the table, XRC and atomic locks may still show.
  uint32_t locks_held_by_dead = 0;
  // Race events the devices recorded (docs/design/doorbells-and-mmio.md): counts per device and
  // kind since the segment was made, and the last events still in the log (at most kRaceLogLen).
  uint64_t races_total = 0;
  std::vector<std::vector<uint64_t>> race_counts;  // [device][RaceKind]
  std::vector<RaceRecord> races;
};

// A snapshot read without taking the object locks: objects changing meanwhile may show in either
// state, never as garbage (slots are read field by field and checked live).
Census take_census(Segment* seg);
std::string census_text(const Census& c);
std::string census_json(const Census& c);

}  // namespace emu
