// SPDX-License-Identifier: BSD-2-Clause
// Wire faults by seed: the rules every engine of a fabric applies to the packets it puts on the
// wire (docs/design/reliability.md). The rules live in the segment, so a running fabric can be
// changed from any attached process (emu-ctl faults, a harness, a test).
//
// Text form (EMU_FAULTS, `emu-ctl faults set`): rules separated by ';', each KIND[:KEY=VALUE,...]
//   KIND  drop | dup | reorder | delay | corrupt
//   p=F      probability per packet transmission (0..1)
//   nth=N    the Nth packet the QP sends (its first is 1) instead of a probability
//   times=K  with nth: its first K transmissions (default 1)
//   qp=N     only the connection whose requester QP number is N (decimal or 0x..)
//   dev=N    only packets sent by device N
//   op=send|write|read|atomic|ack|ud  only packets of that kind
// and `seed=S` anywhere (default 1). Example: "seed=7;drop:p=0.05;dup:nth=3,op=write".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "emu/segment.h"
#include "emu/status.h"
#include "emu/wire_layout.h"

namespace emu {

// The rules of a table, as set (without counters or the seqlock).
struct FaultRules {
  uint64_t seed = 1;
  uint32_t n = 0;
  FaultRule rule[kMaxFaultRules] = {};
};

// Parses the text form; Status::invalid with *err naming the bad part.
Status faults_parse(std::string_view text, FaultRules* out, std::string* err);
// The text form of rules (faults_parse reads it back to the same rules).
std::string faults_format(const FaultRules& rules);

// Publishes rules to the fabric (replacing any), and zeroes the counters.
void faults_set(Segment* seg, const FaultRules& rules);
Status faults_set(Segment* seg, std::string_view text, std::string* err);
void faults_clear(Segment* seg);
// A consistent copy of the fabric's rules.
FaultRules faults_get(const Segment* seg);

struct FaultCounters {
  uint64_t injected[kFaultKinds];
  uint64_t retransmitted;
  uint64_t naks;
  uint64_t timeouts;
};
FaultCounters faults_counters(const Segment* seg);

// One packet transmission, as a decision sees it.
struct PacketKey {
  uint32_t dev;  // the sending device
  uint32_t qpn;  // the connection's requester QP
  uint32_t psn;
  uint32_t attempt;  // transmissions of this message before this one
  uint32_t number;   // the packet's number on its QP (1 = its first), for nth
  uint8_t op;        // FaultOp
};

// What happens to the packet: a pure function of (seed, packet, rule), so the same seed gives the
// same outcome whatever the threads' timing. The first rule that fires wins.
FaultKind fault_decide(const FaultRules& rules, const PacketKey& k);

const char* fault_name(FaultKind k);

}  // namespace emu
