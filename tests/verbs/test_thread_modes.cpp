// SPDX-License-Identifier: BSD-2-Clause
// Thread modes of the provider's post path (docs/design/doorbells-and-mmio.md, "Thread modes"):
// thread domains and parent domains (their lifetimes and errnos, the dedicated doorbell registers),
// the ownership checker of lockless QPs, EMU_SINGLE_THREADED (in a peer process, since the provider
// reads its knobs once per process), and eight threads posting through each mode without a race
// event.
#include <link.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "emudv_link.h"
#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

// The emudv_* functions of the preloaded provider, or nullptr when it is not loaded. Looked up
// (stress/emudv_link.h) rather than linked: the test binary stays a plain libibverbs program that
// gets the provider by LD_PRELOAD (emu-run), as every verbs test does, so there is exactly one
// copy of the provider and it is the one whose segment the test's objects live in.
const uctlite::EmudvFns* dv() { return uctlite::emudv_fns(); }

uint32_t gettid_u32() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

// This process's race events numbered >= from, of one QP (qpn 0: any).
std::vector<emudv_race> races_since(uint64_t from, uint32_t qpn = 0) {
  std::vector<emudv_race> all(1024), out;
  int n = dv()->read_races(from, all.data(), static_cast<int>(all.size()));
  for (int i = 0; i < n; ++i)
    if (all[i].pid == getpid() && (qpn == 0 || all[i].qpn == qpn)) out.push_back(all[i]);
  return out;
}

// The first few events, for a failure message (a racing run can log hundreds).
std::string describe(const std::vector<emudv_race>& v) {
  std::string s = std::to_string(v.size()) + " race events";
  for (size_t i = 0; i < v.size() && i < 8; ++i) {
    const emudv_race& e = v[i];
    char b[160];
    std::snprintf(b, sizeof b, " [%s qpn %u reg %d slot %u tids %u,%u]", e.kind_name, e.qpn, e.reg,
                  e.slot, e.writer_tids[0], e.writer_tids[1]);
    s += b;
  }
  return s;
}

uint32_t knob(const char* name, uint32_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<uint32_t>(std::strtoul(v, nullptr, 0)) : dflt;
}
uint32_t shared_uars() { return knob("EMU_UARS", 16); }
uint32_t td_uars() { return knob("EMU_TD_UARS", 16); }

int uar_index(ibv_qp* qp) {
  emudv_qp q;
  return dv()->init_qp(qp, &q) == 0 ? static_cast<int>(q.uar.index) : -1;
}

constexpr uint32_t kMsg = 64;

// An RC QP made with ibv_create_qp_ex on pd (a PD or a parent domain), with the ibv_wr_* API.
ibv_qp* create_wr_qp(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq) {
  return create_qp_ex(ctx, pd, IBV_QPT_RC, cq, {64, 16, 1, 1, kMsg}, IBV_QP_EX_WITH_RDMA_WRITE);
}

int post_inline_write(ibv_qp* qp, uint64_t wr_id, const void* src, uint64_t raddr, uint32_t rkey) {
  ibv_sge sg{reinterpret_cast<uint64_t>(src), kMsg, 0};
  ibv_send_wr wr =
      rdma_wr(wr_id, IBV_WR_RDMA_WRITE, &sg, 1, raddr, rkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// The overlap the ownership checker is for, made deterministic: thread 1 opens an ibv_wr_*
// session on qp (and so is inside its send queue), thread 2 then calls ibv_post_send on the same
// QP, and only after that does thread 1 add its WRITE and complete the session. Each writes kMsg
// bytes of `fill` at raddr and raddr + kMsg (wr_ids 1 and 2).
struct Overlap {
  uint32_t tid1 = 0, tid2 = 0;
  int rc_post = -1, rc_complete = -1;
};

Overlap overlap_on(ibv_qp* qp, uint64_t raddr, uint32_t rkey, uint8_t fill) {
  Overlap o;
  std::promise<void> started, posted;
  std::future<void> started_f = started.get_future(), posted_f = posted.get_future();
  uint8_t src1[kMsg], src2[kMsg];
  std::memset(src1, fill, kMsg);
  std::memset(src2, fill + 1, kMsg);
  std::thread t1([&] {
    o.tid1 = gettid_u32();
    ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
    ibv_wr_start(x);
    started.set_value();
    posted_f.wait();
    wr_add_inline_write(x, 1, rkey, raddr, src1, kMsg);
    o.rc_complete = ibv_wr_complete(x);
  });
  std::thread t2([&] {
    o.tid2 = gettid_u32();
    started_f.wait();
    o.rc_post = post_inline_write(qp, 2, src2, raddr + kMsg, rkey);
    posted.set_value();
  });
  t2.join();
  t1.join();
  return o;
}

// Thread 1 then thread 2 (each joined before the next starts): an aborted session, a session, a
// post and a receive each. Nobody is inside the queue when the next one comes (an abort leaves it
// as a complete does).
void sequential_on(ibv_qp* qp, uint64_t raddr, uint32_t rkey, const ibv_sge& recv_sge,
                   int* errors) {
  for (int k = 0; k < 2; ++k) {
    std::thread t([&, k] {
      uint8_t src[kMsg];
      std::memset(src, 0x40 + k, kMsg);
      ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
      ibv_wr_start(x);
      wr_add_inline_write(x, 99, rkey, raddr, src, kMsg);
      ibv_wr_abort(x);
      ibv_wr_start(x);
      wr_add_inline_write(x, 10 + k, rkey, raddr, src, kMsg);
      if (ibv_wr_complete(x)) ++*errors;
      if (post_inline_write(qp, 20 + k, src, raddr + kMsg, rkey)) ++*errors;
      ibv_sge sg = recv_sge;
      ibv_recv_wr rw{};
      rw.wr_id = 30 + k;
      rw.sg_list = &sg;
      rw.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      if (ibv_post_recv(qp, &rw, &bad)) ++*errors;
    });
    t.join();
  }
}

class ThreadModes : public VerbsTest {
 protected:
  void SetUpObjects() override {
    ASSERT_TRUE(dv()) << "emudv_* not found: is libemu_verbs.so preloaded?";
  }
  void TearDown() override {
    // Everything made with a parent domain goes before it, and parent domains before the thread
    // domains and the PD they hold.
    for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ibv_destroy_qp(*it), 0);
    qps.clear();
    for (auto it = srqs.rbegin(); it != srqs.rend(); ++it) EXPECT_EQ(ibv_destroy_srq(*it), 0);
    srqs.clear();
    for (auto it = cqs.rbegin(); it != cqs.rend(); ++it) EXPECT_EQ(ibv_destroy_cq(*it), 0);
    cqs.clear();
    for (ibv_mr* mr : parent_mrs) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    for (auto it = parents.rbegin(); it != parents.rend(); ++it) EXPECT_EQ(ibv_dealloc_pd(*it), 0);
    for (ibv_td* td : tds) EXPECT_EQ(ibv_dealloc_td(td), 0);
    VerbsTest::TearDown();
  }

  ibv_td* make_td() {
    ibv_td_init_attr a{};
    ibv_td* td = ibv_alloc_td(ctx, &a);
    EXPECT_NE(td, nullptr) << "ibv_alloc_td, errno " << errno;
    if (td) tds.push_back(td);
    return td;
  }
  ibv_pd* make_parent(ibv_td* td, ibv_pd* on = nullptr) {
    ibv_parent_domain_init_attr a{};
    a.pd = on ? on : pd;
    a.td = td;
    ibv_pd* p = ibv_alloc_parent_domain(ctx, &a);
    EXPECT_NE(p, nullptr) << "ibv_alloc_parent_domain, errno " << errno;
    if (p) parents.push_back(p);
    return p;
  }
  ibv_qp* make_qp_on(ibv_pd* on, ibv_cq* cq, const QpCaps& caps = {}) {
    ibv_qp* qp = create_rc_qp(on, cq, cq, caps);
    EXPECT_NE(qp, nullptr) << "ibv_create_qp, errno " << errno;
    if (qp) qps.push_back(qp);
    return qp;
  }
  // A requester on `on` connected to a responder made on the PD (each with its own CQ).
  Pair pair_on(ibv_pd* on, const QpCaps& caps = {}) {
    Pair p;
    p.cqa = make_cq(1024);
    p.cqb = make_cq(64);
    if (!p.cqa || !p.cqb) return p;
    p.a = make_qp_on(on, p.cqa, caps);
    p.b = make_qp(p.cqb, p.cqb, caps);
    if (!p.a || !p.b) return p;
    EXPECT_EQ(connect_qp(p.a, lid, p.b->qp_num, 0x100, 0x200), 0);
    EXPECT_EQ(connect_qp(p.b, lid, p.a->qp_num, 0x200, 0x100), 0);
    return p;
  }

  std::vector<ibv_td*> tds;
  std::vector<ibv_pd*> parents;
  std::vector<ibv_mr*> parent_mrs;
  // What the ownership checker's tests run on: a QP under a thread domain of its own, its CQ, a
  // buffer for its WRITEs, and the count of races recorded before anything ran on it.
  struct OwnerCase {
    ibv_qp* a = nullptr;
    ibv_cq* cq = nullptr;
    Buf target;
    uint64_t races_before = 0;
  };
  void td_qp_with_peer(OwnerCase* c);
  void eight_threads_on_own_pairs(bool own_td);
};

// ---- thread and parent domains: lifetimes and errnos ----

// Every pthread_create of a program that loads the provider zeroes (and faults in) the
// provider's static TLS. It was 197 KiB (the engine's run buffers and a bounce buffer as
// thread_local arrays), 11 ms of an emu-race schedule's 14 on this VM; they are allocated on a
// thread's first use now, and what is left is small.
TEST(ProviderTls, ANewThreadZeroesLittleOfTheProvidersTls) {
  ASSERT_NE(ibv_get_device_list(nullptr), nullptr);  // the provider is loaded
  struct Found {
    bool seen = false;
    uint64_t tls = 0;
  } f;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* found = static_cast<Found*>(arg);
        if (!info->dlpi_name || !std::strstr(info->dlpi_name, "libemu_verbs")) return 0;
        found->seen = true;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_TLS) found->tls += info->dlpi_phdr[i].p_memsz;
        return 0;
      },
      &f);
  ASSERT_TRUE(f.seen) << "libemu_verbs is not loaded";
  EXPECT_LT(f.tls, 4096u) << "bytes of static TLS every new thread zeroes";
}

TEST_F(ThreadModes, AllocTdRejectsUnknownCompMask) {
  ibv_td_init_attr a{};
  a.comp_mask = 1;
  errno = 0;
  EXPECT_EQ(ibv_alloc_td(ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(ThreadModes, ParentDomainErrnos) {
  ibv_parent_domain_init_attr a{};
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx, &a), nullptr) << "no protection domain";
  EXPECT_EQ(errno, EINVAL);
  a.pd = pd;
  a.comp_mask = 1u << 7;
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx, &a), nullptr) << "unknown comp_mask bit";
  EXPECT_EQ(errno, EINVAL);
  // The allocators and a context are accepted (the device's queues never come from them).
  a.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  a.pd_context = this;
  ibv_pd* par = ibv_alloc_parent_domain(ctx, &a);
  ASSERT_NE(par, nullptr) << "errno " << errno;
  parents.push_back(par);
  EXPECT_EQ(par->context, ctx);
  EXPECT_EQ(par->handle, pd->handle) << "interchangeable with its protection domain";
}

TEST_F(ThreadModes, DeallocWhileHeldIsEbusy) {
  ibv_td* td = make_td();
  ASSERT_NE(td, nullptr);
  ibv_pd* par = make_parent(td);
  ASSERT_NE(par, nullptr);
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY) << "a parent domain holds the thread domain";
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "a parent domain holds the protection domain";

  // A CQ made with the parent domain holds it too; a plain PD there is EINVAL (as mlx5).
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  ca.parent_domain = pd;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx, &ca), nullptr) << "a protection domain is not a parent domain";
  EXPECT_EQ(errno, EINVAL);
  ca.parent_domain = par;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  ASSERT_NE(cqx, nullptr) << "errno " << errno;
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  ibv_qp* qp = create_rc_qp(par, cq, cq);
  ASSERT_NE(qp, nullptr) << "errno " << errno;
  EXPECT_EQ(qp->pd, par);

  EXPECT_EQ(ibv_dealloc_pd(par), EBUSY) << "a QP and a CQ hold the parent domain";
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dealloc_pd(par), EBUSY) << "the CQ still holds it";
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY);
  EXPECT_EQ(ibv_dealloc_pd(par), 0);
  parents.clear();
  EXPECT_EQ(ibv_dealloc_td(td), 0);
  tds.clear();
  // The protection domain outlived its parent domain and is free to go now (TearDown).
}

TEST_F(ThreadModes, TdsPastTheReservedRegistersAreEnomem) {
  std::vector<ibv_td*> got;
  ibv_td_init_attr a{};
  for (uint32_t i = 0; i < td_uars(); ++i) {
    ibv_td* td = ibv_alloc_td(ctx, &a);
    ASSERT_NE(td, nullptr) << "thread domain " << i << " of " << td_uars() << ", errno " << errno;
    got.push_back(td);
  }
  errno = 0;
  EXPECT_EQ(ibv_alloc_td(ctx, &a), nullptr) << "one more than EMU_TD_UARS";
  EXPECT_EQ(errno, ENOMEM);
  // A register given back is taken again.
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(ibv_dealloc_td(got.back()), 0);
  got.pop_back();
  ibv_td* again = ibv_alloc_td(ctx, &a);
  EXPECT_NE(again, nullptr) << "errno " << errno;
  if (again) got.push_back(again);
  for (ibv_td* td : got) EXPECT_EQ(ibv_dealloc_td(td), 0);
}

TEST_F(ThreadModes, TdQpsRingTheirDomainsRegister) {
  ibv_cq* cq = make_cq();
  ibv_td* td1 = make_td();
  ibv_td* td2 = make_td();
  ASSERT_TRUE(cq && td1 && td2);
  ibv_pd* p1 = make_parent(td1);
  ibv_pd* p2 = make_parent(td2);
  ibv_pd* p0 = make_parent(nullptr);  // no thread domain: just its PD
  ASSERT_TRUE(p1 && p2 && p0);
  ibv_qp* q1a = make_qp_on(p1, cq);
  ibv_qp* q1b = make_qp_on(p1, cq);
  ibv_qp* q2 = make_qp_on(p2, cq);
  ibv_qp* q0 = make_qp_on(p0, cq);
  ibv_qp* plain = make_qp(cq, cq);
  ASSERT_TRUE(q1a && q1b && q2 && q0 && plain);
  int r1a = uar_index(q1a), r1b = uar_index(q1b), r2 = uar_index(q2);
  int shared = static_cast<int>(shared_uars()), all = shared + static_cast<int>(td_uars());
  EXPECT_GE(r1a, shared) << "a thread domain's register is one of those after the shared ones";
  EXPECT_LT(r1a, all);
  EXPECT_EQ(r1a, r1b) << "QPs of one thread domain share its register";
  EXPECT_GE(r2, shared);
  EXPECT_LT(r2, all);
  EXPECT_NE(r1a, r2) << "each thread domain has its own register";
  EXPECT_GE(uar_index(q0), 0);
  EXPECT_LT(uar_index(q0), shared) << "a parent domain without a thread domain: a shared register";
  EXPECT_LT(uar_index(plain), shared);
}

// The BlueFlame buffers of qp's register, both of them (2 x 256 bytes).
std::vector<uint8_t> bf_buffers(ibv_qp* qp) {
  emudv_qp q;
  if (dv()->init_qp(qp, &q) != 0) return {};
  const uint8_t* b = static_cast<const uint8_t*>(q.uar.bf);
  return std::vector<uint8_t>(b, b + 2 * q.uar.bf_size);
}

// EMU_BLUEFLAME=auto (the default): a lone WQE on a locked (shared) register rings the 8-byte
// doorbell and leaves the register's BlueFlame buffers as they were; on a thread domain's
// register, which has no lock, it goes through BlueFlame (the device executes that copy). Under
// `always` both go through BlueFlame, under `never` neither.
TEST_F(ThreadModes, BlueFlameOnlyOnRegistersWithoutALock) {
  const char* knob = std::getenv("EMU_BLUEFLAME");
  std::string mode = knob && *knob ? knob : "auto";
  bool always = mode == "always" || mode == "1", never = mode == "never" || mode == "0";
  ibv_td* td = make_td();
  ASSERT_NE(td, nullptr);
  ibv_pd* par = make_parent(td);
  ASSERT_NE(par, nullptr);
  Buf dst = make_buf(4096);
  uint8_t src[kMsg];
  std::memset(src, 0x5a, kMsg);
  struct Case {
    ibv_pd* on;
    bool blueflame;
  };
  for (Case c : {Case{pd, always}, Case{par, !never}}) {
    Pair p = pair_on(c.on);
    ASSERT_TRUE(p.a && p.b);
    std::vector<uint8_t> before = bf_buffers(p.a);
    ASSERT_FALSE(before.empty());
    ASSERT_EQ(post_inline_write(p.a, 7, src, dst.addr(), dst.rkey()), 0);
    ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 7));
    EXPECT_EQ(dst.p[0], 0x5a);
    std::vector<uint8_t> after = bf_buffers(p.a);
    if (c.blueflame) {
      EXPECT_NE(after, before) << "EMU_BLUEFLAME=" << mode << ", "
                               << (c.on == pd ? "a locked" : "a thread domain's")
                               << " register: the WQE went through BlueFlame";
    } else {
      EXPECT_EQ(after, before) << "EMU_BLUEFLAME=" << mode << ", "
                               << (c.on == pd ? "a locked" : "a thread domain's")
                               << " register: the doorbell, its BlueFlame untouched";
    }
    std::memset(dst.p, 0, kMsg);
  }
}

// A QP made with a parent domain works with keys of its protection domain, in both directions:
// its local keys from MRs registered on the PD, the responder's rkey from an MR registered
// through the parent domain. Receives and an SRQ under a thread domain too.
TEST_F(ThreadModes, ParentDomainObjectsUseTheProtectionDomainsKeys) {
  ibv_td* td = make_td();
  ASSERT_NE(td, nullptr);
  ibv_pd* par = make_parent(td);
  ASSERT_NE(par, nullptr);
  Pair p = pair_on(par);
  ASSERT_TRUE(p.a && p.b);
  Buf local = make_buf(4096);  // on the PD
  for (int i = 0; i < 256; ++i) local.p[i] = static_cast<uint8_t>(i * 7 + 3);
  Buf remote = make_buf(4096);
  ibv_mr* rmr = ibv_reg_mr(par, remote.p + 2048, 1024, kAllAccess);  // through the parent domain
  ASSERT_NE(rmr, nullptr) << "errno " << errno;
  parent_mrs.push_back(rmr);
  EXPECT_EQ(rmr->pd, par);

  ibv_sge sg = local.sge(0, 256);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &sg, 1, remote.addr() + 2048, rmr->rkey);
  ASSERT_EQ(post_one(p.a, &w), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 1));
  EXPECT_EQ(std::memcmp(remote.p + 2048, local.p, 256), 0);
  // And back: a READ into the PD's MR.
  ibv_sge rs = local.sge(1024, 256);
  ibv_send_wr r = rdma_wr(2, IBV_WR_RDMA_READ, &rs, 1, remote.addr() + 2048, rmr->rkey);
  ASSERT_EQ(post_one(p.a, &r), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 2));
  EXPECT_EQ(std::memcmp(local.p + 1024, local.p, 256), 0);

  // SENDs from the responder into receives posted on the thread-domain QP.
  ASSERT_TRUE(send_through(p.b, p.cqb, local.sge(0, 40), p.a, p.cqa, local.sge(2048, 64), 3));
  EXPECT_EQ(std::memcmp(local.p + 2048, local.p, 40), 0);

  // An SRQ made with the parent domain (no lock: the thread domain's), receiving for a QP.
  ibv_srq_init_attr si{};
  si.attr.max_wr = 8;
  si.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(par, &si);
  ASSERT_NE(srq, nullptr) << "errno " << errno;
  srqs.push_back(srq);
  ibv_cq* cq = make_cq(16);
  ibv_qp* rx = make_qp_of(IBV_QPT_RC, cq, cq, {}, srq);
  ibv_qp* tx = make_qp(cq, cq);
  ASSERT_TRUE(rx && tx);
  ASSERT_EQ(connect_qp(rx, lid, tx->qp_num, 1, 2), 0);
  ASSERT_EQ(connect_qp(tx, lid, rx->qp_num, 2, 1), 0);
  ibv_sge srs = local.sge(3072, 64);
  ASSERT_EQ(post_srq(srq, 5, &srs), 0);
  ibv_sge ss = local.sge(0, 40);
  ibv_send_wr s2 = send_wr(6, IBV_WR_SEND, &ss, 1);
  ASSERT_EQ(post_one(tx, &s2), 0);
  auto wcs = poll_n(cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
  EXPECT_EQ(std::memcmp(local.p + 3072, local.p, 40), 0);
}

// ---- the ownership checker ----

// A QP under a thread domain of its own (the ibv_wr_* API on), connected to a plain peer QP, and a
// 4 KiB target buffer.
void ThreadModes::td_qp_with_peer(OwnerCase* c) {
  ibv_td* td = make_td();
  ASSERT_NE(td, nullptr);
  ibv_pd* par = make_parent(td);
  ASSERT_NE(par, nullptr);
  c->cq = make_cq(64);
  ibv_cq* rcq = make_cq(64);
  ASSERT_TRUE(c->cq && rcq);
  c->a = create_wr_qp(ctx, par, c->cq);
  ASSERT_NE(c->a, nullptr) << "errno " << errno;
  qps.push_back(c->a);
  ibv_qp* b = make_qp(rcq, rcq);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(connect_qp(c->a, lid, b->qp_num, 1, 2), 0);
  ASSERT_EQ(connect_qp(b, lid, c->a->qp_num, 2, 1), 0);
  c->target = make_buf(4096);
  c->races_before = dv()->races_recorded();
}

TEST_F(ThreadModes, OwnerCheckerNamesBothThreads) {
  OwnerCase c;
  ASSERT_NO_FATAL_FAILURE(td_qp_with_peer(&c));
  Overlap o = overlap_on(c.a, c.target.addr(), c.target.rkey(), 0x5a);
  EXPECT_EQ(o.rc_post, 0);
  EXPECT_EQ(o.rc_complete, 0);
  // The race went on as on hardware: both WRITEs ran, one after the other.
  auto wcs = poll_n(c.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
  EXPECT_EQ(c.target.p[0], 0x5a);
  EXPECT_EQ(c.target.p[kMsg], 0x5b);

  auto ev = races_since(c.races_before, c.a->qp_num);
  ASSERT_EQ(ev.size(), 1u) << describe(ev);
  EXPECT_EQ(ev[0].kind, static_cast<uint32_t>(EMUDV_RACE_OWNER));
  EXPECT_STREQ(ev[0].kind_name, "owner_conflict");
  EXPECT_EQ(ev[0].writer_tids[0], o.tid1) << "the thread inside the queue";
  EXPECT_EQ(ev[0].writer_tids[1], o.tid2) << "the thread that came in";
  EXPECT_EQ(ev[0].reg, uar_index(c.a));
  EXPECT_EQ(ev[0].values[0], 0u) << "the send queue";
  EXPECT_EQ(ev[0].slot, 0u) << "the send queue's producer index when thread 2 came in";
  EXPECT_GE(ev[0].context, 0);
}

TEST_F(ThreadModes, OwnerCheckerQuietForSequentialUse) {
  OwnerCase c;
  ASSERT_NO_FATAL_FAILURE(td_qp_with_peer(&c));
  int errors = 0;
  sequential_on(c.a, c.target.addr(), c.target.rkey(), c.target.sge(1024, 64), &errors);
  EXPECT_EQ(errors, 0);
  auto wcs = poll_n(c.cq, 4);
  EXPECT_EQ(wcs.size(), 4u);
  auto ev = races_since(c.races_before, c.a->qp_num);
  EXPECT_TRUE(ev.empty()) << describe(ev);
}

// ---- EMU_SINGLE_THREADED, in a peer started with it (knobs are read once per process) ----

struct SingleReport {
  uint32_t ok;
  uint32_t plain_reg;  // the plain QP's register: a shared one
  char err[160];
};

[[noreturn]] void single_fail(const char* fmt, unsigned a = 0, unsigned b = 0) {
  SingleReport r{};
  std::snprintf(r.err, sizeof r.err, fmt, a, b);
  write_all(kPeerOut, &r, sizeof r);
  _exit(2);
}

// Role "single-threaded": a plain QP (no thread domain) has no locks here, so the overlap above is
// reported on it too; used by two threads one after the other, it is not.
[[noreturn]] void run_single_threaded_peer() {
  ibv_context* ctx = peer_open_emu0();
  if (!ctx || !dv()) single_fail("open emu0 / emudv");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 64, nullptr, nullptr, 0) : nullptr;
  ibv_qp* a = cq ? create_wr_qp(ctx, pd, cq) : nullptr;
  ibv_qp* b = cq ? create_rc_qp(pd, cq, cq) : nullptr;
  if (!a || !b) single_fail("pd/cq/qps (errno %u)", static_cast<unsigned>(errno));
  ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa) || connect_qp(a, pa.lid, b->qp_num, 1, 2) ||
      connect_qp(b, pa.lid, a->qp_num, 2, 1))
    single_fail("connect");
  alignas(4096) static uint8_t buf[4096];
  ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, kAllAccess);
  if (!mr) single_fail("reg_mr");

  uint64_t before = dv()->races_recorded();
  Overlap o = overlap_on(a, reinterpret_cast<uint64_t>(buf), mr->rkey, 0x21);
  if (o.rc_post || o.rc_complete)
    single_fail("overlap: post %u, complete %u", static_cast<unsigned>(o.rc_post),
                static_cast<unsigned>(o.rc_complete));
  auto wcs = poll_n(cq, 2);
  if (wcs.size() != 2 || wcs[0].status || wcs[1].status) single_fail("overlap's completions");
  auto ev = races_since(before, a->qp_num);
  if (ev.size() != 1 || ev[0].kind != static_cast<uint32_t>(EMUDV_RACE_OWNER) ||
      ev[0].writer_tids[0] != o.tid1 || ev[0].writer_tids[1] != o.tid2)
    single_fail("%u events on the plain QP, first of kind %u (expected one owner_conflict)",
                static_cast<unsigned>(ev.size()), ev.empty() ? 0u : ev[0].kind);

  before = dv()->races_recorded();
  int errors = 0;
  ibv_sge rs{reinterpret_cast<uint64_t>(buf) + 1024, 64, mr->lkey};
  sequential_on(a, reinterpret_cast<uint64_t>(buf), mr->rkey, rs, &errors);
  if (errors || poll_n(cq, 4).size() != 4)
    single_fail("sequential use: %u errors", static_cast<unsigned>(errors));
  ev = races_since(before, a->qp_num);
  if (!ev.empty()) single_fail("sequential use: %u race events", static_cast<unsigned>(ev.size()));

  SingleReport r{};
  r.ok = 1;
  r.plain_reg = static_cast<uint32_t>(uar_index(a));
  peer_finish(r);
}

const PeerRole kSingleThreaded("single-threaded", run_single_threaded_peer);

TEST(ThreadModesSingle, EveryQpIsCheckedUnderEmuSingleThreaded) {
  Peer peer;
  ASSERT_TRUE(peer.spawn("single-threaded", "EMU_SINGLE_THREADED=1"));
  SingleReport r{};
  ASSERT_NO_FATAL_FAILURE(peer.finish(&r, kDeadline));
  EXPECT_LT(r.plain_reg, shared_uars()) << "registers are still the shared ones";
}

// ---- eight threads posting, per mode: no race event, every WRITE once, the bytes in place ----

constexpr int kThreads = 8;
constexpr uint32_t kPerThread = 2000;
constexpr uint32_t kTotal = kThreads * kPerThread;

// Message id's bytes: every 4-byte word names the message and its place in it.
void fill_msg(uint8_t* p, uint32_t id) {
  for (uint32_t k = 0; k < kMsg / 4; ++k) {
    uint32_t v = id * 16 + k + 1;
    std::memcpy(p + 4 * k, &v, 4);
  }
}

struct Tally {
  std::vector<std::atomic<uint32_t>> seen = std::vector<std::atomic<uint32_t>>(kTotal);
  std::atomic<uint32_t> done{0}, bad_status{0}, bad_wr_id{0}, post_errors{0};
  void poll(ibv_cq* cq) {
    ibv_wc wc[32];
    int n = ibv_poll_cq(cq, 32, wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) bad_status.fetch_add(1);
      if (wc[i].wr_id >= kTotal)
        bad_wr_id.fetch_add(1);
      else
        seen[wc[i].wr_id].fetch_add(1);
      done.fetch_add(1);
    }
  }
};

// Thread t posts its kPerThread inline WRITEs through qps[t % qps.size()], each to its own 64-byte
// place in target, polling its QP's CQ whenever the send queue is full.
void eight_threads(const std::vector<ibv_qp*>& qps, const std::vector<ibv_cq*>& cqs,
                   const Buf& target) {
  uint64_t before = dv()->races_recorded();
  Tally tally;
  auto until = std::chrono::steady_clock::now() + kDeadline;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ibv_qp* qp = qps[t % qps.size()];
      ibv_cq* cq = cqs[t % cqs.size()];
      uint8_t src[kMsg];
      for (uint32_t i = 0; i < kPerThread; ++i) {
        uint32_t id = t * kPerThread + i;
        fill_msg(src, id);
        for (;;) {
          int rc =
              post_inline_write(qp, id, src, target.addr() + uint64_t(id) * kMsg, target.rkey());
          if (rc == 0) break;
          if (rc != ENOMEM || std::chrono::steady_clock::now() > until) {
            tally.post_errors.fetch_add(1);
            return;
          }
          tally.poll(cq);  // the send queue is full: completions give its room back
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  while (tally.done.load() < kTotal && std::chrono::steady_clock::now() < until)
    for (ibv_cq* cq : cqs) tally.poll(cq);

  EXPECT_EQ(tally.post_errors.load(), 0u);
  EXPECT_EQ(tally.done.load(), kTotal);
  EXPECT_EQ(tally.bad_status.load(), 0u);
  EXPECT_EQ(tally.bad_wr_id.load(), 0u);
  uint32_t not_once = 0, wrong = 0;
  uint8_t expect[kMsg];
  for (uint32_t id = 0; id < kTotal; ++id) {
    if (tally.seen[id].load() != 1) ++not_once;
    fill_msg(expect, id);
    if (std::memcmp(target.p + uint64_t(id) * kMsg, expect, kMsg) != 0) ++wrong;
  }
  EXPECT_EQ(not_once, 0u) << "WRITEs not completed exactly once";
  EXPECT_EQ(wrong, 0u) << "64-byte places not holding their WRITE's bytes";
  auto ev = races_since(before);
  EXPECT_TRUE(ev.empty()) << describe(ev);
}

QpCaps stress_caps() {
  QpCaps c;
  c.max_send_wr = 256;
  c.max_recv_wr = 1;
  c.max_send_sge = 1;
  c.max_recv_sge = 1;
  c.max_inline_data = kMsg;
  return c;
}

TEST_F(ThreadModes, EightThreadsOneSharedQp) {
  Pair p = pair_on(pd, stress_caps());
  ASSERT_TRUE(p.a && p.b);
  Buf target = make_buf(size_t(kTotal) * kMsg);
  eight_threads({p.a}, {p.cqa}, target);
}

// eight_threads on kThreads pairs, one each: each requester on the PD, or (own_td) on a parent
// domain of a thread domain of its own.
void ThreadModes::eight_threads_on_own_pairs(bool own_td) {
  std::vector<ibv_qp*> qs;
  std::vector<ibv_cq*> cs;
  for (int t = 0; t < kThreads; ++t) {
    ibv_pd* on = pd;
    if (own_td) {
      ibv_td* td = make_td();
      ASSERT_NE(td, nullptr);
      on = make_parent(td);
      ASSERT_NE(on, nullptr);
    }
    Pair p = pair_on(on, stress_caps());
    ASSERT_TRUE(p.a && p.b);
    qs.push_back(p.a);
    cs.push_back(p.cqa);
  }
  Buf target = make_buf(size_t(kTotal) * kMsg);
  eight_threads(qs, cs, target);
}

TEST_F(ThreadModes, EightThreadsOwnQps) { eight_threads_on_own_pairs(false); }

TEST_F(ThreadModes, EightThreadsOwnTdQps) { eight_threads_on_own_pairs(true); }

}  // namespace
}  // namespace vt
