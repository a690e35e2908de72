// SPDX-License-Identifier: BSD-2-Clause
// 64 processes attached to one device at once (issue 18 item 3). Each member process opens emu0,
// makes a PD, a CQ with a completion channel, an RC QP and an MR; members 2k and 2k+1 connect their
// QPs and each sends the other one data-checked message, waiting on completion events (64 busy
// pollers on 2 cores would starve one another). Then:
// - AllExit: every member exits (half destroying their objects first, half leaving them to the
//   exit); the last one's detach removes the fabric file.
// - SomeKilled: a quarter of the members are SIGKILLed holding every object; the census (taken by a
//   new attacher, whose attach sweeps the dead) shows the survivors' objects only, nothing of the
//   dead, no leaked heap block; then the survivors exit and the file goes.
// - AllKilled: every member is SIGKILLed; the next attacher sweeps all 64 records: an empty census,
//   a clean heap; the file goes with the next attacher that exits normally.
// Every member also checks that the device recorded no race. Label procs.
#include <poll.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../../stress/emudv_link.h"
#include "verbs_fixture.h"
#include "xrc_players.h"

namespace vt {
namespace {

constexpr const char* kMemberRole = "procs-member";
constexpr int kMembers = 64;
constexpr size_t kMsgBytes = 2048;
constexpr int kEventWaitMs = 60000;  // a bound on a member's wait, never reached when it works
constexpr std::chrono::seconds kPeerDeadline{120};

struct Info {
  uint32_t ok;
  char err[120];
  uint16_t lid;
  uint32_t qpn;
};

struct Partner {
  uint32_t index;  // this member's index (its payload's seed)
  uint16_t lid;
  uint32_t qpn;
};

struct Report {
  uint32_t ok;
  char err[160];
};

enum Ending : uint8_t { kExitDestroying = 1, kExitLeaving = 2 };

// ---- the member process ----

struct Member {
  PeerDevice dev;
  ibv_comp_channel* channel = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  alignas(4096) uint8_t buf[2 * kMsgBytes];  // send half, receive half
};

// Waits for n completions through the CQ's channel (request, poll, then sleep on the event).
bool wait_completions(Member& m, ibv_wc* wc, int n, Report& rep) {
  int got = 0;
  while (got < n) {
    if (ibv_req_notify_cq(m.dev.cq, 0)) {
      peer_report_failure(rep, "req_notify_cq");
      return false;
    }
    int r = ibv_poll_cq(m.dev.cq, n - got, wc + got);
    if (r < 0) {
      peer_report_failure(rep, "poll_cq %d", r);
      return false;
    }
    got += r;
    if (got == n || r > 0) continue;
    pollfd pf = {m.channel->fd, POLLIN, 0};
    if (poll(&pf, 1, kEventWaitMs) != 1) {
      peer_report_failure(rep, "no completion event (%d of %d completions)", got, n);
      return false;
    }
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    if (ibv_get_cq_event(m.channel, &cq, &cq_ctx)) {
      peer_report_failure(rep, "get_cq_event");
      return false;
    }
    ibv_ack_cq_events(cq, 1);
  }
  return true;
}

// Sends this member's payload and checks the partner's; the report says what went wrong.
Report exchange(Member& m, const Partner& p) {
  Report rep = {1, ""};
  uint8_t seed = static_cast<uint8_t>(p.index);
  uint8_t partner_seed = static_cast<uint8_t>(p.index ^ 1);
  fill_pattern(m.buf, kMsgBytes, seed, 7);
  ibv_sge send_sge = {reinterpret_cast<uint64_t>(m.buf), kMsgBytes, m.mr->lkey};
  ibv_send_wr wr = {};
  wr.wr_id = 1;
  wr.sg_list = &send_sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(m.qp, &wr, &bad)) {
    peer_report_failure(rep, "post_send (errno %d)", errno);
    return rep;
  }
  ibv_wc wc[2];
  if (!wait_completions(m, wc, 2, rep)) return rep;
  for (const ibv_wc& w : wc)
    if (w.status != IBV_WC_SUCCESS) {
      peer_report_failure(rep, "wr %llu: %s", static_cast<unsigned long long>(w.wr_id),
                          ibv_wc_status_str(w.status));
      return rep;
    }
  if (!has_pattern(m.buf + kMsgBytes, kMsgBytes, partner_seed, 7))
    peer_report_failure(rep, "member %u: the partner's payload is wrong", p.index);
  else if (uint64_t races = uctlite::emudv_fns()->races_recorded())
    peer_report_failure(rep, "the device recorded %llu races",
                        static_cast<unsigned long long>(races));
  return rep;
}

[[noreturn]] void run_member() {
  Info info = {0, "", 0, 0};
  auto m = std::make_unique<Member>();
  m->dev = peer_open_device(info, 4);
  // A CQ of its own on a channel: the PeerDevice's CQ has none.
  ibv_destroy_cq(m->dev.cq);
  m->channel = ibv_create_comp_channel(m->dev.ctx);
  m->dev.cq = m->channel ? ibv_create_cq(m->dev.ctx, 4, nullptr, m->channel, 0) : nullptr;
  if (!m->dev.cq) peer_fail(info, "comp channel / cq");
  m->mr = ibv_reg_mr(m->dev.pd, m->buf, sizeof m->buf, IBV_ACCESS_LOCAL_WRITE);
  QpCaps caps;
  caps.max_send_wr = caps.max_recv_wr = 2;
  m->qp = m->mr ? create_rc_qp(m->dev.pd, m->dev.cq, m->dev.cq, caps) : nullptr;
  if (!m->qp) peer_fail(info, "mr / qp");
  info = {1, "", m->dev.lid, m->qp->qp_num};
  peer_tell(info);

  Partner p = peer_hear<Partner>();
  ibv_sge recv_sge = {reinterpret_cast<uint64_t>(m->buf + kMsgBytes), kMsgBytes, m->mr->lkey};
  uint8_t ready = connect_qp(m->qp, p.lid, p.qpn, p.index, p.index ^ 1) == 0 &&
                  post_recv(m->qp, 2, &recv_sge, 1) == 0;
  peer_tell(ready);
  if (!ready) _exit(2);
  peer_hear<uint8_t>();  // every member connected: go
  peer_tell(exchange(*m, p));

  if (peer_hear<uint8_t>() == kExitDestroying) {
    bool clean = !ibv_destroy_qp(m->qp) && !ibv_dereg_mr(m->mr) && !ibv_destroy_cq(m->dev.cq) &&
                 !ibv_destroy_comp_channel(m->channel) && !ibv_dealloc_pd(m->dev.pd) &&
                 !ibv_close_device(m->dev.ctx);
    _exit(clean ? 0 : 4);
  }
  std::exit(0);  // the exit handler detaches; the objects go with the process
}

const PeerRole kMember(kMemberRole, run_member);

// ---- the test process (never attached itself: the members are the fabric's only users) ----

std::string fabric_path() {
  const char* dir = std::getenv("EMU_SHM_DIR");
  return std::string(dir && *dir ? dir : "/dev/shm") + "/rdmaemu-" + std::to_string(getuid()) +
         "-" + std::getenv("EMU_FABRIC");
}

bool fabric_file_exists() {
  struct stat st;
  return stat(fabric_path().c_str(), &st) == 0;
}

class Procs : public ::testing::Test {
 protected:
  // All members up, paired, connected, and each with its message checked.
  void start_and_exchange() {
    auto until = std::chrono::steady_clock::now() + kPeerDeadline;
    for (auto& m : members_) m = std::make_unique<Peer>();
    for (int i = 0; i < kMembers; ++i) ASSERT_TRUE(members_[i]->spawn(kMemberRole)) << i;
    for (int i = 0; i < kMembers; ++i) {
      ASSERT_TRUE(members_[i]->recv_by(&info_[i], sizeof info_[i], until)) << "member " << i;
      ASSERT_EQ(info_[i].ok, 1u) << "member " << i << ": " << info_[i].err;
    }
    for (uint32_t i = 0; i < kMembers; ++i) {
      Partner p = {i, info_[i ^ 1].lid, info_[i ^ 1].qpn};
      ASSERT_TRUE(members_[i]->send(&p, sizeof p));
    }
    for (int i = 0; i < kMembers; ++i) {
      uint8_t ready = 0;
      ASSERT_TRUE(members_[i]->recv_byte_by(&ready, until)) << "member " << i;
      ASSERT_EQ(ready, 1) << "member " << i << " could not connect";
    }
    uint8_t go = 1;
    for (auto& m : members_) ASSERT_TRUE(m->send(&go, 1));
    for (int i = 0; i < kMembers; ++i) {
      Report rep = {0, ""};
      ASSERT_TRUE(members_[i]->recv_by(&rep, sizeof rep, until)) << "member " << i;
      ASSERT_EQ(rep.ok, 1u) << "member " << i << ": " << rep.err;
    }
    ASSERT_TRUE(fabric_file_exists());
  }

  void exit_member(int i) {
    uint8_t how = i % 2 ? kExitLeaving : kExitDestroying;
    ASSERT_TRUE(members_[i]->send(&how, 1));
    int st = members_[i]->wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "member " << i << " status " << st;
  }

  // The census of a new attacher: only `live` members' five objects each, and a clean heap.
  void expect_census_of(int live) {
    CensusView c = take_census_view();
    ASSERT_TRUE(c.ok);
    EXPECT_EQ(c.dead_owned, 0u) << c.json;
    EXPECT_EQ(c.leaked_heap_blocks, 0) << c.json;
    EXPECT_EQ(c.objects.size(), static_cast<size_t>(live) * 5) << c.json;
    for (const CensusView::Object& o : c.objects) EXPECT_TRUE(o.owner_alive) << c.json;
  }

  std::unique_ptr<Peer> members_[kMembers];
  Info info_[kMembers] = {};
};

TEST_F(Procs, AllExit) {
  ASSERT_NO_FATAL_FAILURE(start_and_exchange());
  for (int i = 0; i < kMembers; ++i) ASSERT_NO_FATAL_FAILURE(exit_member(i));
  EXPECT_FALSE(fabric_file_exists()) << "the last member to exit left " << fabric_path();
}

TEST_F(Procs, SomeKilled) {
  ASSERT_NO_FATAL_FAILURE(start_and_exchange());
  std::vector<int> order(kMembers);
  for (int i = 0; i < kMembers; ++i) order[i] = i;
  std::mt19937 rng(18);
  std::shuffle(order.begin(), order.end(), rng);
  for (int k = 0; k < kMembers / 4; ++k) ASSERT_NO_FATAL_FAILURE(members_[order[k]]->kill_now());
  ASSERT_NO_FATAL_FAILURE(expect_census_of(kMembers - kMembers / 4));
  for (int k = kMembers / 4; k < kMembers; ++k) ASSERT_NO_FATAL_FAILURE(exit_member(order[k]));
  EXPECT_FALSE(fabric_file_exists()) << "the last member to exit left " << fabric_path();
}

TEST_F(Procs, AllKilled) {
  ASSERT_NO_FATAL_FAILURE(start_and_exchange());
  for (auto& m : members_) ASSERT_NO_FATAL_FAILURE(m->kill_now());
  ASSERT_TRUE(fabric_file_exists()) << "nobody detached: the file stays for the next attacher";
  ASSERT_NO_FATAL_FAILURE(expect_census_of(0));
  // The census process _exits without detaching (as a SIGKILL would): emu-ctl, attaching next,
  // sweeps it and, exiting normally as the last user, removes the file.
  std::string out = run_command(EMU_CTL " census");
  EXPECT_EQ(out.find("FAILED"), std::string::npos) << out;
  EXPECT_FALSE(fabric_file_exists()) << "emu-ctl, last, left " << fabric_path() << "\n" << out;
}

}  // namespace
}  // namespace vt
