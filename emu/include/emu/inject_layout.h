// SPDX-License-Identifier: BSD-2-Clause
// Error injection's shared state: the rules that complete chosen WRs with a chosen status or fail
// the Nth creation verb with a chosen errno. Plain data in the segment (layout.h embeds the table
// in the Header); the API is emu/inject.h, the text form docs/design/reliability.md "Error
// injection".
#pragma once
#include <atomic>
#include <cstdint>

namespace emu {

enum InjectKind : uint8_t {
  kInjectWc = 1,    // a send WR completes with a chosen status; its QP goes to ERR
  kInjectFail = 2,  // a creation verb fails with a chosen errno, before it makes anything
};

// The verbs a kInjectFail rule can fail.
enum InjectVerb : uint8_t {
  kVerbRegMr = 1,  // ibv_reg_mr and its variants
  kVerbCreateQp = 2,
  kVerbCreateCq = 3,
  kVerbCreateSrq = 4,
  kVerbAllocPd = 5,
  kInjectVerbs = 6,
};

constexpr uint32_t kMaxInjectRules = 16;
// vendor_err of a completion an injection rule made (mlx5 puts its vendor syndrome there; no
// mlx5 syndrome has this value), so a test tells an injected error from a real one.
constexpr uint8_t kVendorErrInjected = 0xe1;

struct InjectRule {
  uint8_t kind;      // InjectKind
  uint8_t op;        // wc: FaultOp class of the WR (kFopAny: every WR); fail: InjectVerb
  uint8_t syndrome;  // wc: the CQE syndrome (mlx5 numbering) the WR completes with
  uint8_t rsvd;
  uint32_t qpn;  // wc: 0 = every QP
  uint32_t nth;  // acts on the Nth match since the rules were set (1 = first); 0: every match
  int32_t err;   // fail: the errno
  std::atomic<uint32_t> seen;   // matches so far
  std::atomic<uint32_t> fired;  // times it acted
};

// Written by whoever configures injection (seqlock: odd while a writer is inside).
struct InjectTable {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> wc_rules;    // engines test this one word before judging a WR
  std::atomic<uint32_t> verb_rules;  // the provider tests this one before a creation verb
  std::atomic<uint32_t> nrules;
  InjectRule rule[kMaxInjectRules];
};

// CqSlot::overrun values: the CQ takes CQEs; it overran (in error, takes no more); an injection
// armed it, so the next CQE finds it full.
enum CqOverrun : uint32_t { kCqOverrunNone = 0, kCqOverrunDone = 1, kCqOverrunArmed = 2 };

}  // namespace emu
