// SPDX-License-Identifier: BSD-2-Clause
// The packet-level wire's shared state: the fault rules every engine of a fabric obeys, and per QP
// the progress of the message its send queue has on the wire. Plain data in the segment (layout.h
// embeds both in the Header); the rules' API is emu/faults.h, the wire itself emu/wire/.
#pragma once
#include <atomic>
#include <cstdint>

namespace emu {

enum FaultKind : uint8_t {
  kFaultNone = 0,
  kFaultDrop = 1,     // the packet is lost
  kFaultDup = 2,      // it arrives twice
  kFaultReorder = 3,  // it arrives after the packet sent after it
  kFaultDelay = 4,    // it arrives after every other packet of its burst
  kFaultCorrupt = 5,  // it arrives with a bad ICRC: the receiver drops it silently
  kFaultKinds = 6,
};

// Which packets a rule matches, by what they carry (any: all of them).
enum FaultOp : uint8_t {
  kFopAny = 0,
  kFopSend = 1,    // SEND requests (RC, UC, XRC)
  kFopWrite = 2,   // RDMA WRITE requests
  kFopRead = 3,    // RDMA READ requests and responses
  kFopAtomic = 4,  // atomic requests and their answers
  kFopAck = 5,     // ACKs and NAKs
  kFopUd = 6,      // UD datagrams
};

constexpr uint32_t kMaxFaultRules = 16;

struct FaultRule {
  uint8_t kind;     // FaultKind
  uint8_t op;       // FaultOp
  uint8_t any_dev;  // 1: every device, else only `dev`
  uint8_t rsvd;
  uint32_t dev;
  uint32_t qpn;        // 0: every connection, else the one whose requester QP this is
  uint32_t threshold;  // probability x 2^32 (saturated), for rules without nth
  uint32_t nth;        // 0: by probability; N: the Nth packet the QP sends (its first is 1)
  uint32_t times;      // nth: the first `times` transmissions of that packet (default 1)
};

// Written by whoever configures faults (seqlock: odd while a writer is inside), read by engines.
struct FaultTable {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> nrules;  // engines test this one word to choose the plain path
  uint64_t seed;
  FaultRule rules[kMaxFaultRules];
  std::atomic<uint64_t> injected[kFaultKinds];  // per FaultKind, since the rules were set
  std::atomic<uint64_t> retransmitted;          // request packets sent again (RC)
  std::atomic<uint64_t> naks;                   // PSN sequence-error NAKs sent
  std::atomic<uint64_t> timeouts;               // local ACK timeouts taken
};

// The send queue's head message on the wire (RC, UC, XRC), under the QP's engine lock.
struct WireQp {
  uint32_t incarnation;  // QpSlot::incarnation it belongs to (else it is stale)
  uint32_t base_psn;     // the QP's first PSN (packet numbers for `nth` count from it)
  uint32_t head_ci;      // sq_ci of the message below (valid while active)
  uint32_t msg_psn;      // its first PSN
  uint32_t accepted;     // packets of it the responder has taken in order
  uint32_t round;        // transmissions of it so far (the `attempt` a fault decision sees)
  uint32_t retries;      // retransmissions counted against retry_cnt
  uint8_t active;        // a message is on the wire
  uint8_t executed;      // the responder carried it out (its answer may still be lost)
  uint8_t based;         // base_psn is set
  uint8_t rsvd;
};

}  // namespace emu
