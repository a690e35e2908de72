// SPDX-License-Identifier: BSD-2-Clause
// Verb fuzz targets, object verbs (issue 16 item 5): random attribute structs for every create
// verb and random attr_mask/attribute pairs for ibv_modify_qp in every state. Each call must
// succeed (and then honour what was asked) or fail with an errno its man page allows, and a failed
// modify must leave the QP as it was. Pointers are always objects of this program: garbage goes
// in the values, not in addresses (what an application can pass without undefined behaviour).
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "fuzz_verbs.h"

namespace {

using fuzz::errno_in;

struct Objects : ::testing::Test {
  void SetUp() override {
    ctx = vt::open_emu0();
    ASSERT_NE(ctx, nullptr);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    ASSERT_TRUE(pd && cq);
    lid = vt::port_lid(ctx);
  }
  void TearDown() override {
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    fuzz::expect_segment_clean();
  }
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  uint16_t lid = 0;
};

uint32_t cap_value(fuzz::Rng& r) {
  return r.chance(60) ? r.below(70) : static_cast<uint32_t>(r.edgy(1u << 16));
}

ibv_qp_type any_qp_type(fuzz::Rng& r) {
  const int types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RC, IBV_QPT_UD, 0, 5, 0x7f};
  return static_cast<ibv_qp_type>(r.pick(types));
}

}  // namespace

TEST_F(Objects, CreateVerbsOverRandomAttributes) {
  fuzz::Rng r(fuzz::seed());
  std::vector<char> buf(1 << 16);
  uint64_t made = 0, refused = 0;
  // Counts the call; a refusal must carry an errno the verb's man page allows.
  auto made_or_refused = [&](const void* obj, const char* verb,
                             std::initializer_list<int> allowed) {
    if (obj) return ++made, true;
    ++refused;
    EXPECT_TRUE(errno_in(verb, errno, allowed));
    return false;
  };
  for (uint64_t i = 0, n = fuzz::iters(50000); i < n; ++i) {
    errno = 0;
    switch (r.below(6)) {
      case 0: {  // ibv_create_qp(_ex): type, capacities, sq_sig_all, comp_mask
        ibv_qp_init_attr_ex a{};
        a.qp_type = any_qp_type(r);
        a.send_cq = cq;
        a.recv_cq = cq;
        a.cap = {cap_value(r), cap_value(r), cap_value(r), cap_value(r), cap_value(r)};
        a.sq_sig_all = static_cast<int>(r.below(3));
        a.pd = pd;
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        if (r.chance(30)) a.comp_mask |= static_cast<uint32_t>(r.next()) & ~0x1fu & 0xffff;
        if (r.chance(40)) {
          a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
          a.send_ops_flags = r.next() & 0xfff;
        }
        ibv_qp_cap want = a.cap;
        ibv_qp* qp = ibv_create_qp_ex(ctx, &a);
        if (!made_or_refused(qp, "ibv_create_qp_ex", {EINVAL, ENOMEM, ENOSYS, EOPNOTSUPP})) break;
        EXPECT_GE(a.cap.max_send_wr, want.max_send_wr);
        EXPECT_GE(a.cap.max_recv_sge, want.max_recv_sge);
        EXPECT_GE(a.cap.max_inline_data, want.max_inline_data);
        EXPECT_EQ(ibv_destroy_qp(qp), 0);
        break;
      }
      case 1: {  // ibv_create_cq(_ex): size, vector, wc_flags, flags
        ibv_cq_init_attr_ex a{};
        a.cqe = static_cast<uint32_t>(r.chance(60) ? r.below(5000) : r.edgy(1u << 22));
        a.comp_vector = r.chance(80) ? 0 : static_cast<uint32_t>(r.edgy(64));
        a.wc_flags = r.chance(50) ? uint64_t{IBV_WC_STANDARD_FLAGS} : r.next() & 0xffff;
        a.comp_mask = static_cast<uint32_t>(r.below(4));
        a.flags = static_cast<uint32_t>(r.below(4));
        ibv_cq_ex* c = ibv_create_cq_ex(ctx, &a);
        if (!made_or_refused(c, "ibv_create_cq_ex", {EINVAL, ENOMEM, EOPNOTSUPP})) break;
        EXPECT_GE(static_cast<uint32_t>(ibv_cq_ex_to_cq(c)->cqe), a.cqe);
        EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(c)), 0);
        break;
      }
      case 2: {  // ibv_create_srq(_ex), then ibv_modify_srq with a random limit and mask
        ibv_srq_init_attr_ex a{};
        a.attr = {cap_value(r), cap_value(r), r.chance(70) ? 0 : cap_value(r)};
        a.comp_mask = IBV_SRQ_INIT_ATTR_PD | (r.chance(50) ? IBV_SRQ_INIT_ATTR_TYPE : 0);
        a.srq_type = r.chance(80) ? IBV_SRQT_BASIC : static_cast<ibv_srq_type>(r.below(8) + 3);
        a.pd = pd;
        ibv_srq* s = ibv_create_srq_ex(ctx, &a);
        if (!made_or_refused(s, "ibv_create_srq_ex", {EINVAL, ENOMEM, ENOSYS, EOPNOTSUPP})) break;
        ibv_srq_attr m{cap_value(r), 0, cap_value(r)};
        int rc = ibv_modify_srq(s, &m, static_cast<int>(r.below(4)));
        if (rc) {
          EXPECT_TRUE(errno_in("ibv_modify_srq", rc, {EINVAL, ENOMEM, EOPNOTSUPP}));
        }
        EXPECT_EQ(ibv_destroy_srq(s), 0);
        break;
      }
      case 3: {  // ibv_reg_mr: flags, lengths, addresses inside, across the end of, and outside
                 // ours
        int access = static_cast<int>(r.chance(60) ? r.below(32) : r.next() & 0x3fffff);
        uint64_t off = r.below(buf.size());
        size_t len = r.chance(70) ? r.below(buf.size() - off + 1) : r.edgy(1ull << 40);
        void* addr = buf.data() + off;
        if (r.chance(10)) addr = nullptr;
        ibv_mr* mr = ibv_reg_mr(pd, addr, len, access);
        if (!made_or_refused(mr, "ibv_reg_mr", {EINVAL, ENOMEM, EFAULT, EACCES, EOPNOTSUPP})) break;
        EXPECT_EQ(mr->length, len);
        EXPECT_EQ(ibv_dereg_mr(mr), 0);
        break;
      }
      case 4: {  // ibv_create_ah: LID, SL, port, path bits, GRH with any GID index and hop limit
        ibv_ah_attr a{};
        a.dlid = static_cast<uint16_t>(r.chance(50) ? lid : r.next());
        a.sl = static_cast<uint8_t>(r.below(20));
        a.src_path_bits = static_cast<uint8_t>(r.below(130));
        a.static_rate = static_cast<uint8_t>(r.below(30));
        a.port_num = static_cast<uint8_t>(r.chance(70) ? 1 : r.below(256));
        a.is_global = static_cast<uint8_t>(r.below(2));
        a.grh.sgid_index = static_cast<uint8_t>(r.chance(70) ? 0 : r.below(256));
        a.grh.hop_limit = static_cast<uint8_t>(r.next());
        a.grh.flow_label = static_cast<uint32_t>(r.next());
        for (auto& b : a.grh.dgid.raw) b = static_cast<uint8_t>(r.chance(80) ? 0 : r.next());
        ibv_ah* ah = ibv_create_ah(pd, &a);
        if (!made_or_refused(ah, "ibv_create_ah", {EINVAL, ENOMEM, EOPNOTSUPP, ENETUNREACH})) break;
        EXPECT_EQ(ibv_destroy_ah(ah), 0);
        break;
      }
      default: {  // ibv_resize_cq to any size
        int rc =
            ibv_resize_cq(cq, static_cast<int>(r.chance(60) ? r.below(5000) : r.edgy(1u << 22)));
        if (rc) {
          EXPECT_TRUE(errno_in("ibv_resize_cq", rc, {EINVAL, ENOMEM, EOPNOTSUPP}));
        }
        break;
      }
    }
    if (HasFailure()) break;
  }
  std::printf("%llu objects made, %llu refused\n", (unsigned long long)made,
              (unsigned long long)refused);
  EXPECT_GT(made, 0u);
  EXPECT_GT(refused, 0u);
}

namespace {

// The one-byte attributes with a range, and the first value past it.
struct Bad8 {
  uint8_t ibv_qp_attr::*field;
  uint8_t first_bad;
};
const Bad8 kBad8[] = {{&ibv_qp_attr::max_rd_atomic, 17}, {&ibv_qp_attr::max_dest_rd_atomic, 17},
                      {&ibv_qp_attr::timeout, 32},       {&ibv_qp_attr::retry_cnt, 8},
                      {&ibv_qp_attr::rnr_retry, 8},      {&ibv_qp_attr::min_rnr_timer, 32}};

// Every attribute ibv_modify_qp takes, valid for a QP of this program; then, one time in three,
// one of them made wrong (an edge or garbage).
ibv_qp_attr any_qp_attr(fuzz::Rng& r, uint16_t lid, uint32_t peer) {
  ibv_qp_attr a = vt::rtr_attr(lid, peer, 0, 1);
  a.qkey = static_cast<uint32_t>(r.next()) & 0x7fffffff;
  a.rq_psn = static_cast<uint32_t>(r.next()) & 0xffffff;
  a.sq_psn = static_cast<uint32_t>(r.next()) & 0xffffff;
  a.qp_access_flags = r.below(16);
  a.port_num = 1;
  for (const Bad8& b : kBad8) a.*b.field = static_cast<uint8_t>(r.below(b.first_bad));
  if (!r.chance(33)) return a;
  uint8_t junk = static_cast<uint8_t>(r.next());
  switch (r.below(8)) {
    case 0:
      a.path_mtu = static_cast<ibv_mtu>(r.chance(50) ? 0 : 6 + junk);
      break;
    case 1:
      a.port_num = junk == 1 ? 0 : junk;
      break;
    case 2:
      a.ah_attr.port_num = junk == 1 ? 0 : junk;
      break;
    case 3:
      a.pkey_index = static_cast<uint16_t>(1 + r.below(0xffff));
      break;
    case 4:
      a.qp_access_flags = static_cast<unsigned>(r.next()) | 0x10000;
      break;
    case 5: {  // one of the small counters and timers past its range
      const Bad8 b = r.pick(kBad8);
      a.*b.field = static_cast<uint8_t>(b.first_bad + r.below(256u - b.first_bad));
      break;
    }
    case 6:
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.sgid_index = junk;
      break;
    default:
      a.dest_qp_num = static_cast<uint32_t>(r.next()) | 0x1000000;
      break;
  }
  return a;
}

// The attributes a transition of this QP type takes (IBV_QP_STATE included), else 0.
int transition_mask(ibv_qp_type t, ibv_qp_state from, ibv_qp_state to) {
  bool ud = t == IBV_QPT_UD, rc = t == IBV_QPT_RC;
  int port = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return IBV_QP_STATE;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
    return port | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    if (ud) return IBV_QP_STATE;
    int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    return rc ? m | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : m;
  }
  if (from == IBV_QPS_RTR && to == IBV_QPS_RTS)
    return IBV_QP_STATE | IBV_QP_SQ_PSN |
           (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC
               : 0);
  if ((from == IBV_QPS_RTS && to == IBV_QPS_SQD) || (from == IBV_QPS_SQD && to == IBV_QPS_RTS))
    return IBV_QP_STATE;
  return 0;
}

}  // namespace

// A QP of each type walked through random transitions: mostly the transition its state allows
// next, with its attributes (one of them sometimes wrong, or a bit of the mask flipped), else any
// target state and any mask. A refused modify leaves the state as it was; a successful one with
// IBV_QP_STATE reaches that state; over the run every state a QP can be in is reached.
TEST_F(Objects, ModifyQpOverRandomMasksInEveryState) {
  fuzz::Rng r(fuzz::seed() + 1);
  const ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
  const ibv_qp_state next[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,  IBV_QPS_SQD,
                               IBV_QPS_RTS,  IBV_QPS_ERR, IBV_QPS_RESET};
  uint64_t ok = 0, refused = 0;
  bool seen[8] = {};
  for (uint64_t round = 0, n = fuzz::iters(100000) / 50; round < n && !HasFailure(); ++round) {
    ibv_qp_type type = r.pick(types);
    ibv_qp* qp = vt::create_qp_of(pd, type, cq, cq);
    ASSERT_NE(qp, nullptr);
    for (int step = 0; step < 50; ++step) {
      ibv_qp_attr a = any_qp_attr(r, lid, qp->qp_num);
      ibv_qp_state before = vt::qp_state(qp);
      a.qp_state = r.chance(80) ? next[before] : static_cast<ibv_qp_state>(r.below(8));
      if (r.chance(10)) a.qp_state = r.chance(50) ? IBV_QPS_ERR : IBV_QPS_RESET;
      int mask = transition_mask(type, before, a.qp_state);
      if (!mask || r.chance(10)) mask = static_cast<int>(r.next() & 0x3fffff);
      if (r.chance(15)) mask ^= 1 << r.below(22);
      a.cur_qp_state = r.chance(80) ? before : static_cast<ibv_qp_state>(r.below(8));
      int rc = ibv_modify_qp(qp, &a, mask);
      ibv_qp_state after = vt::qp_state(qp);
      seen[after] = true;
      if (rc) {
        ++refused;
        EXPECT_TRUE(errno_in("ibv_modify_qp", rc, {EINVAL, ENOMEM, EOPNOTSUPP}));
        EXPECT_EQ(after, before) << "a refused modify changed the state";
      } else {
        ++ok;
        if (mask & IBV_QP_STATE) {
          EXPECT_EQ(after, a.qp_state);
        }
      }
    }
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
  }
  std::printf("%llu modifies succeeded, %llu refused\n", (unsigned long long)ok,
              (unsigned long long)refused);
  for (ibv_qp_state s :
       {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR}) {
    EXPECT_TRUE(seen[s]) << "state " << s << " never reached: the generator is too blind";
  }
}

// Found by CreateVerbsOverRandomAttributes (lengths beyond the buffer were registered): an MR that
// is not on-demand over pages that are not mapped is EFAULT, as the kernel's pinning answers,
// not an MR whose first WR faults inside the engine (which copies its own process's memory
// directly). An on-demand MR may cover them.
TEST_F(Objects, RegMrOverUnmappedPagesIsEfault) {
  const size_t page = 4096;
  void* p = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  char* hole = static_cast<char*>(p) + page;
  ASSERT_EQ(munmap(hole, page), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, p, 3 * page, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, hole + 100, 10, 0), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* below = ibv_reg_mr(pd, p, page, IBV_ACCESS_LOCAL_WRITE);  // the mapped page is fine
  EXPECT_NE(below, nullptr);
  ibv_mr* odp = ibv_reg_mr(pd, p, 3 * page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  EXPECT_NE(odp, nullptr);
  ibv_mr* rereg = ibv_reg_mr(pd, p, page, 0);
  ASSERT_NE(rereg, nullptr);
  EXPECT_NE(ibv_rereg_mr(rereg, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, hole, page, 0), 0);
  EXPECT_EQ(errno, EFAULT);
  for (ibv_mr* m : {below, odp, rereg}) {
    if (m) {
      EXPECT_EQ(ibv_dereg_mr(m), 0);
    }
  }
  munmap(p, page);
  munmap(hole + page, page);
}
