// SPDX-License-Identifier: BSD-2-Clause
// fork(): a child of fork() is a process of its own on the fabric (docs/design/verbs-provider.md,
// "Fork"). The parent makes its objects, forks, and the child makes its own on a context of its
// own; the two then run RC traffic with each other. A buffer at the same address in both (static,
// so the child inherits it) is registered by the child only: a SEND into it must land in the child,
// and the parent's copy must stay untouched (before fork support, the child's objects were the
// parent's and the engine wrote the bytes into the parent). The census shows each process's
// objects under its own pid, and the child's exit or SIGKILL releases only the child's.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "emudv_link.h"
#include "fork_check.h"
#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr size_t kLen = 4096;
constexpr uint32_t kMsg = 1500;
alignas(4096) uint8_t g_parent_buf[kLen];
alignas(4096) uint8_t g_child_buf[kLen];  // registered in the child only

// One process's RC endpoint on a context of its own.
struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  bool make(uint8_t* buf) {
    ctx = peer_open_emu0();
    pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
    cq = pd ? ibv_create_cq(ctx, 64, nullptr, nullptr, 0) : nullptr;
    qp = cq ? create_rc_qp(pd, cq, cq) : nullptr;
    mr = qp ? ibv_reg_mr(pd, buf, kLen, kAllAccess) : nullptr;
    return mr != nullptr;
  }
  // The parent's release (a child leaves by _exit, to the sweep); LeakSanitizer found the MR's
  // provider block unreachable at exit before the test gave its objects back.
  ~Side() {
    if (mr) ibv_dereg_mr(mr);
    if (qp) ibv_destroy_qp(qp);
    if (cq) ibv_destroy_cq(cq);
    if (pd) ibv_dealloc_pd(pd);
    if (ctx) ibv_close_device(ctx);
  }
};

struct Wire {
  uint16_t lid;
  uint32_t qpn;
};

// n bytes from fd within 10 s (false on end of file, error or deadline): nothing here waits
// unbounded on the other process.
bool read_by(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 10000) != 1) return false;
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A SEND of kMsg bytes from off 0 of the side's buffer (signaled).
int post_send_msg(const Side& s, uint8_t* buf, uint64_t id) {
  ibv_sge sg{reinterpret_cast<uint64_t>(buf), kMsg, s.mr->lkey};
  ibv_send_wr wr = send_wr(id, IBV_WR_SEND, &sg, 1);
  return post_one(s.qp, &wr);
}
int post_recv_msg(const Side& s, uint8_t* buf, uint64_t id) {
  ibv_sge sg{reinterpret_cast<uint64_t>(buf + 2048), kMsg, s.mr->lkey};
  return post_recv(s.qp, id, &sg, 1);
}

// What the child found: 0 = all well, else the step that failed.
enum ChildStep : uint8_t {
  kOk = 0,
  kInheritedUsable,  // a verb on the parent's QP or CQ was not refused with EPERM
  kSetup,
  kConnect,
  kRecvData,
  kSendDone,
};

// The child: checks that the parent's objects are not its own, makes its side, exchanges one
// message each way with the parent, reports, then waits to be told to exit (or to be killed).
[[noreturn]] void run_child(const Side& parent, int in, int out) {
  alarm(60);  // bounded even if the parent never answers
  auto report = [out](uint8_t step) {
    if (!write_all(out, &step, 1)) _exit(3);
  };
  auto fail = [](uint8_t step) { _exit(10 + step); };  // the parent reads it from the status
  ibv_sge sg{reinterpret_cast<uint64_t>(g_parent_buf), 8, parent.mr->lkey};
  ibv_send_wr wr = send_wr(1, IBV_WR_SEND, &sg, 1), *bad = nullptr;
  ibv_wc wc;
  if (ibv_post_send(parent.qp, &wr, &bad) != EPERM || ibv_poll_cq(parent.cq, 1, &wc) != -1 ||
      ibv_destroy_qp(parent.qp) != EPERM || ibv_dereg_mr(parent.mr) != EPERM)
    fail(kInheritedUsable);
  Side c;
  if (!c.make(g_child_buf)) fail(kSetup);
  Wire mine{port_lid(c.ctx), c.qp->qp_num}, theirs{};
  if (!write_all(out, &mine, sizeof mine) || !read_by(in, &theirs, sizeof theirs)) _exit(3);
  if (connect_qp(c.qp, theirs.lid, theirs.qpn, 200, 100) != 0 || post_recv_msg(c, g_child_buf, 7))
    fail(kConnect);
  report(kOk);  // ready: the parent may send
  auto got = poll_n(c.cq, 1);
  bool received = got.size() == 1 && got[0].status == IBV_WC_SUCCESS && got[0].wr_id == 7 &&
                  has_pattern(g_child_buf + 2048, kMsg, 11, 3);
  fill_pattern(g_child_buf, kMsg, 22, 5);
  got.clear();
  if (post_send_msg(c, g_child_buf, 8) == 0) got = poll_n(c.cq, 1);
  bool sent = got.size() == 1 && got[0].status == IBV_WC_SUCCESS;
  report(!received ? kRecvData : !sent ? kSendDone : kOk);
  uint8_t cmd = 0;
  read_by(in, &cmd, 1);  // 'x': exit without cleaning up (the sweep's to release)
  _exit(0);
}

// Objects the census lists as owned by pid (emu-ctl attaches, which sweeps the dead first).
int census_objects_of(int pid) {
  FILE* f = popen(EMU_CTL " census --json", "r");
  if (!f) return -1;
  std::string s;
  char b[4096];
  for (size_t n; (n = fread(b, 1, sizeof b, f)) > 0;) s.append(b, n);
  if (pclose(f) != 0) return -1;
  std::string key = "\"owner_pid\":" + std::to_string(pid) + ",";
  int count = 0;
  for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + 1)) ++count;
  return count;
}

class ForkTest : public VerbsTest, public ::testing::WithParamInterface<bool> {};

TEST_P(ForkTest, ParentAndChildRunTheirOwnObjects) {
  const bool kill_child = GetParam();
  const uctlite::EmudvFns* dv = uctlite::emudv_fns();
  ASSERT_NE(dv, nullptr);
  Side p;
  ASSERT_TRUE(p.make(g_parent_buf));
  Pair local = make_pair();  // the parent's own traffic, before and after the child
  Buf a = make_buf(kLen), b = make_buf(kLen);
  fill_pattern(a.p, 64, 5, 1);
  ASSERT_TRUE(send_through(local.a, local.cqa, a.sge(0, 64), local.b, local.cqb, b.sge(0, 64), 1));
  int parent_objects = census_objects_of(getpid());
  ASSERT_GT(parent_objects, 0);

  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(to_child[1]);
    close(from_child[0]);
    run_child(p, to_child[0], from_child[1]);
  }
  close(to_child[0]);
  close(from_child[1]);
  int in = from_child[0], out = to_child[1];
  auto reap = [&] {
    close(out);
    int st = wait_exit_status(child);  // 10 + ChildStep: that step
    close(in);
    return st;
  };

  Wire mine{port_lid(p.ctx), p.qp->qp_num}, theirs{};
  uint8_t step = 0xff;
  ASSERT_TRUE(read_by(in, &theirs, sizeof theirs)) << "child exit status " << reap();
  ASSERT_TRUE(write_all(out, &mine, sizeof mine));
  ASSERT_EQ(connect_qp(p.qp, theirs.lid, theirs.qpn, 100, 200), 0);
  ASSERT_EQ(post_recv_msg(p, g_parent_buf, 9), 0);
  ASSERT_TRUE(read_by(in, &step, 1));
  ASSERT_EQ(step, kOk) << "child exit status " << reap();
  fill_pattern(g_parent_buf, kMsg, 11, 3);
  ASSERT_EQ(post_send_msg(p, g_parent_buf, 10), 0);
  auto got = poll_n(p.cq, 2);  // our SEND's completion and the child's SEND into our buffer
  ASSERT_EQ(got.size(), 2u);
  for (const ibv_wc& wc : got) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_TRUE(has_pattern(g_parent_buf + 2048, kMsg, 22, 5)) << "the child's SEND missed us";
  ASSERT_TRUE(read_by(in, &step, 1));
  EXPECT_EQ(step, kOk) << "child step " << int(step) << " failed";
  // The child's buffer is at the same address here, never registered: untouched.
  for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(g_child_buf[i], 0) << "offset " << i;
  // Ours under our pid, the child's five (context, PD, CQ, QP, MR) under its own.
  EXPECT_EQ(census_objects_of(getpid()), parent_objects);
  EXPECT_EQ(census_objects_of(child), 5);

  if (kill_child) {
    kill(child, SIGKILL);
  } else {
    ASSERT_TRUE(write_all(out, "x", 1));
  }
  EXPECT_EQ(reap(), kill_child ? 128 + SIGKILL : 0);
  EXPECT_EQ(census_objects_of(child), 0);
  EXPECT_EQ(census_objects_of(getpid()), parent_objects);
  fill_pattern(a.p, 64, 6, 1);
  EXPECT_TRUE(send_through(local.a, local.cqa, a.sge(0, 64), local.b, local.cqb, b.sge(0, 64), 3));
  EXPECT_EQ(dv->races_recorded(), 0u);
}

INSTANTIATE_TEST_SUITE_P(ExitOrKill, ForkTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "killed" : "exits"; });

}  // namespace
}  // namespace vt
