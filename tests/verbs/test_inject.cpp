// SPDX-License-Identifier: BSD-2-Clause
// Error injection on demand (docs/design/reliability.md, "Error injection"), seen by a verbs
// program: a chosen WR completes with a chosen status and the rest of its queue flushes; async
// events come with the state change hardware makes with them; a CQ armed to overrun fails at its
// next CQE; the Nth creation verb fails with a chosen errno and makes nothing. Everything is set
// through `emu-ctl inject` (another process, as a harness does) on this process's own fabric.
#include <cstdio>
#include <cstring>
#include <string>

#include "verbs_fixture.h"

namespace vt {
namespace {

// `emu-ctl ARGS` in this process's fabric: its output, or "FAILED: ..." if it failed.
std::string ctl(const std::string& args) { return run_command(std::string(EMU_CTL) + " " + args); }

bool ctl_ok(const std::string& args) { return ctl(args).rfind("FAILED", 0) != 0; }

// The object lines of `emu-ctl census` (not its process list, which holds emu-ctl itself).
std::string census_objects() {
  std::string out, all = ctl("census");
  for (size_t at = 0, nl; at < all.size(); at = nl + 1) {
    nl = all.find('\n', at);
    if (nl == std::string::npos) nl = all.size();
    std::string line = all.substr(at, nl - at);
    if (line.find(" owner pid ") != std::string::npos) out += line + "\n";
  }
  return out;
}

class Inject : public VerbsTest {
 protected:
  void SetUpObjects() override {
    Pair p = make_pair();
    ASSERT_TRUE(p.a && p.b);
    a = p.a, b = p.b, cqa = p.cqa, cqb = p.cqb;
    la = make_buf(4096, kAllAccess, 0x11);
    lb = make_buf(4096, kAllAccess, 0x22);
  }
  void TearDown() override {
    ctl("inject clear");
    EXPECT_EQ(ctl("races").rfind("0 race events", 0), 0u) << "the device recorded a race";
    VerbsTest::TearDown();
  }

  // Four signaled WRITEs of 64 bytes from a into b at offsets 0, 64, 128, 192 (wr_id 1..4).
  void post_writes() {
    for (uint64_t i = 0; i < 4; ++i) {
      ibv_sge s = la.sge(i * 64, 64);
      ibv_send_wr w = rdma_wr(i + 1, IBV_WR_RDMA_WRITE, &s, 1, lb.addr() + i * 64, lb.rkey());
      ASSERT_EQ(post_one(a, &w), 0);
    }
  }

  // The wr_id the injected status hit, after a rule set on QP a's second WRITE.
  uint64_t second_write_fails() {
    std::string rule =
        "wc:status=IBV_WC_REM_ACCESS_ERR,op=write,nth=2,qp=" + std::to_string(a->qp_num);
    EXPECT_TRUE(ctl_ok("inject set '" + rule + "'"));
    post_writes();
    std::vector<ibv_wc> wc = poll_n(cqa, 4);
    EXPECT_EQ(wc.size(), 4u);
    uint64_t hit = 0;
    for (const ibv_wc& c : wc) {
      if (c.status == IBV_WC_REM_ACCESS_ERR) {
        hit = c.wr_id;
        EXPECT_EQ(c.vendor_err, 0xe1u) << "an injected completion's vendor_err";
        EXPECT_EQ(c.qp_num, a->qp_num);
      }
    }
    if (wc.size() == 4) {
      EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc[2].status, IBV_WC_WR_FLUSH_ERR);
      EXPECT_EQ(wc[3].status, IBV_WC_WR_FLUSH_ERR);
    }
    EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
    EXPECT_TRUE(has_pattern(lb.p, 64, 0x11, 0)) << "the first WRITE landed";
    EXPECT_TRUE(has_pattern(lb.p + 64, 192, 0x22, 0)) << "the failed and flushed ones did not";
    EXPECT_NE(ctl("inject").find("fired 0 1"), std::string::npos);
    return hit;
  }

  ibv_qp *a = nullptr, *b = nullptr;
  ibv_cq *cqa = nullptr, *cqb = nullptr;
  Buf la, lb;
};

TEST_F(Inject, ChosenWrCompletesWithChosenStatusAndTheRestFlush) {
  EXPECT_EQ(second_write_fails(), 2u);
}

TEST_F(Inject, SameRuleHitsTheSameWrAgain) {
  uint64_t first = second_write_fails();
  // A fresh pair, the same rule (set again: counts from zero): the same WR.
  Pair p = make_pair();
  ASSERT_TRUE(p.a && p.b);
  a = p.a, b = p.b, cqa = p.cqa, cqb = p.cqb;
  std::memset(lb.p, 0x22, lb.len);
  EXPECT_EQ(second_write_fails(), first);
}

TEST_F(Inject, QpErrorFromOutsideIsQpFatalAndFlushes) {
  ibv_sge r = lb.sge(0, 64);
  ASSERT_EQ(post_recv(a, 7, &r, 1), 0);
  ASSERT_TRUE(ctl_ok("inject qp-error " + std::to_string(a->qp_num)));
  ibv_async_event ev;
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_QP_FATAL, &ev));
  EXPECT_EQ(ev.element.qp, a);
  EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
  EXPECT_TRUE(wait_wc(cqa, IBV_WC_WR_FLUSH_ERR, 7)) << "the posted receive is flushed";
  EXPECT_EQ(qp_state(b), IBV_QPS_RTS);
}

TEST_F(Inject, QpEventsComeWithTheirStateChange) {
  ibv_async_event ev;
  ASSERT_TRUE(ctl_ok("inject event comm_est " + std::to_string(b->qp_num)));
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_COMM_EST, &ev));
  EXPECT_EQ(ev.element.qp, b);
  ASSERT_TRUE(ctl_ok("inject event IBV_EVENT_PATH_MIG " + std::to_string(b->qp_num)));
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_PATH_MIG, &ev));
  EXPECT_EQ(qp_state(b), IBV_QPS_RTS) << "informational events change nothing";
  ASSERT_TRUE(ctl_ok("inject event qp_access_err " + std::to_string(b->qp_num)));
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_QP_ACCESS_ERR, &ev));
  EXPECT_EQ(qp_state(b), IBV_QPS_ERR);
  EXPECT_FALSE(ctl_ok("inject event qp_fatal 0xfffff0")) << "no such QP";
  EXPECT_FALSE(ctl_ok("inject event qp_happy 1"));
}

TEST_F(Inject, CqErrPutsItsQpsInErr) {
  ASSERT_TRUE(ctl_ok("inject event cq_err " + std::to_string(cqa->handle)));
  ibv_async_event ev;
  ASSERT_TRUE(get_async_event(ctx, &ev));
  ibv_ack_async_event(&ev);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, cqa);
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_QP_FATAL, &ev));
  EXPECT_EQ(ev.element.qp, a);
  EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
}

TEST_F(Inject, OverrunArmedFailsTheNextCqe) {
  // One WRITE completes normally, then the CQ is armed: the next one's CQE finds it full.
  ibv_sge s = la.sge(0, 64);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &s, 1, lb.addr(), lb.rkey());
  ASSERT_EQ(post_one(a, &w), 0);
  ASSERT_TRUE(wait_wc(cqa, IBV_WC_SUCCESS, 1));
  ASSERT_TRUE(ctl_ok("inject overrun " + std::to_string(cqa->handle)));
  EXPECT_FALSE(async_event_pending(ctx)) << "nothing happens before the next CQE";
  w.wr_id = 2;
  ASSERT_EQ(post_one(a, &w), 0);
  ibv_async_event ev;
  ASSERT_TRUE(get_async_event(ctx, &ev));
  ibv_ack_async_event(&ev);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_QP_FATAL, &ev));
  EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
  EXPECT_TRUE(drain(cqa).empty()) << "a CQ in error takes no CQE";
}

TEST_F(Inject, SrqAndPortAndDeviceEvents) {
  ibv_srq* srq = make_srq(16);
  ASSERT_TRUE(srq);
  ibv_srq_attr at{};
  at.srq_limit = 4;
  ASSERT_EQ(ibv_modify_srq(srq, &at, IBV_SRQ_LIMIT), 0);
  ibv_async_event ev;
  ASSERT_TRUE(ctl_ok("inject event srq_limit_reached " + std::to_string(srq->handle)));
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &ev));
  EXPECT_EQ(ev.element.srq, srq);
  ASSERT_EQ(ibv_query_srq(srq, &at), 0);
  EXPECT_EQ(at.srq_limit, 0u) << "the limit fired is disarmed";
  ASSERT_TRUE(ctl_ok("inject event srq_err " + std::to_string(srq->handle)));
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_SRQ_ERR, &ev));

  ASSERT_TRUE(ctl_ok("inject event port_err emu0 1"));
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_PORT_ERR, &ev));
  EXPECT_EQ(ev.element.port_num, 1);
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);
  ASSERT_TRUE(ctl_ok("inject event port_active emu0 1"));
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_PORT_ACTIVE, &ev));
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);

  ASSERT_TRUE(ctl_ok("inject event device_fatal emu0"));
  ASSERT_TRUE(get_async_event(ctx, &ev));
  ibv_ack_async_event(&ev);
  EXPECT_EQ(ev.event_type, IBV_EVENT_DEVICE_FATAL);
  EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
  EXPECT_EQ(qp_state(b), IBV_QPS_ERR);
}

// The Nth call of each creation verb fails with the chosen errno and leaves the census as it was.
TEST_F(Inject, NthCreateFailsWithChosenErrnoAndMakesNothing) {
  ASSERT_TRUE(
      ctl_ok("inject set 'fail:verb=reg_mr,nth=2,errno=EACCES;fail:verb=create_qp,errno=EAGAIN;"
             "fail:verb=create_cq,errno=ENOSPC;fail:verb=create_srq,errno=EPERM;"
             "fail:verb=alloc_pd,errno=ENOMEM'"));
  std::string before = census_objects();
  EXPECT_NE(before, "") << "the census lists this test's objects";
  ibv_mr* first = ibv_reg_mr(pd, la.p, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(first, nullptr);
  ASSERT_EQ(ibv_dereg_mr(first), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, la.p, 64, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EACCES);
  errno = 0;
  EXPECT_EQ(create_rc_qp(pd, cqa, cqa), nullptr);
  EXPECT_EQ(errno, EAGAIN);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx, 16, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, ENOSPC);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_srq(pd, &sa), nullptr);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_EQ(ibv_alloc_pd(ctx), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(census_objects(), before) << "a failed create left something behind";
  // Each rule acted once: the next calls succeed.
  ibv_mr* third = ibv_reg_mr(pd, la.p, 64, IBV_ACCESS_LOCAL_WRITE);
  EXPECT_NE(third, nullptr);
  if (third) {
    EXPECT_EQ(ibv_dereg_mr(third), 0);
  }
  ibv_pd* pd2 = ibv_alloc_pd(ctx);
  EXPECT_NE(pd2, nullptr);
  if (pd2) {
    EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
  }
  std::string out = ctl("inject");
  for (int i = 0; i < 5; ++i)
    EXPECT_NE(out.find("fired " + std::to_string(i) + " 1"), std::string::npos) << out;
}

}  // namespace
}  // namespace vt
