// SPDX-License-Identifier: BSD-2-Clause
// Error injection on demand (docs/design/reliability.md, "Error injection"): rules in the segment
// that complete a chosen send WR with a chosen status or fail the Nth creation verb with an errno,
// and actions on live objects — an async event with the state change hardware makes with it, a QP
// moved to ERR, a CQ whose next CQE finds it full.
//
// Text form of the rules (EMU_INJECT, `emu-ctl inject set RULES`): rules separated by ';'
//   wc:status=S[,qp=N][,op=send|write|read|atomic][,nth=K]
//       the Kth send WR matching qp and op (default 1; 0: every one) completes with status S
//       (rem_access_err, IBV_WC_LOC_PROT_ERR, ...; ibv_wc_status names, any case, with or
//       without IBV_WC_) and vendor_err 0xe1 instead of executing; the QP goes to ERR (RC) or SQE
//   fail:verb=V,errno=E[,nth=K]
//       the Kth call of V (reg_mr, create_qp, create_cq, create_srq, alloc_pd) in any process of
//       the fabric returns NULL with errno E (a name, ENOMEM, or a number) and makes nothing
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "emu/segment.h"
#include "emu/status.h"

namespace emu {

struct InjectRuleSpec {
  uint8_t kind = 0;  // InjectKind
  uint8_t op = 0;    // wc: FaultOp; fail: InjectVerb
  uint8_t syndrome = 0;
  uint32_t qpn = 0;
  uint32_t nth = 1;
  int32_t err = 0;
};

struct InjectRules {
  uint32_t n = 0;
  InjectRuleSpec rule[kMaxInjectRules] = {};
};

// Parses the text form; Status::invalid with *err naming the bad part.
Status inject_parse(std::string_view text, InjectRules* out, std::string* err);
// The text form (inject_parse reads it back to the same rules).
std::string inject_format(const InjectRules& rules);

// Publishes rules to the fabric (replacing any), with their match counters at zero.
void inject_set(Segment* seg, const InjectRules& rules);
void inject_clear(Segment* seg);
// EMU_INJECT: its rules, set once per process (at its first device opened) unless the fabric
// already has the same rules (then their counters go on: the second process of a run keeps
// the first one's counts). A bad text is logged and ignored.
void inject_from_env(Segment* seg);
InjectRules inject_get(const Segment* seg);
// Per rule, the times it acted since set.
void inject_fired(const Segment* seg, uint32_t fired[kMaxInjectRules]);

// The engine's question for a send WR about to execute (only while wc rules are set): true and
// the syndrome if a rule acts on it. Counts the match, so each WR must be asked once.
bool inject_wc_decide(Segment* seg, uint32_t qpn, uint8_t wqe_opcode, uint8_t* syndrome);
// The provider's question before a creation verb: 0, or the errno it must fail with.
int inject_verb_decide(Segment* seg, InjectVerb verb);
inline int inject_verb_check(Segment* seg, InjectVerb verb) {
  return seg->hdr()->inject.verb_rules.load(std::memory_order_relaxed) == 0
             ? 0
             : inject_verb_decide(seg, verb);
}

// Names: ibv_wc_status names to syndromes, async event names (qp_fatal, IBV_EVENT_CQ_ERR, ...)
// to AsyncEvent; false if unknown.
bool inject_status_syndrome(std::string_view name, uint8_t* syndrome);
const char* inject_syndrome_name(uint8_t syndrome);
bool inject_event_type(std::string_view name, uint32_t* type);

// Actions on live objects, as hardware takes them (docs/design/reliability.md):
//   QP events (qp_fatal, qp_req_err, qp_access_err: the QP goes to ERR first; comm_est,
//   sq_drained, path_mig, path_mig_err, qp_last_wqe_reached): object = QP number
//   cq_err: object = the CQ's handle (slot); the CQ takes no more CQEs, its QPs go to ERR with
//   QP_FATAL, as after an overrun
//   srq_err, srq_limit_reached (the limit is disarmed): object = the SRQ's handle (slot)
//   port_err / port_active (the port goes down / up), lid_change, pkey_change, sm_change,
//   client_reregister, gid_change: object = device index, port = port number
//   device_fatal: object = device index; every QP of the device goes to ERR, every context
//   gets the event
// Status::not_found for an object that is not live, Status::invalid for a wrong kind.
Status inject_event(Segment* seg, uint32_t type, uint32_t object, uint32_t port = 0);
// The QP to ERR as a fatal error would: IBV_EVENT_QP_FATAL.
Status inject_qp_error(Segment* seg, uint32_t qpn);
// The CQ's next CQE finds it full: CQ_ERR, and its QPs to ERR with QP_FATAL.
Status inject_cq_overrun(Segment* seg, uint32_t cq);

}  // namespace emu
