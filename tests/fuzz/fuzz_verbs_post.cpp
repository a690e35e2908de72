// SPDX-License-Identifier: BSD-2-Clause
// Verb fuzz targets, the post path (issue 16 item 5): random ibv_send_wr lists (opcodes, SGE
// counts, lengths, lkeys and rkeys, inline sizes, flags, chains longer than the queue, a chain
// that links back to its head) through ibv_post_send and the same WRs through the ibv_wr_* API,
// and random ibv_recv_wr lists, on an RC pair of this process. Each post succeeds or fails with
// an errno the man page allows and *bad_wr inside the list; every signaled WR posted completes
// exactly once; a WRITE that completes successfully wrote exactly its bytes; a QP in ERR is
// brought back and used again. Garbage goes in values, never in pointers an application could
// not pass without undefined behaviour (inline data is read from memory the program owns).
#include <sched.h>

#include <cstring>
#include <map>
#include <vector>

#include "fuzz_verbs.h"

namespace {

using fuzz::errno_in;

// Local ACK timeouts of a hundredth: a WR with a lost answer fails fast. Read by the provider at
// its first use, so set before any test runs.
const bool kShortTimeouts = setenv("EMU_ACK_TIMEOUT_SCALE", "0.01", 0) == 0;

constexpr uint32_t kSrc = 1 << 16, kSlot = 1 << 16, kChainMax = 8, kSgeMax = 32;
constexpr uint64_t kSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                              IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                              IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                              IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

struct Chain {
  ibv_send_wr wr[kChainMax];
  ibv_sge sge[kChainMax][kSgeMax];
  uint32_t n = 0;
  bool wr_api = false;
};

struct Post : ::testing::Test {
  void SetUp() override {
    ctx = vt::open_emu0();
    ASSERT_NE(ctx, nullptr);
    pd = ibv_alloc_pd(ctx);
    cq_a = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
    cq_b = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
    ASSERT_TRUE(pd && cq_a && cq_b);
    src.resize(kSrc);
    for (uint32_t i = 0; i < kSrc; ++i) src[i] = static_cast<char>(i * 7 + 3);
    dst.resize(size_t{kSlot} * kChainMax);
    local.resize(kSrc);
    // The source cannot be written by the device (a READ into it is a protection error).
    mr_src = ibv_reg_mr(pd, src.data(), kSrc, 0);
    mr_dst = ibv_reg_mr(pd, dst.data(), dst.size(), vt::kAllAccess);
    mr_local = ibv_reg_mr(pd, local.data(), kSrc, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(mr_src && mr_dst && mr_local);
    vt::QpCaps caps;
    caps.max_inline_data = 128;
    a = vt::create_qp_ex(ctx, pd, IBV_QPT_RC, cq_a, caps, kSendOps);
    b = vt::create_qp_of(pd, IBV_QPT_RC, cq_b, cq_b);
    ASSERT_TRUE(a && b);
    ax = ibv_qp_to_qp_ex(a);
    connect();
  }
  void TearDown() override {
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    for (ibv_mr* m : {mr_src, mr_dst, mr_local}) ibv_dereg_mr(m);
    ibv_destroy_cq(cq_a);
    ibv_destroy_cq(cq_b);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    fuzz::expect_segment_clean();
  }
  // Both QPs from any state through RESET to RTS towards each other; receives few retries, so an
  // empty receive queue fails the SEND instead of waiting.
  void connect() {
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    vt::ConnParams p;
    p.retry_cnt = 1;
    p.rnr_retry = 1;
    for (ibv_qp* q : {a, b}) ASSERT_EQ(ibv_modify_qp(q, &reset, IBV_QP_STATE), 0);
    uint16_t lid = vt::port_lid(ctx);
    ASSERT_EQ(vt::connect_qp(a, lid, b->qp_num, 0, 0, p), 0);
    ASSERT_EQ(vt::connect_qp(b, lid, a->qp_num, 0, 0, p), 0);
  }

  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq *cq_a = nullptr, *cq_b = nullptr;
  ibv_qp *a = nullptr, *b = nullptr;
  ibv_qp_ex* ax = nullptr;
  ibv_mr *mr_src = nullptr, *mr_dst = nullptr, *mr_local = nullptr;
  std::vector<char> src, dst, local;
};

// One WR: opcode, SGEs, remote address and key, flags, each sometimes wrong.
void make_wr(fuzz::Rng& r, Post& t, Chain& c, uint32_t j) {
  const ibv_wr_opcode ops[] = {
      IBV_WR_RDMA_WRITE,           IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
      IBV_WR_SEND_WITH_IMM,        IBV_WR_RDMA_READ,           IBV_WR_ATOMIC_CMP_AND_SWP,
      IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_WRITE,          static_cast<ibv_wr_opcode>(0x7f)};
  ibv_send_wr& w = c.wr[j];
  std::memset(&w, 0, sizeof w);
  w.wr_id = j;
  w.opcode = r.chance(3) ? static_cast<ibv_wr_opcode>(0x7f) : r.pick(ops);
  bool atomic = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  bool read = w.opcode == IBV_WR_RDMA_READ;
  w.send_flags = r.chance(80) ? IBV_SEND_SIGNALED : 0;
  if (r.chance(15)) w.send_flags |= IBV_SEND_INLINE;
  if (r.chance(10)) w.send_flags |= IBV_SEND_FENCE | IBV_SEND_SOLICITED;
  w.num_sge = static_cast<int>(r.chance(95) ? r.below(5) : r.below(kSgeMax + 1));
  w.sg_list = c.sge[j];
  for (int k = 0; k < w.num_sge; ++k) {
    ibv_sge& s = c.sge[j][k];
    bool inline_data = (w.send_flags & IBV_SEND_INLINE) && !read && !atomic;
    // At most kSgeMax SGEs of kSlot / kSgeMax bytes fit a WR's slot of the destination. Inline
    // data is read by the provider from s.addr: always memory of ours, any length inside it.
    uint32_t off = r.below(kSrc - kSlot / kSgeMax);
    s.length = inline_data || r.chance(80) ? r.below(kSlot / kSgeMax + 1)
                                           : static_cast<uint32_t>(r.edgy(kSrc));
    if (atomic && r.chance(80)) s.length = 8;
    char* base = read || atomic ? t.local.data() : t.src.data();
    s.addr = reinterpret_cast<uint64_t>(base + (atomic ? off & ~7u : off));
    if (!inline_data && r.chance(10)) s.addr = r.next();
    ibv_mr* mr = read || atomic ? t.mr_local : t.mr_src;
    s.lkey = r.chance(85)   ? mr->lkey
             : r.chance(50) ? t.mr_dst->lkey
                            : static_cast<uint32_t>(r.next());
  }
  uint64_t raddr = reinterpret_cast<uint64_t>(t.dst.data()) + uint64_t{j} * kSlot;
  // Wrong: beyond the destination or across its end (never into another WR's slot).
  uint64_t end = reinterpret_cast<uint64_t>(t.dst.data()) + t.dst.size();
  if (r.chance(10)) raddr = r.chance(50) ? end - r.below(64) : r.next();
  uint32_t rkey = r.chance(90) ? t.mr_dst->rkey : static_cast<uint32_t>(r.next());
  if (atomic) {
    w.wr.atomic = {raddr + (r.chance(90) ? 0 : r.below(8)), r.next(), r.next(), rkey};
  } else {
    w.wr.rdma = {raddr, rkey};
  }
  w.imm_data = static_cast<uint32_t>(r.next());
}

// The same WR through the ibv_wr_* builder.
void build_wr_api(ibv_qp_ex* x, const ibv_send_wr& w) {
  x->wr_id = w.wr_id;
  x->wr_flags = w.send_flags;
  switch (w.opcode) {
    case IBV_WR_RDMA_WRITE:
      ibv_wr_rdma_write(x, w.wr.rdma.rkey, w.wr.rdma.remote_addr);
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      ibv_wr_rdma_write_imm(x, w.wr.rdma.rkey, w.wr.rdma.remote_addr, w.imm_data);
      break;
    case IBV_WR_SEND:
      ibv_wr_send(x);
      break;
    case IBV_WR_SEND_WITH_IMM:
      ibv_wr_send_imm(x, w.imm_data);
      break;
    case IBV_WR_RDMA_READ:
      ibv_wr_rdma_read(x, w.wr.rdma.rkey, w.wr.rdma.remote_addr);
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      ibv_wr_atomic_cmp_swp(x, w.wr.atomic.rkey, w.wr.atomic.remote_addr, w.wr.atomic.compare_add,
                            w.wr.atomic.swap);
      break;
    default:
      ibv_wr_atomic_fetch_add(x, w.wr.atomic.rkey, w.wr.atomic.remote_addr,
                              w.wr.atomic.compare_add);
      break;
  }
  if ((w.send_flags & IBV_SEND_INLINE) && w.opcode != IBV_WR_RDMA_READ) {
    std::vector<ibv_data_buf> bufs;
    for (int k = 0; k < w.num_sge; ++k)
      bufs.push_back({reinterpret_cast<void*>(w.sg_list[k].addr), w.sg_list[k].length});
    ibv_wr_set_inline_data_list(x, bufs.size(), bufs.data());
  } else {
    ibv_wr_set_sge_list(x, static_cast<size_t>(w.num_sge), w.sg_list);
  }
}

bool wr_api_ok(const ibv_send_wr& w) {
  return w.opcode != static_cast<ibv_wr_opcode>(0x7f) &&
         !((w.send_flags & IBV_SEND_INLINE) &&
           (w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD));
}

}  // namespace

TEST_F(Post, RandomWrListsCompleteOnceOrFailWithAnAllowedErrno) {
  fuzz::Rng r(fuzz::seed() + 2);
  uint64_t posted = 0, refused = 0, good = 0, failed = 0, resets = 0,
           rounds = fuzz::iters(160000) / 8;
  for (uint64_t round = 0; round < rounds && !HasFailure(); ++round) {
    std::memset(dst.data(), 0, dst.size());
    // Receives for the SENDs: a random list (its own errno rules), then enough valid ones.
    ibv_sge rsge[kSgeMax];
    ibv_recv_wr rwr[4] = {};
    for (uint32_t k = 0; k < 4; ++k) {
      rwr[k].wr_id = 100 + k;
      rwr[k].sg_list = rsge;
      rwr[k].num_sge = static_cast<int>(r.chance(80) ? 1 : r.below(kSgeMax + 1));
      rwr[k].next = k + 1 < 4 ? &rwr[k + 1] : nullptr;
    }
    for (ibv_sge& s : rsge)
      s = {reinterpret_cast<uint64_t>(dst.data()) + (kChainMax - 1) * uint64_t{kSlot},
           r.chance(80) ? r.below(kSlot) : static_cast<uint32_t>(r.edgy(kSlot)),
           r.chance(90) ? mr_dst->lkey : static_cast<uint32_t>(r.next())};
    ibv_recv_wr* rbad = nullptr;
    int rrc = ibv_post_recv(b, rwr, &rbad);
    if (rrc) {
      EXPECT_TRUE(errno_in("ibv_post_recv", rrc, {EINVAL, ENOMEM}));
    }
    if (rrc) {
      EXPECT_TRUE(rbad >= rwr && rbad < rwr + 4);
    }

    Chain c;
    c.n = 1 + r.below(kChainMax - 1);  // the last slot is the receives'
    for (uint32_t j = 0; j < c.n; ++j) make_wr(r, *this, c, j);
    for (uint32_t j = 0; j + 1 < c.n; ++j) c.wr[j].next = &c.wr[j + 1];
    std::map<uint64_t, int> posts;  // wr_id -> times posted
    bool cycle = false;
    c.wr_api = r.chance(30);
    for (uint32_t j = 0; j < c.n && c.wr_api; ++j) c.wr_api = wr_api_ok(c.wr[j]);
    int rc;
    if (c.wr_api) {
      ibv_wr_start(ax);
      for (uint32_t j = 0; j < c.n; ++j) build_wr_api(ax, c.wr[j]);
      rc = ibv_wr_complete(ax);
      if (rc) {
        EXPECT_TRUE(errno_in("ibv_wr_complete", rc, {EINVAL, ENOMEM, EOPNOTSUPP}));
      }
      for (uint32_t j = 0; j < c.n && !rc; ++j) ++posts[j];
    } else {
      // A chain that links back to its head: what a list-building bug gives; the queue ends it
      // (ENOMEM once full), having posted an unknown number of laps.
      cycle = r.chance(5);
      if (cycle) c.wr[c.n - 1].next = &c.wr[0];
      ibv_send_wr* bad = nullptr;
      rc = ibv_post_send(a, c.wr, &bad);
      if (rc) {
        EXPECT_TRUE(errno_in("ibv_post_send", rc, {EINVAL, ENOMEM}));
        EXPECT_TRUE(bad >= c.wr && bad < c.wr + c.n) << "bad_wr outside the list";
      }
      if (cycle) {
        EXPECT_NE(rc, 0) << "a cyclic list was posted whole";
      }
      for (uint32_t j = 0; j < c.n && cycle; ++j) posts[j] = 1 << 20;  // any number of times
      // The WRs before bad_wr were posted.
      for (ibv_send_wr* w = c.wr; w && w != bad && !cycle; w = w->next) ++posts[w->wr_id];
    }
    (rc ? refused : posted) += 1;
    uint64_t signaled = 0;
    for (auto& [id, n] : posts) signaled += (c.wr[id].send_flags & IBV_SEND_SIGNALED) ? n : 0;
    // Every signaled WR posted completes once; an unsignaled one only with an error.
    std::map<uint64_t, int> seen;
    uint64_t got = 0;
    bool error = false;
    // Errors of unsignaled WRs come too: wait until the signaled ones are all in (or the
    // deadline against hangs passes), then take what else is there.
    std::vector<ibv_wc> wcs;
    for (uint64_t in = 0; !cycle && in < signaled;) {
      uint64_t want = signaled - in;
      std::vector<ibv_wc> more = vt::poll_n(cq_a, want);
      for (const ibv_wc& wc : more)
        in += (c.wr[wc.wr_id % kChainMax].send_flags & IBV_SEND_SIGNALED) != 0;
      wcs.insert(wcs.end(), more.begin(), more.end());
      if (more.size() < want) break;  // the deadline passed
    }
    for (const ibv_wc& wc : vt::drain(cq_a, 20)) wcs.push_back(wc);
    for (const ibv_wc& wc : wcs) {
      ASSERT_TRUE(posts.count(wc.wr_id))
          << "completion of a WR never posted: " << wc.wr_id << " status " << wc.status;
      bool sig = c.wr[wc.wr_id].send_flags & IBV_SEND_SIGNALED;
      EXPECT_TRUE(sig || wc.status != IBV_WC_SUCCESS) << "an unsignaled WR completed successfully";
      got += sig;
      ++seen[wc.wr_id];
      error |= wc.status != IBV_WC_SUCCESS;
      (wc.status == IBV_WC_SUCCESS ? good : failed) += 1;
      const ibv_send_wr& w = c.wr[wc.wr_id];
      if (wc.status != IBV_WC_SUCCESS || w.opcode != IBV_WR_RDMA_WRITE) continue;
      // A successful WRITE wrote exactly the bytes of its SGEs at its remote address.
      uint64_t off = w.wr.rdma.remote_addr - reinterpret_cast<uint64_t>(dst.data());
      for (int k = 0; k < w.num_sge; ++k) {
        const char* from = reinterpret_cast<const char*>(w.sg_list[k].addr);
        EXPECT_EQ(std::memcmp(dst.data() + off, from, w.sg_list[k].length), 0)
            << "WR " << wc.wr_id << " completed successfully with wrong data";
        off += w.sg_list[k].length;
      }
    }
    if (!cycle) {
      EXPECT_EQ(got, signaled) << "signaled WRs posted and their completions differ";
    }
    for (auto& [id, n] : seen)
      if (c.wr[id].send_flags & IBV_SEND_SIGNALED) {
        EXPECT_LE(n, posts[id]) << "WR " << id;
      }
    vt::drain(cq_b, 20);
    // An unsignaled WR last (or a cycle's laps) may still be running and fail later: a reset
    // retires its completion with the QP's incarnation, so no round sees another's.
    bool tail_unsignaled =
        cycle || (!posts.empty() && !(c.wr[posts.rbegin()->first].send_flags & IBV_SEND_SIGNALED));
    if (error || tail_unsignaled || vt::qp_state(a) != IBV_QPS_RTS ||
        vt::qp_state(b) != IBV_QPS_RTS) {
      ++resets;
      connect();
      vt::drain(cq_a, 20);
      vt::drain(cq_b, 20);
    }
  }
  std::printf("%llu lists posted, %llu refused; %llu completions good, %llu errors; %llu resets\n",
              (unsigned long long)posted, (unsigned long long)refused, (unsigned long long)good,
              (unsigned long long)failed, (unsigned long long)resets);
  EXPECT_GT(good, 0u);
  EXPECT_GT(failed, 0u);
  EXPECT_GT(refused, 0u);
}

// Found by the target above with EMU_ENGINE=thread (a third of its runs): ibv_modify_qp to RESET
// stored RESET, then waited for the device to leave the QP; a device thread inside, failing a WR
// of the old incarnation, stored ERR after it, and the QP was in ERR once the modify returned 0.
// The move to RESET now stores it again once no engine is inside. Each round races a failing
// WRITE (bad rkey) against the reset; with the engine inline there is no race and it must pass.
TEST_F(Post, ResetWhileTheDeviceFailsAWrEndsInReset) {
  // Good WRITEs keep the device busy on the QP; the last one's bad rkey fails it.
  constexpr int kWrs = 8;
  ibv_sge sge{reinterpret_cast<uint64_t>(src.data()), kSrc / 2, mr_src->lkey};
  ibv_send_wr wr[kWrs] = {};
  for (int i = 0; i < kWrs; ++i) {
    wr[i].opcode = IBV_WR_RDMA_WRITE;
    wr[i].sg_list = &sge;
    wr[i].num_sge = 1;
    wr[i].next = i + 1 < kWrs ? &wr[i + 1] : nullptr;
    wr[i].wr.rdma = {reinterpret_cast<uint64_t>(dst.data()), mr_dst->rkey};
  }
  wr[kWrs - 1].send_flags = IBV_SEND_SIGNALED;
  wr[kWrs - 1].wr.rdma.rkey ^= 0x5a5a00;
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  const uint64_t rounds = fuzz::iters(4000);
  for (uint64_t round = 0; round < rounds && !HasFailure(); ++round) {
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a, wr, &bad), 0);
    for (uint64_t spin = 0; spin < round % 32; ++spin)
      sched_yield();  // varies where the reset lands
    ASSERT_EQ(ibv_modify_qp(a, &reset, IBV_QP_STATE), 0);
    ASSERT_EQ(vt::qp_state(a), IBV_QPS_RESET) << "round " << round;
    connect();
  }
}
