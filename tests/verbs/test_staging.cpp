// SPDX-License-Identifier: BSD-2-Clause
// Receive staging (docs/design/registered-memory.md, "Staging of two-sided payloads"): SENDs from
// another process wait in the receive CQ's staging area and the receiver's poll places them. Every
// size lands byte for byte, split over two SGEs, through a plain RQ, an SRQ and a UD QP with a GRH;
// a QP destroyed, a CQ resized or destroyed with staged completions unpolled leaves no slot taken,
// no leaked heap block and a segment the checker passes; the device records no race.
#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "emudv_link.h"
#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

// Message 0 (64 B) is polled first: its CQE asks for a staging area, which the poll makes; the
// rest are staged up to 8 KiB (kStagingMaxPayload), placed directly above (UD stops at its MTU).
constexpr uint32_t kRcSizes[] = {64, 33, 100, 1024, 1025, 4096, 9000, 65536, 65537, 200000};
constexpr uint32_t kUdSizes[] = {64, 33, 100, 1024, 1025, 2000, 4096 - 40};
constexpr uint32_t kQkey = 0x5a5a0000;
constexpr uint32_t kGrh = 40;

// Whether ibv_reg_mr moves private anonymous pages into its registration file (EMU_SHARED_MR,
// default on): an RC payload then goes straight into the receive buffer (memcpy already). The
// staging tests receive into a private mapping of a file, which never moves, so that staging is
// what carries the payloads in every variant.
bool pages_move() {
  const char* v = std::getenv("EMU_SHARED_MR");
  return !(v && std::string(v) == "0");
}

uint8_t pattern(uint32_t msg, uint32_t b) { return static_cast<uint8_t>(msg * 31 + b * 7 + 1); }

struct SenderInfo {
  uint32_t ok;
  uint16_t lid;
  uint32_t qpn;
  char err[96];
};
struct ReceiverInfo {
  uint16_t lid;
  uint32_t qpn;
  uint32_t ud;  // 1: UD with a GRH, else RC
  ibv_gid gid;
};
struct SenderReport {
  uint32_t ok;
  char err[96];
};

// ---- the sender ----

bool send_one(ibv_qp* qp, ibv_cq* cq, ibv_mr* mr, uint8_t* buf, uint32_t i, uint32_t len,
              ibv_ah* ah, uint32_t dqpn) {
  for (uint32_t b = 0; b < len; ++b) buf[b] = pattern(i, b);
  ibv_sge sg{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
  ibv_wr_opcode op = i % 3 == 2 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  ibv_send_wr w = ah ? ud_send_wr(i, op, &sg, ah, dqpn, kQkey) : send_wr(i, op, &sg, 1);
  w.imm_data = htonl(i);
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp, &w, &bad)) return false;
  auto wc = poll_n(cq, 1);
  return wc.size() == 1 && wc[0].status == IBV_WC_SUCCESS;
}

[[noreturn]] void run_sender() {
  SenderInfo me{};
  PeerDevice d = peer_open_device(me, 16);
  alignas(4096) static uint8_t buf[200000];
  ibv_mr* mr = ibv_reg_mr(d.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) peer_fail(me, "reg_mr");
  // Both kinds are made; the receiver says which one it talks to.
  ibv_qp* rc = create_rc_qp(d.pd, d.cq, d.cq);
  ibv_qp* ud = create_qp_of(d.pd, IBV_QPT_UD, d.cq, d.cq);
  if (!rc || !ud) peer_fail(me, "create_qp");
  auto other_info = [&](ibv_qp* q) { return SenderInfo{1, d.lid, q->qp_num, {}}; };
  SenderInfo rc_info = other_info(rc), ud_info = other_info(ud);
  peer_tell(rc_info);
  peer_tell(ud_info);
  auto r = peer_hear<ReceiverInfo>();
  ibv_ah* ah = nullptr;
  uint8_t ready;
  if (r.ud) {
    ibv_ah_attr a = lid_ah_attr(r.lid);
    a.is_global = 1;
    a.grh.dgid = r.gid;
    a.grh.hop_limit = 64;
    ah = ibv_create_ah(d.pd, &a);
    ready = ah && ud_to_rts(ud, kQkey) == 0;
  } else {
    ready = connect_qp(rc, r.lid, r.qpn, 0x11, 0x22) == 0;
  }
  peer_tell(ready);
  ibv_qp* qp = r.ud ? ud : rc;
  const uint32_t* sizes = r.ud ? kUdSizes : kRcSizes;
  uint32_t n = r.ud ? std::size(kUdSizes) : std::size(kRcSizes);
  SenderReport rep{1, {}};
  for (uint32_t i = 0; i < n && rep.ok; ++i) {
    if (i == 1) peer_hear<uint8_t>();  // the receiver polled message 0
    if (!send_one(qp, d.cq, mr, buf, i, sizes[i], ah, r.qpn))
      peer_report_failure(rep, "send %u (%u bytes) failed", i, sizes[i]);
  }
  peer_finish(rep);
}

const PeerRole kSender("staging-sender", run_sender);

// A receiver that polls message 0 (so its CQ makes an area), says so, and is then SIGKILLed with
// the others staged and unpolled.
[[noreturn]] void run_victim() {
  SenderInfo me{};
  PeerDevice d = peer_open_device(me, 64);
  constexpr size_t kLen = 1 << 17;
  uint8_t* buf = map_private_file(kLen);
  ibv_mr* mr = buf ? ibv_reg_mr(d.pd, buf, kLen, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  ibv_qp* qp = mr ? create_rc_qp(d.pd, d.cq, d.cq) : nullptr;
  if (!qp) peer_fail(me, "reg_mr/create_qp");
  me = {1, d.lid, qp->qp_num, {}};
  peer_tell(me);
  auto r = peer_hear<ReceiverInfo>();
  uint8_t ready = to_init(qp, kAllAccess) == 0;
  for (uint32_t i = 0; ready && i < std::size(kRcSizes) - 2; ++i) {
    ibv_sge sg{reinterpret_cast<uint64_t>(buf), kRcSizes[i], mr->lkey};
    ready = post_recv(qp, i, &sg, 1) == 0;
  }
  ready = ready && to_rtr(qp, r.lid, r.qpn, 0x22, 1) == 0 && to_rts(qp, 0x11, 14, 7, 7) == 0;
  peer_tell(ready);
  uint8_t polled = poll_n(d.cq, 1).size() == 1;
  peer_tell(polled);
  peer_hear<uint8_t>();  // killed here
  _exit(0);
}

const PeerRole kVictim("staging-victim", run_victim);

// ---- the receiver (this process) ----

enum class After { poll, destroy_qp, resize_cq, destroy_cq };
// Where the receive buffers are: a private mapping of a file (never shared: staged), or plain
// anonymous memory (moved into the registration file unless EMU_SHARED_MR=0: placed directly).
enum class Memory { private_file, anonymous };

class Staging : public VerbsTest {
 protected:
  // Receives for every message (each split over two SGEs at an odd offset), the sender's
  // messages, then `after` with the staged ones unpolled.
  void run(bool ud, bool srq, After after, Memory memory = Memory::private_file);
  // What emu-ctl reports: this CQ's staged slots, leaked heap blocks, the checker's verdict.
  static std::string ctl(const char* args);
};

std::string Staging::ctl(const char* args) {
  std::string cmd = std::string(EMU_CTL " ") + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return "";
  std::string s;
  char b[4096];
  for (size_t n; (n = fread(b, 1, sizeof b, f)) > 0;) s.append(b, n);
  int st = pclose(f);
  return s + (st == 0 ? "" : "\n(exit status " + std::to_string(st) + ")");
}

void Staging::run(bool ud, bool srq_on, After after, Memory memory) {
  const uctlite::EmudvFns* dv = uctlite::emudv_fns();
  ASSERT_NE(dv, nullptr);
  uint64_t races = dv->races_recorded();
  const uint32_t* sizes = ud ? kUdSizes : kRcSizes;
  const uint32_t n = ud ? std::size(kUdSizes) : std::size(kRcSizes);
  ibv_cq* cq = make_cq(64);
  ibv_srq* srq = srq_on ? make_srq(32, 2) : nullptr;
  ibv_qp* qp = make_qp_of(ud ? IBV_QPT_UD : IBV_QPT_RC, cq, cq, {}, srq);
  ASSERT_TRUE(cq && qp && (srq || !srq_on));
  // Message i's two SGEs: the first half at off[i] + 1, the rest 100 bytes further.
  std::vector<size_t> off(n + 1, 0);
  for (uint32_t i = 0; i < n; ++i) off[i + 1] = off[i] + (ud ? kGrh : 0) + sizes[i] + 200;
  Buf rb = memory == Memory::anonymous ? make_buf(off[n]) : make_private_file_buf(off[n]);
  auto post = [&](uint32_t i) {
    uint32_t len = (ud ? kGrh : 0) + sizes[i], first = len / 2;
    ibv_sge sg[2] = {rb.sge(off[i] + 1, first), rb.sge(off[i] + 1 + first + 100, len - first)};
    return srq ? post_srq(srq, i, sg, 2) : post_recv(qp, i, sg, 2);
  };
  // A QP in RESET takes no receive: INIT for RC (connected below), all the way for UD.
  ASSERT_EQ(ud ? ud_to_rts(qp, kQkey) : to_init(qp, kAllAccess), 0);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(post(i), 0) << i;

  Peer peer;
  SenderInfo rc_info{}, ud_info{};
  ASSERT_NO_FATAL_FAILURE(peer.start("staging-sender", &rc_info));
  ASSERT_TRUE(peer.recv(&ud_info, sizeof ud_info));
  ReceiverInfo me{lid, qp->qp_num, ud, {}};
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &me.gid), 0);
  ASSERT_TRUE(peer.send(&me, sizeof me));
  if (!ud) {
    ASSERT_EQ(to_rtr(qp, rc_info.lid, rc_info.qpn, 0x11, 1), 0);
    ASSERT_EQ(to_rts(qp, 0x22, 14, 7, 7), 0);
  }
  ASSERT_NO_FATAL_FAILURE(peer.expect_ready());
  auto first = poll_n(cq, 1);
  ASSERT_EQ(first.size(), 1u);
  uint8_t go = 1;
  ASSERT_TRUE(peer.send(&go, 1));
  SenderReport rep{};
  peer.finish(&rep, 2 * kDeadline);  // every SEND completed: every receive CQE is in cq
  std::string census = ctl("census --json");
  // 1 KiB slots of messages 1..5 unpolled (6..9 are above kStagingMaxPayload): 1+1+1+2+4; UD's 1..6
  // with their GRH: 1+1+2+2+2+4. Into moved pages an RC payload goes straight into the receive
  // buffer (memcpy already): its CQ never asks for an area.
  if (!ud && memory == Memory::anonymous && pages_move())
    EXPECT_EQ(census.find("\"STAGED"), std::string::npos) << census;
  else
    EXPECT_NE(census.find(ud ? "\"STAGED 12\"" : "\"STAGED 9\""), std::string::npos) << census;
  if (after == After::destroy_qp) {
    ASSERT_EQ(ibv_destroy_qp(qp), 0);
    forget(qp);
    EXPECT_TRUE(drain(cq).empty()) << "completions of a destroyed QP";
  } else if (after == After::destroy_cq) {
    ASSERT_EQ(ibv_destroy_qp(qp), 0);
    forget(qp);
    ASSERT_EQ(ibv_destroy_cq(cq), 0);
    forget(cq);
  } else {
    if (after == After::resize_cq) {
      ASSERT_EQ(ibv_resize_cq(cq, 255), 0);
    }
    std::vector<ibv_wc> wcs = first;
    auto rest = poll_n(cq, n - 1);
    wcs.insert(wcs.end(), rest.begin(), rest.end());
    ASSERT_EQ(wcs.size(), n);
    for (uint32_t k = 0; k < n; ++k) {
      const ibv_wc& wc = wcs[k];
      uint32_t i = static_cast<uint32_t>(wc.wr_id);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << k;
      ASSERT_EQ(i, k) << "in order";
      EXPECT_EQ(wc.byte_len, (ud ? kGrh : 0) + sizes[i]);
      EXPECT_EQ((wc.wc_flags & IBV_WC_WITH_IMM) != 0, i % 3 == 2);
      if (i % 3 == 2) {
        EXPECT_EQ(ntohl(wc.imm_data), i);
      }
      EXPECT_EQ(wc.src_qp, ud ? ud_info.qpn : rc_info.qpn);
      if (ud) {
        EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
      }
      uint32_t len = (ud ? kGrh : 0) + sizes[i], half = len / 2;
      auto at = [&](uint32_t b) { return rb.p[off[i] + 1 + b + (b >= half ? 100 : 0)]; };
      if (ud) {  // the GRH's destination GID: ours
        for (uint32_t b = 0; b < 16; ++b) ASSERT_EQ(at(24 + b), me.gid.raw[b]) << "GRH " << i;
      }
      for (uint32_t b = 0; b < sizes[i]; ++b)
        ASSERT_EQ(at((ud ? kGrh : 0) + b), pattern(i, b)) << "message " << i << " byte " << b;
      EXPECT_EQ(rb.p[off[i]], 0) << "before the first SGE";
      EXPECT_EQ(rb.p[off[i] + 1 + half], 0) << "between the SGEs";
    }
  }
  census = ctl("census --json");
  EXPECT_EQ(census.find("\"STAGED ") != std::string::npos &&
                census.find("\"STAGED 0\"") == std::string::npos,
            false)
      << "slots still taken: " << census;
  EXPECT_NE(census.find("\"leaked_heap_blocks\":0,"), std::string::npos) << census;
  std::string check = ctl("check");
  EXPECT_EQ(check.find("exit status"), std::string::npos) << check;
  EXPECT_EQ(dv->races_recorded(), races) << "the device recorded a race";
}

// The receiver dies with staged payloads unpolled: the sweep (emu-ctl attaches, which runs it)
// frees its CQ with the area; nothing leaks.
TEST_F(Staging, ReceiverKilledWithStagedData) {
  ibv_cq* cq = make_cq(64);
  ibv_qp* qp = make_qp(cq, cq);
  ASSERT_TRUE(cq && qp);
  Peer peer;
  SenderInfo pi{};
  ASSERT_NO_FATAL_FAILURE(peer.start("staging-victim", &pi));
  ReceiverInfo me{lid, qp->qp_num, 0, {}};
  ASSERT_TRUE(peer.send(&me, sizeof me));
  ASSERT_EQ(connect_qp(qp, pi.lid, pi.qpn, 0x22, 0x11), 0);
  ASSERT_NO_FATAL_FAILURE(peer.expect_ready());
  Buf sb = make_buf(65536);
  const uint32_t n = std::size(kRcSizes) - 2;  // the staged ones, and message 0
  for (uint32_t i = 0; i < n; ++i) {
    ibv_sge sg = sb.sge(0, kRcSizes[i]);
    ibv_send_wr w = send_wr(i, IBV_WR_SEND, &sg, 1);
    ASSERT_EQ(post_one(qp, &w), 0);
    ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, i));
    uint8_t polled = 0;
    if (i == 0) {
      ASSERT_TRUE(peer.recv(&polled, 1) && polled) << "the receiver's first poll";
    }
  }
  std::string census = ctl("census --json");
  EXPECT_NE(census.find("\"STAGED 9\""), std::string::npos) << census;
  pid_t victim = peer.pid();
  peer.kill_now();
  census = ctl("census --json");
  EXPECT_EQ(census.find("\"owner_pid\":" + std::to_string(victim) + ","), std::string::npos)
      << census;
  EXPECT_EQ(census.find("\"STAGED"), std::string::npos) << census;
  EXPECT_NE(census.find("\"leaked_heap_blocks\":0,"), std::string::npos) << census;
  std::string check = ctl("check");
  EXPECT_EQ(check.find("exit status"), std::string::npos) << check;
}

TEST_F(Staging, RcEverySizeSplitOverTwoSges) { run(false, false, After::poll); }
TEST_F(Staging, RcThroughAnSrq) { run(false, true, After::poll); }
// Receive buffers in plain anonymous memory: moved into the registration file (the default), so
// RC payloads go straight in and nothing is staged; UD's are staged all the same.
TEST_F(Staging, RcIntoMovedPagesGoesStraight) { run(false, false, After::poll, Memory::anonymous); }
TEST_F(Staging, UdIntoMovedPagesIsStaged) { run(true, false, After::poll, Memory::anonymous); }
TEST_F(Staging, UdWithGrh) { run(true, false, After::poll); }
TEST_F(Staging, UdThroughAnSrq) { run(true, true, After::poll); }
TEST_F(Staging, QpDestroyedWithStagedCompletions) { run(false, false, After::destroy_qp); }
TEST_F(Staging, SrqQpDestroyedWithStagedCompletions) { run(false, true, After::destroy_qp); }
TEST_F(Staging, CqResizedWithStagedCompletions) { run(false, false, After::resize_cq); }
TEST_F(Staging, CqDestroyedWithStagedData) { run(false, false, After::destroy_cq); }

}  // namespace
}  // namespace vt
