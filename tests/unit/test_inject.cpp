// SPDX-License-Identifier: BSD-2-Clause
// Error injection rules (emu/inject.h): the text form and its errors, and the decisions — the Nth
// match acts, the same rules acting on the same sequence act on the same WR every time, a verb
// rule fails only its verb.
#include <gtest/gtest.h>

#include <cerrno>

#include "emu/inject.h"
#include "emu/wqe.h"

using namespace emu;

namespace {

TEST(Inject, TextRoundTrips) {
  InjectRules r;
  std::string err;
  ASSERT_EQ(inject_parse("wc:status=IBV_WC_REM_ACCESS_ERR,qp=0x40,op=write,nth=3; "
                         "fail:verb=reg_mr,errno=ENOMEM,nth=2;wc:status=wr_flush_err,nth=0",
                         &r, &err),
            Status::ok)
      << err;
  ASSERT_EQ(r.n, 3u);
  EXPECT_EQ(r.rule[0].kind, kInjectWc);
  EXPECT_EQ(r.rule[0].syndrome, kSynRemoteAccess);
  EXPECT_EQ(r.rule[0].qpn, 0x40u);
  EXPECT_EQ(r.rule[0].op, kFopWrite);
  EXPECT_EQ(r.rule[0].nth, 3u);
  EXPECT_EQ(r.rule[1].kind, kInjectFail);
  EXPECT_EQ(r.rule[1].op, kVerbRegMr);
  EXPECT_EQ(r.rule[1].err, ENOMEM);
  EXPECT_EQ(r.rule[2].nth, 0u);
  std::string text = inject_format(r);
  InjectRules back;
  ASSERT_EQ(inject_parse(text, &back, &err), Status::ok) << text << ": " << err;
  EXPECT_EQ(inject_format(back), text);
}

TEST(Inject, BadTextIsRefusedWithItsPart) {
  InjectRules r;
  std::string err;
  EXPECT_EQ(inject_parse("boom:nth=1", &r, &err), Status::invalid);
  EXPECT_NE(err.find("boom"), std::string::npos);
  EXPECT_EQ(inject_parse("wc:status=not_a_status", &r, &err), Status::invalid);
  EXPECT_NE(err.find("not_a_status"), std::string::npos);
  EXPECT_EQ(inject_parse("wc:qp=3", &r, &err), Status::invalid);           // no status
  EXPECT_EQ(inject_parse("fail:verb=reg_mr", &r, &err), Status::invalid);  // no errno
  EXPECT_EQ(inject_parse("fail:verb=open_device,errno=5", &r, &err), Status::invalid);
  EXPECT_EQ(inject_parse("fail:verb=alloc_pd,errno=-1", &r, &err), Status::invalid);
}

TEST(Inject, NamesOfStatusesAndEvents) {
  uint8_t syn = 0;
  EXPECT_TRUE(inject_status_syndrome("loc_prot_err", &syn));
  EXPECT_EQ(syn, kSynLocalProt);
  EXPECT_STREQ(inject_syndrome_name(kSynWrFlush), "wr_flush_err");
  uint32_t type = 0;
  EXPECT_TRUE(inject_event_type("IBV_EVENT_SRQ_LIMIT_REACHED", &type));
  EXPECT_EQ(type, kEvSrqLimit);
  EXPECT_TRUE(inject_event_type("device_fatal", &type));
  EXPECT_EQ(type, kEvDeviceFatal);
  EXPECT_FALSE(inject_event_type("qp_happy", &type));
}

// The WRs a rule acts on among a fixed sequence (QP numbers and opcodes), as the engine asks.
// Parses text and sets its rules.
void set(Segment* s, const char* text) {
  InjectRules rules;
  std::string err;
  EXPECT_EQ(inject_parse(text, &rules, &err), Status::ok) << err;
  inject_set(s, rules);
}

std::vector<int> hits(Segment* s, const char* rules) {
  set(s, rules);
  const uint8_t ops[] = {kOpSend, kOpRdmaWrite, kOpRdmaWrite, kOpRdmaRead, kOpRdmaWrite, kOpSend};
  std::vector<int> out;
  for (int i = 0; i < 12; ++i) {
    uint8_t syn = 0;
    if (inject_wc_decide(s, 0x100 + i % 2, ops[i % 6], &syn)) out.push_back(i);
  }
  return out;
}

TEST(Inject, NthMatchActsTheSameEveryTime) {
  Segment* s = Segment::get();
  // The second WRITE of QP 0x100: WRs 0x100 get i = 0, 2, 4, ... with ops send, write, write, ...
  std::vector<int> first = hits(s, "wc:status=rem_access_err,qp=0x100,op=write,nth=2");
  EXPECT_EQ(first, std::vector<int>({4}));
  EXPECT_EQ(hits(s, "wc:status=rem_access_err,qp=0x100,op=write,nth=2"), first);
  EXPECT_EQ(hits(s, "wc:status=loc_prot_err,nth=0,op=read").size(), 2u);
  EXPECT_EQ(hits(s, "wc:status=loc_prot_err,nth=13"), std::vector<int>());
  uint32_t fired[kMaxInjectRules];
  hits(s, "wc:status=rem_op_err,op=send,nth=1");
  inject_fired(s, fired);
  EXPECT_EQ(fired[0], 1u);
  inject_clear(s);
  EXPECT_EQ(s->hdr()->inject.wc_rules.load(), 0u);
}

TEST(Inject, VerbRuleFailsTheNthCallOfItsVerbOnly) {
  Segment* s = Segment::get();
  set(s, "fail:verb=create_qp,errno=EAGAIN,nth=2");
  EXPECT_EQ(inject_verb_check(s, kVerbRegMr), 0);
  EXPECT_EQ(inject_verb_check(s, kVerbCreateQp), 0);
  EXPECT_EQ(inject_verb_check(s, kVerbCreateQp), EAGAIN);
  EXPECT_EQ(inject_verb_check(s, kVerbCreateQp), 0);
  inject_clear(s);
  EXPECT_EQ(s->hdr()->inject.verb_rules.load(), 0u);
  EXPECT_EQ(inject_verb_check(s, kVerbCreateQp), 0);
}

}  // namespace
