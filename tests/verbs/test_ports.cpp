// SPDX-License-Identifier: BSD-2-Clause
// Port down and up through the control API (emu/control.h), seen by a verbs program: the port's
// state in ibv_query_port, IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE from ibv_get_async_event,
// and RC traffic on a port that is down stalling as on a pulled cable (retries exhausted, or
// resumed when the port comes back while the transport timers are held).
//
// The port is taken down and up by the emu-ctl tool (the control API in another process), as a
// test harness does: a second mapping of the segment inside this process would hide from
// ThreadSanitizer that the engine's read of the port state pairs with the control's write.
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "verbs_fixture.h"

namespace {

using namespace vt;

class PortTest : public VerbsTest {
 protected:
  void TearDown() override {
    set_port(true);  // what the test left down comes back for the teardown's destroys
    set_timers(false);
    VerbsTest::TearDown();
  }

  // `emu-ctl timers hold|run`; returns whether the state changed.
  bool set_timers(bool held) {
    std::string out;
    int st = run_ctl(std::string("timers ") + (held ? "hold" : "run"), &out);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find(held ? "transport timers: held" : "transport timers: running"),
              std::string::npos)
        << out;
    return out.find("(unchanged)") == std::string::npos;
  }

  // Sets port 1 of emu0 with `emu-ctl port emu0 1 down|up` (same fabric: EMU_FABRIC is inherited);
  // returns whether the state changed.
  bool set_port(bool up) {
    std::string out;
    int st = run_ctl(std::string("port emu0 1 ") + (up ? "up" : "down"), &out);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find(up ? "state PORT_ACTIVE" : "state PORT_DOWN"), std::string::npos) << out;
    return out.find("(unchanged)") == std::string::npos;
  }

  // Runs `emu-ctl ARGS`; its exit status, and what it printed (with the command) in *out.
  static int run_ctl(const std::string& args, std::string* out) {
    std::string cmd = std::string(EMU_CTL) + " " + args;
    *out = cmd + ": ";
    FILE* f = popen(cmd.c_str(), "r");
    if (!f) return -1;
    char buf[256];
    while (std::fgets(buf, sizeof buf, f)) *out += buf;
    return pclose(f);
  }
};

// The next async event of ctx, waited for on its async fd up to the deadline; acked here.
::testing::AssertionResult next_port_event(ibv_context* ctx, ibv_event_type want, int port) {
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  int ms = static_cast<int>(std::chrono::milliseconds(kDeadline).count());
  if (poll(&pfd, 1, ms) != 1) return ::testing::AssertionFailure() << "no async event in time";
  ibv_async_event ev;
  if (ibv_get_async_event(ctx, &ev) != 0)
    return ::testing::AssertionFailure() << "ibv_get_async_event failed";
  ibv_event_type got = ev.event_type;
  int got_port = ev.element.port_num;
  ibv_ack_async_event(&ev);
  if (got != want || got_port != port)
    return ::testing::AssertionFailure()
           << "event " << ibv_event_type_str(got) << " port " << got_port << ", expected "
           << ibv_event_type_str(want) << " port " << port;
  return ::testing::AssertionSuccess();
}

// Whether an async event is waiting now. Delivery is done when set_port_state returns, so "none
// now" means none at all.
bool event_pending(ibv_context* ctx) {
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  return poll(&pfd, 1, 0) == 1;
}

ibv_port_attr query_port1(ibv_context* ctx) {
  ibv_port_attr pa;
  std::memset(&pa, 0, sizeof pa);
  EXPECT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  return pa;
}

TEST_F(PortTest, QueryPortFollowsDownAndUp) {
  ibv_port_attr pa = query_port1(ctx);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.phys_state, 5);  // LinkUp
  ASSERT_TRUE(set_port(false));
  pa = query_port1(ctx);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);
  EXPECT_EQ(pa.phys_state, 3);  // Disabled
  EXPECT_EQ(pa.lid, lid) << "the port keeps its LID";
  ASSERT_TRUE(set_port(true));
  pa = query_port1(ctx);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.phys_state, 5);
}

// The port's sysfs files (the file view, docs/design/rdma-cm-and-presence.md "Device presence"),
// read in this process as any program reads them, follow the port as ibv_query_port does.
std::string sysfs_port1(const char* attr) {
  std::ifstream in(std::string("/sys/class/infiniband/emu0/ports/1/") + attr);
  std::string line;
  std::getline(in, line);
  return line;
}

TEST_F(PortTest, SysfsStateFollowsDownAndUp) {
  EXPECT_EQ(sysfs_port1("state"), "4: ACTIVE");
  EXPECT_EQ(sysfs_port1("phys_state"), "5: LinkUp");
  ASSERT_TRUE(set_port(false));
  EXPECT_EQ(query_port1(ctx).state, IBV_PORT_DOWN);
  EXPECT_EQ(sysfs_port1("state"), "1: DOWN");
  EXPECT_EQ(sysfs_port1("phys_state"), "3: Disabled");
  ASSERT_TRUE(set_port(true));
  EXPECT_EQ(sysfs_port1("state"), "4: ACTIVE");
  EXPECT_EQ(sysfs_port1("phys_state"), "5: LinkUp");
}

TEST_F(PortTest, DownAndUpRaisePortEventsOnEveryContextOfTheDevice) {
  ibv_context* second = open_emu0();
  ASSERT_NE(second, nullptr);
  EXPECT_FALSE(event_pending(ctx));

  ASSERT_TRUE(set_port(false));
  for (ibv_context* c : {ctx, second}) {
    EXPECT_TRUE(next_port_event(c, IBV_EVENT_PORT_ERR, 1));
    EXPECT_FALSE(event_pending(c)) << "one event per change";
  }
  EXPECT_FALSE(set_port(false)) << "already down";
  EXPECT_FALSE(event_pending(ctx)) << "no event without a change";
  EXPECT_FALSE(event_pending(second));

  ASSERT_TRUE(set_port(true));
  for (ibv_context* c : {ctx, second}) {
    EXPECT_TRUE(next_port_event(c, IBV_EVENT_PORT_ACTIVE, 1));
    EXPECT_FALSE(event_pending(c));
  }
  EXPECT_FALSE(set_port(true)) << "already up";
  EXPECT_FALSE(event_pending(ctx));
  EXPECT_EQ(ibv_close_device(second), 0);
}

TEST_F(PortTest, RcRequesterOnADownPortExhaustsItsRetries) {
  ConnParams quick;
  quick.timeout = 1;  // 8 us per attempt
  quick.retry_cnt = 2;
  Pair p = make_pair({}, quick, quick);
  ASSERT_NE(p.a, nullptr);
  Buf src = make_buf(64, kAllAccess, 0xab), dst = make_buf(64, kAllAccess, 0);
  ASSERT_TRUE(set_port(false));

  ibv_sge sg = src.sge(0, 64);
  ibv_send_wr wr = rdma_wr(7, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey());
  ASSERT_EQ(post_one(p.a, &wr), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_RETRY_EXC_ERR, 7));
  EXPECT_EQ(qp_state(p.a), IBV_QPS_ERR);
  EXPECT_EQ(qp_state(p.b), IBV_QPS_RTS) << "the responder never heard of it";
  EXPECT_EQ(dst.p[0], 0) << "nothing crossed a link that is down";
  EXPECT_TRUE(next_port_event(ctx, IBV_EVENT_PORT_ERR, 1));
}

// The requester keeps the responder it found (QpSlot::resp_off) while no path changed: a port
// going down after traffic must still stop the next message.
TEST_F(PortTest, APortDownAfterTrafficStopsTheNextMessage) {
  ConnParams quick;
  quick.timeout = 1;
  quick.retry_cnt = 2;
  Pair p = make_pair({}, quick, quick);
  ASSERT_NE(p.a, nullptr);
  Buf src = make_buf(64, kAllAccess, 0xab), dst = make_buf(64, kAllAccess, 0);
  ibv_sge sg = src.sge(0, 64);
  ibv_send_wr wr = rdma_wr(5, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey());
  ASSERT_EQ(post_one(p.a, &wr), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 5));
  ASSERT_EQ(dst.p[0], 0xab);

  std::memset(dst.p, 0, 64);
  ASSERT_TRUE(set_port(false));
  wr.wr_id = 6;
  ASSERT_EQ(post_one(p.a, &wr), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_RETRY_EXC_ERR, 6));
  EXPECT_EQ(dst.p[0], 0) << "nothing crossed a link that is down";
  EXPECT_TRUE(next_port_event(ctx, IBV_EVENT_PORT_ERR, 1));
}

// While the port is down the transport timers are held (emu-ctl timers hold), so the steps of
// the test spend no retry however long they take, with the engine inline or on its own thread:
// what follows depends on the order of the steps, not on their speed. Released with the port
// back, the attempt under way runs out its timer (16.8 ms, timeout 12) and the message goes again.
ConnParams patient_params() {
  ConnParams patient;
  patient.timeout = 12;
  patient.retry_cnt = 2;
  return patient;
}

TEST_F(PortTest, HeldTimersSpendNoRetryUntilTheyRunAgain) {
  ConnParams quick;
  quick.timeout = 1;  // 8 us per attempt: 24 us of budget
  quick.retry_cnt = 2;
  Pair p = make_pair({}, quick, quick);
  ASSERT_NE(p.a, nullptr);
  Buf src = make_buf(64, kAllAccess, 0xab), dst = make_buf(64, kAllAccess, 0);
  ASSERT_TRUE(set_timers(true));
  EXPECT_FALSE(set_timers(true)) << "already held";
  ASSERT_TRUE(set_port(false));

  ibv_sge sg = src.sge(0, 64);
  ibv_send_wr wr = rdma_wr(9, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey());
  ASSERT_EQ(post_one(p.a, &wr), 0);
  // Far more polls than the budget lasts (an empty poll is well under a microsecond, and the
  // inline engine checks a stall's timer at least every millisecond): none spends it.
  for (int i = 0; i < 200000; ++i) {
    ibv_wc wc;
    ASSERT_EQ(ibv_poll_cq(p.cqa, 1, &wc), 0) << "completed while the timers were held";
  }
  EXPECT_EQ(qp_state(p.a), IBV_QPS_RTS);

  ASSERT_TRUE(set_timers(false));
  EXPECT_FALSE(set_timers(false)) << "already running";
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_RETRY_EXC_ERR, 9));
  EXPECT_EQ(qp_state(p.a), IBV_QPS_ERR);
  EXPECT_EQ(dst.p[0], 0);
}

TEST_F(PortTest, RcTrafficResumesWhenThePortComesBack) {
  ConnParams patient = patient_params();
  Pair p = make_pair({}, patient, patient);
  ASSERT_NE(p.a, nullptr);
  Buf src = make_buf(64, kAllAccess, 0xcd), dst = make_buf(64, kAllAccess, 0);
  ASSERT_TRUE(set_timers(true));
  ASSERT_TRUE(set_port(false));

  ibv_sge sg = src.sge(0, 64);
  ibv_send_wr wr = rdma_wr(8, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey());
  ASSERT_EQ(post_one(p.a, &wr), 0);
  EXPECT_TRUE(drain(p.cqa).empty()) << "completed through a port that is down";
  EXPECT_EQ(dst.p[0], 0);

  ASSERT_TRUE(set_port(true));
  ASSERT_TRUE(set_timers(false));
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 8));
  EXPECT_EQ(dst.p[0], 0xcd);
  EXPECT_EQ(dst.p[63], 0xcd);
  EXPECT_EQ(qp_state(p.a), IBV_QPS_RTS);
}

TEST_F(PortTest, ConnectingOnADownPortSucceedsAndSendsWaitForTheLink) {
  ASSERT_TRUE(set_timers(true));
  ASSERT_TRUE(set_port(false));
  ConnParams patient = patient_params();
  Pair p = make_pair({}, patient, patient);  // INIT, RTR, RTS on a down port: accepted, as hardware
  ASSERT_NE(p.a, nullptr);
  ASSERT_EQ(qp_state(p.a), IBV_QPS_RTS);
  ASSERT_EQ(qp_state(p.b), IBV_QPS_RTS);
  Buf src = make_buf(256, kAllAccess, 0x5a), dst = make_buf(256, kAllAccess, 0);

  ibv_sge rsg = dst.sge(0, 256);
  ASSERT_EQ(post_recv(p.b, 21, &rsg, 1), 0);
  ibv_sge sg = src.sge(0, 256);
  ibv_send_wr wr = send_wr(20, IBV_WR_SEND, &sg, 1);
  ASSERT_EQ(post_one(p.a, &wr), 0);
  EXPECT_TRUE(drain(p.cqa).empty());
  EXPECT_TRUE(drain(p.cqb).empty()) << "received through a port that is down";

  ASSERT_TRUE(set_port(true));
  ASSERT_TRUE(set_timers(false));
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 20));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqb, IBV_WC_SUCCESS, 21, &wc));
  EXPECT_EQ(wc.byte_len, 256u);
  EXPECT_EQ(dst.p[255], 0x5a);
}

}  // namespace
