// SPDX-License-Identifier: BSD-2-Clause
// The packet wire under faults (docs/design/reliability.md), seen by a verbs program: RC delivers
// every signaled WR exactly once with the right data whatever is lost, duplicated, reordered,
// delayed or corrupted, or fails with RETRY_EXC_ERR once retry_cnt is spent; the same seed gives
// the same outcome (two fresh fabrics, one process each); UC and UD lose what is lost.
//
// Rules are set with `emu-ctl faults set` (another process, as a harness does). Every test of this
// binary runs alone on its fabric (RUN_SERIAL): the rules are the fabric's.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

// Local ACK timeouts of a hundredth (0.67 ms for timeout 14), for this process and its peers; set
// before the provider reads it.
const bool kShortTimeouts = setenv("EMU_ACK_TIMEOUT_SCALE", "0.01", 0) == 0;

// `emu-ctl ARGS` in this process's fabric: its output; a gtest failure if it fails.
std::string ctl(const std::string& args) { return run_command(std::string(EMU_CTL) + " " + args); }

uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

struct Mem {
  uint8_t* p = nullptr;
  size_t len = 0;
  ibv_mr* mr = nullptr;
  ibv_sge sge(size_t off, uint32_t n) const {
    return {reinterpret_cast<uint64_t>(p) + off, n, mr->lkey};
  }
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(p) + off; }
};

Mem mem(ibv_pd* pd, size_t len) {
  Mem m;
  m.len = len;
  m.p = static_cast<uint8_t*>(
      mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (m.p == MAP_FAILED) return Mem{};
  m.mr = ibv_reg_mr(pd, m.p, len, kAllAccess);
  return m;
}

void unmem(Mem& m) {
  if (m.mr) ibv_dereg_mr(m.mr);
  if (m.p) munmap(m.p, m.len);
}

// What one run of the workload came to.
struct Outcome {
  bool ok = false;
  char err[160] = "";
  uint64_t digest = 0;   // completions in order, the data, and the fault counters
  std::string counters;  // `emu-ctl faults` after the run
  int retry_exc = 0;     // 1: a WR spent its retry budget (RETRY_EXC_ERR, the rest flushed)
};

// A counter of `emu-ctl faults` output ("drop 3" ...), or -1.
long counter(const std::string& out, const std::string& name) {
  size_t at = out.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atol(out.c_str() + at + name.size() + 2);
}

// The workload: kWrs signaled WRs from QP a to QP b (WRITEs of 1 to 9000 bytes, SENDs of 2500,
// READs of 3000, FETCH_ADDs of one counter) over a path MTU of 1024, posted at once, under the
// rules `faults`. Checks that each completes once, successfully, with the right bytes, and that
// the counter was added to exactly once per FETCH_ADD.
constexpr int kWrs = 40;
constexpr size_t kSlot = 9216;

Outcome run_workload(ibv_context* ctx, ibv_pd* pd, const std::string& faults,
                     uint8_t retry_cnt = 7) {
  Outcome o;
  auto fail = [&](const char* what) {
    std::snprintf(o.err, sizeof o.err, "%s", what);
    return o;
  };
  uint16_t lid = port_lid(ctx);
  ibv_cq* cqa = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
  ibv_cq* cqb = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
  QpCaps caps;
  caps.max_send_wr = kWrs;
  caps.max_recv_wr = kWrs;
  ibv_qp* a = cqa && cqb ? create_rc_qp(pd, cqa, cqa, caps) : nullptr;
  ibv_qp* b = a ? create_rc_qp(pd, cqb, cqb, caps) : nullptr;
  Mem src = mem(pd, kWrs * kSlot), dst = mem(pd, kWrs * kSlot);
  if (!b || !src.mr || !dst.mr) return fail("setup");
  ConnParams cp;
  cp.retry_cnt = retry_cnt;
  if (connect_qp(a, lid, b->qp_num, 0x100, 0x200, cp) ||
      connect_qp(b, lid, a->qp_num, 0x200, 0x100, cp))
    return fail("connect");
  for (size_t i = 0; i < src.len; ++i) src.p[i] = static_cast<uint8_t>(i * 7 + i / 251);
  std::string set = ctl("faults set '" + faults + "'");
  if (set.rfind("FAILED", 0) == 0) return fail("emu-ctl faults set");
  // The counter FETCH_ADD adds to lives in dst's last slot; READs read src back into dst.
  uint64_t* counter = reinterpret_cast<uint64_t*>(dst.p + (kWrs - 1) * kSlot + kSlot - 8);
  *counter = 0;
  static const uint32_t kWriteLen[] = {1, 1000, 3000, 9000};
  int sends = 0, faas = 0;
  for (int i = 0; i < kWrs; ++i) {
    size_t off = i * kSlot;
    ibv_sge s;
    ibv_send_wr wr;
    switch (i % 4) {
      case 0:
        s = src.sge(off, kWriteLen[(i / 4) % 4]);
        wr = rdma_wr(i, IBV_WR_RDMA_WRITE, &s, 1, dst.addr(off), dst.mr->rkey);
        break;
      case 1: {
        ibv_sge r = dst.sge(off, 2500);
        if (post_recv(b, 1000 + i, &r, 1)) return fail("post_recv");
        s = src.sge(off, 2500);
        wr = send_wr(i, IBV_WR_SEND, &s, 1);
        ++sends;
        break;
      }
      case 2:
        // READ src's slot (as the remote side) into dst's slot.
        s = dst.sge(off, 3000);
        wr = rdma_wr(i, IBV_WR_RDMA_READ, &s, 1, src.addr(off), src.mr->rkey);
        break;
      default:
        s = dst.sge(off, 8);
        wr = atomic_wr(i, IBV_WR_ATOMIC_FETCH_AND_ADD, &s, reinterpret_cast<uint64_t>(counter),
                       dst.mr->rkey, 1, 0);
        ++faas;
    }
    if (post_one(a, &wr)) return fail("post_send");
  }
  // Either every WR succeeds, or one fails with RETRY_EXC_ERR (its budget spent) and every later
  // one is flushed. The responder's completions were written before the requester's.
  std::vector<ibv_wc> wa = poll_n(cqa, kWrs, std::chrono::seconds(60));
  std::vector<ibv_wc> wb = drain(cqb);
  if (wa.size() != size_t(kWrs)) return fail("completions missing");
  uint64_t h = 0xcbf29ce484222325ull;
  uint64_t fetched_mask = 0;
  int good = kWrs, good_sends = 0, good_faas = 0;
  for (int i = 0; i < kWrs; ++i) {
    const ibv_wc& wc = wa[i];
    if (wc.wr_id != uint64_t(i)) return fail("completions out of order, lost or twice");
    h = fnv(h, &wc.wr_id, 8), h = fnv(h, &wc.status, sizeof wc.status);
    if (i > good) {
      if (wc.status != IBV_WC_WR_FLUSH_ERR) return fail("a WR after the failed one not flushed");
      continue;
    }
    if (wc.status == IBV_WC_RETRY_EXC_ERR) {
      good = i;
      ++o.retry_exc;
      continue;
    }
    if (wc.status != IBV_WC_SUCCESS) return fail("bad completion");
    good_sends += i % 4 == 1;
    good_faas += i % 4 == 3;
    if (i % 4 == 3) {
      uint64_t got;
      std::memcpy(&got, dst.p + i * kSlot, 8);
      if (got >= 64 || (fetched_mask >> got & 1)) return fail("FETCH_ADD ran twice or lost");
      fetched_mask |= 1ull << got;
    }
  }
  // The failed WR itself may have reached the responder (its answer lost): at most one more.
  bool failed_send = good < kWrs && good % 4 == 1, failed_faa = good < kWrs && good % 4 == 3;
  if (wb.size() < size_t(good_sends) || wb.size() > size_t(good_sends) + failed_send)
    return fail("receives do not match the SENDs");
  for (const ibv_wc& wc : wb)
    if (wc.status != IBV_WC_SUCCESS || wc.byte_len != 2500) return fail("bad receive");
  if (*counter < uint64_t(good_faas) || *counter > uint64_t(good_faas) + failed_faa)
    return fail("counter is not the number of FETCH_ADDs");
  for (int i = 0; i < good; ++i) {
    size_t off = i * kSlot;
    size_t n = i % 4 == 0 ? kWriteLen[(i / 4) % 4] : i % 4 == 1 ? 2500 : i % 4 == 2 ? 3000 : 0;
    if (std::memcmp(dst.p + off, src.p + off, n) != 0) return fail("data differs");
  }
  h = fnv(h, dst.p, dst.len);
  std::string counters = ctl("faults");
  h = fnv(h, counters.data(), counters.size());
  o.counters = counters;
  std::string races = ctl("races");
  if (races.rfind("0 race events", 0) != 0) return fail("the device reported a race");
  ctl("faults clear");
  ibv_destroy_qp(a), ibv_destroy_qp(b);
  ibv_destroy_cq(cqa), ibv_destroy_cq(cqb);
  unmem(src), unmem(dst);
  o.ok = true;
  o.digest = h;
  return o;
}

constexpr const char* kMix = "drop:p=0.04;dup:p=0.03;reorder:p=0.03;delay:p=0.02;corrupt:p=0.02";

// Seeds 1..WIRE_SWEEP_SEEDS (default `dflt`; bench/wire_sweep.sh sets more).
int sweep_seeds(int dflt) {
  const char* v = std::getenv("WIRE_SWEEP_SEEDS");
  return v && std::atoi(v) > 0 ? std::atoi(v) : dflt;
}

class WireFaultsTest : public VerbsTest {};

TEST_F(WireFaultsTest, RcSweepCompletesEveryWrOnceWithTheRightData) {
  for (int seed = 1, n = sweep_seeds(4); seed <= n; ++seed) {
    Outcome o = run_workload(ctx, pd, "seed=" + std::to_string(seed) + ";" + kMix);
    EXPECT_EQ(o.retry_exc, 0) << "seed " << seed;
    EXPECT_TRUE(o.ok) << "seed " << seed << ": " << o.err;
    // The run was under faults, and RC recovered from them by resending.
    EXPECT_GT(counter(o.counters, "drop") + counter(o.counters, "corrupt"), 0) << o.counters;
    EXPECT_GT(counter(o.counters, "retransmitted"), 0) << o.counters;
  }
}

// Heavy loss with a small budget: each run completes every WR, or fails one with RETRY_EXC_ERR and
// flushes the rest, with every byte of what succeeded right.
TEST_F(WireFaultsTest, RcSweepUnderHeavyLossCompletesOrFailsCleanly) {
  int failed = 0, n = sweep_seeds(6);
  for (int seed = 1; seed <= n; ++seed) {
    Outcome o = run_workload(ctx, pd, "seed=" + std::to_string(seed) + ";drop:p=0.3;dup:p=0.1", 2);
    EXPECT_TRUE(o.ok) << "seed " << seed << ": " << o.err;
    failed += o.retry_exc;
  }
  EXPECT_GT(failed, 0);  // this budget is spent on some seeds
  std::printf("%d of %d runs ended with RETRY_EXC_ERR\n", failed, n);
}

// ---- the same seed twice, each in a fresh fabric of its own process ----

struct RunInfo {
  uint32_t ok;
  char err[160];
  uint64_t digest;
};

void run_peer() {
  RunInfo info{};
  ibv_context* ctx = peer_open_emu0();
  ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  if (!pd) peer_fail(info, "open emu0");
  Outcome o = run_workload(ctx, pd, std::string("seed=9;") + kMix);
  info.ok = o.ok;
  std::snprintf(info.err, sizeof info.err, "%s", o.err);
  info.digest = o.digest;
  peer_finish(info);
}
PeerRole wire_run("wire-run", run_peer);

TEST(WireFaults, SameSeedGivesTheSameOutcome) {
  uint64_t digest[2] = {};
  for (int i = 0; i < 2; ++i) {
    std::string fabric = "wire-seed-" + std::to_string(getpid()) + "-" + std::to_string(i);
    Peer p;
    ASSERT_TRUE(p.spawn("wire-run", "EMU_FABRIC=" + fabric));
    RunInfo info{};
    p.finish(&info, std::chrono::seconds(120));
    EXPECT_EQ(info.ok, 1u) << info.err;
    digest[i] = info.digest;
    const char* dir = std::getenv("EMU_SHM_DIR");
    std::string seg = std::string(dir && *dir ? dir : "/dev/shm") + "/rdmaemu-" +
                      std::to_string(getuid()) + "-" + fabric;
    unlink(seg.c_str());
  }
  EXPECT_EQ(digest[0], digest[1]);
}

// ---- the budget spent ----

TEST_F(WireFaultsTest, EveryWriteLostIsRetryExcErrAndTheQpInErr) {
  ConnParams cp;
  cp.retry_cnt = 3;
  Pair p = make_pair({}, cp, cp);
  Buf src = make_buf(4096, kAllAccess, 0x5a), dst = make_buf(4096);
  ASSERT_EQ(ctl("faults set 'drop:p=1,op=write'").rfind("FAILED", 0), std::string::npos);
  ibv_sge s = src.sge(0, 2048);
  ibv_send_wr w1 = rdma_wr(1, IBV_WR_RDMA_WRITE, &s, 1, dst.addr(), dst.rkey());
  ibv_send_wr w2 = rdma_wr(2, IBV_WR_RDMA_WRITE, &s, 1, dst.addr(), dst.rkey());
  ASSERT_EQ(post_one(p.a, &w1), 0);
  ASSERT_EQ(post_one(p.a, &w2), 0);
  EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_RETRY_EXC_ERR, 1));
  EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_WR_FLUSH_ERR, 2));
  EXPECT_EQ(qp_state(p.a), IBV_QPS_ERR);
  std::string c = ctl("faults");
  EXPECT_NE(c.find("timeouts 4\n"), std::string::npos) << c;  // the first try and 3 retries
  ctl("faults clear");
  EXPECT_EQ(dst.p[0], 0);  // nothing arrived
}

// ---- UC and UD lose what is lost ----

TEST_F(WireFaultsTest, UcMessageWithALostPacketIsDroppedAndItsReceiveReused) {
  Pair p = make_qps(IBV_QPT_UC);
  ASSERT_EQ(connect_uc(p.a, lid, p.b->qp_num, 0x10, 0x20), 0);
  ASSERT_EQ(connect_uc(p.b, lid, p.a->qp_num, 0x20, 0x10), 0);
  Buf src = make_buf(8192, kAllAccess, 0x33), dst = make_buf(8192);
  ibv_sge r1 = dst.sge(0, 4096), r2 = dst.sge(4096, 4096);
  ASSERT_EQ(post_recv(p.b, 101, &r1, 1), 0);
  ASSERT_EQ(post_recv(p.b, 102, &r2, 1), 0);
  // The second packet of the first message (3 packets of 1024) is lost.
  std::string rule = "faults set 'drop:nth=2,qp=" + std::to_string(p.a->qp_num) + "'";
  ASSERT_EQ(ctl(rule).rfind("FAILED", 0), std::string::npos);
  ibv_sge big = src.sge(0, 3000), small = src.sge(0, 100);
  ibv_send_wr w1 = send_wr(1, IBV_WR_SEND, &big, 1), w2 = send_wr(2, IBV_WR_SEND, &small, 1);
  ASSERT_EQ(post_one(p.a, &w1), 0);
  ASSERT_EQ(post_one(p.a, &w2), 0);
  EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 1));  // UC: sent is done
  EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 2));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqb, IBV_WC_SUCCESS, 101, &wc));  // the first receive took the second
  EXPECT_EQ(wc.byte_len, 100u);
  EXPECT_TRUE(drain(p.cqb).empty());
  ctl("faults clear");
}

TEST_F(WireFaultsTest, UdDatagramLostOrReceivedTwice) {
  Pair p = make_qps(IBV_QPT_UD);
  ASSERT_EQ(ud_to_rts(p.a, 0x11), 0);
  ASSERT_EQ(ud_to_rts(p.b, 0x11), 0);
  ibv_ah* ah = make_ah(lid_ah_attr(lid));
  ASSERT_NE(ah, nullptr);
  Buf src = make_buf(4096, kAllAccess, 0x44), dst = make_buf(4096);
  for (int i = 0; i < 4; ++i) {
    ibv_sge r = dst.sge(i * 1024, 1024);
    ASSERT_EQ(post_recv(p.b, 200 + i, &r, 1), 0);
  }
  // The first datagram is lost, the second arrives twice, the third once.
  ASSERT_EQ(ctl("faults set 'drop:nth=1,op=ud;dup:nth=2,op=ud'").rfind("FAILED", 0),
            std::string::npos);
  for (int i = 0; i < 3; ++i) {
    ibv_sge s = src.sge(0, 64);
    ibv_send_wr w = ud_send_wr(i, IBV_WR_SEND, &s, ah, p.b->qp_num, 0x11);
    ASSERT_EQ(post_one(p.a, &w), 0);
    EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, i));
  }
  std::vector<ibv_wc> got = poll_n(p.cqb, 3);
  EXPECT_EQ(got.size(), 3u);
  EXPECT_TRUE(drain(p.cqb).empty());
  std::string c = ctl("faults");
  EXPECT_NE(c.find("drop 1\n"), std::string::npos) << c;
  EXPECT_NE(c.find("dup 1\n"), std::string::npos) << c;
  ctl("faults clear");
}

}  // namespace
}  // namespace vt
