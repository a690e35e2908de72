// SPDX-License-Identifier: BSD-2-Clause
// Helpers for the verbs-level tests: a normal libibverbs program that finds the emulated device
// emu0 (the provider is LD_PRELOADed by the test driver) and builds RC QPs on it.
#pragma once
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

namespace vt {

// Bound on every wait for a completion. A deadline against hangs, not a timing assertion.
constexpr std::chrono::seconds kDeadline{10};

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Opens the device named "emu0"; nullptr (with a gtest failure) if it is not listed.
ibv_context* open_emu0();

// LID of port 1, from ibv_query_port.
uint16_t port_lid(ibv_context* ctx);

struct QpCaps {
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_send_sge = 4;
  uint32_t max_recv_sge = 4;
  uint32_t max_inline_data = 0;
  int sq_sig_all = 0;
};

// ibv_create_qp of an RC QP; on success *out_cap (if given) is the capacity the device reported.
ibv_qp* create_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq, const QpCaps& caps = {},
                     ibv_qp_cap* out_cap = nullptr);

// Connection parameters of one side.
struct ConnParams {
  int access = kAllAccess;
  uint8_t min_rnr_timer = 1;  // 0.01 ms: RNR retries come quickly
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
};

// ibv_create_qp of any type (RC, UC, UD), on `srq` if given (its receive capacities are then
// ignored); on success *out_cap (if given) is the capacity the device reported.
ibv_qp* create_qp_of(ibv_pd* pd, ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq,
                     const QpCaps& caps = {}, ibv_srq* srq = nullptr,
                     ibv_qp_cap* out_cap = nullptr);

// ibv_create_qp_ex of a QP of `type` on pd (a PD or a parent domain), one CQ for both queues, with
// the ibv_wr_* operations `send_ops`.
ibv_qp* create_qp_ex(ibv_context* ctx, ibv_pd* pd, ibv_qp_type type, ibv_cq* cq, const QpCaps& caps,
                     uint64_t send_ops);

// UD: RESET -> INIT (port 1, Q_Key) -> RTR -> RTS (send PSN sq_psn).
int ud_to_rts(ibv_qp* qp, uint32_t qkey, uint32_t sq_psn = 0);

// UC: RESET -> INIT -> RTR -> RTS with only the attributes a UC QP takes (no timeouts, retries,
// RNR timer or RDMA-read depths).
int connect_uc(ibv_qp* qp, uint16_t dlid, uint32_t dest_qpn, uint32_t my_psn, uint32_t peer_psn,
               int access = kAllAccess);

// The next async event of ctx (its async fd is made non-blocking and poll()ed), or false if none
// came before the deadline. The caller acks it.
bool get_async_event(ibv_context* ctx, ibv_async_event* ev,
                     std::chrono::milliseconds deadline = kDeadline);
// Whether an async event can be read right now (a poll() that does not wait).
bool async_event_pending(ibv_context* ctx);
// The next async event (by the deadline) is of type `want`, and it is then the last one: none
// other is pending. *out gets it, acked (its element is still the object's pointer).
::testing::AssertionResult only_async_event(ibv_context* ctx, ibv_event_type want,
                                            ibv_async_event* out);

// The attributes of the three transitions (the rest zero), for tests that vary them: INIT on
// `port`; RTR towards (dlid, dest_qpn) on port 1, path MTU 1024, one RDMA-read depth; RTS with one
// RDMA-read depth.
ibv_qp_attr init_attr(int access, uint8_t port = 1);
ibv_qp_attr rtr_attr(uint16_t dlid, uint32_t dest_qpn, uint32_t rq_psn, uint8_t min_rnr_timer);
ibv_qp_attr rts_attr(uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry);

// The three transitions one at a time (each returns ibv_modify_qp's result).
int to_init(ibv_qp* qp, int access, uint8_t port = 1);
int to_rtr(ibv_qp* qp, uint16_t dlid, uint32_t dest_qpn, uint32_t rq_psn, uint8_t min_rnr_timer);
int to_rts(ibv_qp* qp, uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry);

// RESET -> INIT -> RTR -> RTS towards (dlid, dest_qpn). my_psn is this side's send PSN, peer_psn
// the peer's (this side's expected receive PSN).
int connect_qp(ibv_qp* qp, uint16_t dlid, uint32_t dest_qpn, uint32_t my_psn, uint32_t peer_psn,
               const ConnParams& p = {});

ibv_qp_state qp_state(ibv_qp* qp);  // from ibv_query_qp

// Polls until n completions arrived or the deadline passed. Returns what arrived (fewer than n
// means the deadline passed; callers assert the size).
std::vector<ibv_wc> poll_n(ibv_cq* cq, size_t n, std::chrono::milliseconds deadline = kDeadline);

// Polls `tries` times and returns whatever arrived: for asserting that nothing (more) completes
// when no event is pending that could still produce a completion.
std::vector<ibv_wc> drain(ibv_cq* cq, int tries = 200);

// Wait for one completion and check its status and wr_id.
::testing::AssertionResult wait_wc(ibv_cq* cq, ibv_wc_status status, uint64_t wr_id,
                                   ibv_wc* out = nullptr);

// A table at its limit: `made` holds as many objects as the device allows. One more (create()) is
// refused with ENOMEM, and destroying the last makes room for one again (made.back() is the new
// one, or nullptr).
template <typename T, typename Create, typename Destroy>
void expect_full_until_one_goes(std::vector<T*>& made, Create create, Destroy destroy) {
  errno = 0;
  T* extra = create();
  EXPECT_EQ(extra, nullptr);
  EXPECT_EQ(errno, ENOMEM);
  if (extra) made.push_back(extra);
  ASSERT_EQ(destroy(made.back()), 0);
  made.back() = create();
  EXPECT_NE(made.back(), nullptr);
}

// Destroys every object of `made` that is there (nullptr entries are skipped), expecting success.
template <typename T, typename Destroy>
void expect_destroyed(const std::vector<T*>& made, Destroy destroy) {
  for (T* o : made) {
    if (o) {
      EXPECT_EQ(destroy(o), 0);
    }
  }
}

// The output (stdout and stderr) of a shell command, or "FAILED: COMMAND: output" if it did not
// exit with 0 (a tool such as emu-ctl, run in this process's fabric).
std::string run_command(const std::string& command);

// len bytes (rounded up to pages) of a private mapping of a new memfd, or nullptr: private
// memory of a file, which ibv_reg_mr neither finds shared nor moves into its registration file.
uint8_t* map_private_file(size_t len);
// Test payloads: byte i of a pattern is seed + i * step.
void fill_pattern(uint8_t* d, size_t n, uint8_t seed, uint8_t step);
bool has_pattern(const uint8_t* d, size_t n, uint8_t seed, uint8_t step);

// Page-aligned memory registered on pd (filled with `fill`).
struct Buf {
  uint8_t* p = nullptr;
  size_t len = 0;
  ibv_mr* mr = nullptr;
  uint64_t addr() const { return reinterpret_cast<uint64_t>(p); }
  uint32_t lkey() const { return mr->lkey; }
  uint32_t rkey() const { return mr->rkey; }
  ibv_sge sge(size_t off, uint32_t n) const { return {addr() + off, n, mr->lkey}; }
};

// Work requests.
ibv_send_wr send_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sg, int n,
                    unsigned flags = IBV_SEND_SIGNALED);
ibv_send_wr rdma_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sg, int n, uint64_t raddr,
                    uint32_t rkey, unsigned flags = IBV_SEND_SIGNALED);
ibv_send_wr atomic_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sg, uint64_t raddr, uint32_t rkey,
                      uint64_t compare_add, uint64_t swap, unsigned flags = IBV_SEND_SIGNALED);
// A datagram's SEND (or SEND_WITH_IMM) to QP dqpn (Q_Key qkey) through the address handle ah.
ibv_send_wr ud_send_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sg, ibv_ah* ah, uint32_t dqpn,
                       uint32_t qkey, unsigned flags = IBV_SEND_SIGNALED);
// Address handle attributes of a LID on port 1 (no GRH), service level sl.
ibv_ah_attr lid_ah_attr(uint16_t dlid, uint8_t sl = 0);
int post_recv(ibv_qp* qp, uint64_t wr_id, ibv_sge* sg, int n);
int post_srq(ibv_srq* srq, uint64_t wr_id, ibv_sge* sg, int n = 1);  // ibv_post_srq_recv of one WR
int post_one(ibv_qp* qp, ibv_send_wr* wr);  // ibv_post_send of one WR (checks bad_wr on error)

// ibv_wr_* sessions (between ibv_wr_start and ibv_wr_complete or ibv_wr_abort). The next WR's id
// and flags, which are set before its operation is added (the operation takes them).
inline void wr_next(ibv_qp_ex* x, uint64_t wr_id, unsigned flags = IBV_SEND_SIGNALED) {
  x->wr_id = wr_id;
  x->wr_flags = flags;
}
// Adds an RDMA WRITE of `local` to (rkey, raddr) to the open session, as WR wr_id.
void wr_add_write(ibv_qp_ex* x, uint64_t wr_id, uint32_t rkey, uint64_t raddr, const ibv_sge& local,
                  unsigned flags = IBV_SEND_SIGNALED);
// The same with len bytes at src as inline data.
void wr_add_inline_write(ibv_qp_ex* x, uint64_t wr_id, uint32_t rkey, uint64_t raddr, void* src,
                         size_t len, unsigned flags = IBV_SEND_SIGNALED);

// XRC objects (each the ibv_* call's result: nullptr with its errno when refused). A domain on
// the file fd (-1: none) opened with oflags; an XRC SRQ of max_wr one-SGE WQEs on pd and xrcd
// that completes into cq; a TGT QP of xrcd; an INI QP on pd that completes into send_cq, with
// max_send_wr one-SGE WQEs.
ibv_xrcd* open_xrcd(ibv_context* ctx, int fd, int oflags);
ibv_srq* create_xrc_srq(ibv_context* ctx, ibv_pd* pd, ibv_xrcd* xrcd, ibv_cq* cq, uint32_t max_wr);
ibv_qp* create_xrc_tgt(ibv_context* ctx, ibv_xrcd* xrcd);
ibv_qp* create_xrc_ini(ibv_context* ctx, ibv_pd* pd, ibv_cq* send_cq, uint32_t max_send_wr);

// A SEND of `s` from `from` into a receive of `r` posted on `to` (receive wr_id `id`, the send's
// id + 1); waits for the sender's completion on from_cq, then the receiver's on to_cq.
::testing::AssertionResult send_through(ibv_qp* from, ibv_cq* from_cq, ibv_sge s, ibv_qp* to,
                                        ibv_cq* to_cq, ibv_sge r, uint64_t id,
                                        ibv_wc_status send_status = IBV_WC_SUCCESS,
                                        ibv_wc_status recv_status = IBV_WC_SUCCESS);

// One device, one PD and whatever the test makes from them; everything is released in TearDown in
// a safe order (QPs, AHs, SRQs, CQs, channels, MRs, PD, context).
class VerbsTest : public ::testing::Test {
 protected:
  // Opens the device and the PD, then calls SetUpObjects unless that failed.
  void SetUp() final;
  void TearDown() override;
  // What a test class makes on top of the device and PD (its CQs, QPs, buffers).
  virtual void SetUpObjects() {}

  ibv_cq* make_cq(int cqe = 256, ibv_comp_channel* ch = nullptr);
  ibv_qp* make_qp(ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps = {}, ibv_qp_cap* out = nullptr);
  // A QP of any type, optionally on an SRQ (nullptr with a gtest failure if refused).
  ibv_qp* make_qp_of(ibv_qp_type type, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps = {},
                     ibv_srq* srq = nullptr, ibv_qp_cap* out = nullptr);
  // create_qp_ex on this PD; nullptr (errno from ibv_create_qp_ex, no gtest failure) if refused.
  ibv_qp* make_qp_ex(ibv_qp_type type, ibv_cq* cq, const QpCaps& caps, uint64_t send_ops);
  // ibv_create_qp_ex refuses a QP of `type` with send_ops | op, for each op of `ops`, with
  // EOPNOTSUPP.
  void expect_qp_ex_unsupported(ibv_qp_type type, ibv_cq* cq, uint64_t send_ops,
                                std::initializer_list<uint64_t> ops);
  // An SRQ of max_wr WQEs of max_sge SGEs; *out (if given) is what ibv_create_srq reported.
  ibv_srq* make_srq(uint32_t max_wr, uint32_t max_sge = 1, ibv_srq_attr* out = nullptr);
  ibv_ah* make_ah(ibv_ah_attr attr);
  Buf make_buf(size_t len, int access = kAllAccess, uint8_t fill = 0);
  // The same in a private mapping of a file (map_private_file): memory no engine in another
  // process can map, reached with process_vm_* and receive staging whatever EMU_SHARED_MR says.
  Buf make_private_file_buf(size_t len, int access = kAllAccess, uint8_t fill = 0);
  // Registers len bytes at p (a mapping of whole pages, unmapped at TearDown; nullptr: a failure).
  Buf make_buf_in(uint8_t* p, size_t len, int access, uint8_t fill);

  // Two RC QPs of this process connected to each other, each with its own CQ (send and receive).
  struct Pair {
    ibv_qp* a = nullptr;
    ibv_qp* b = nullptr;
    ibv_cq* cqa = nullptr;
    ibv_cq* cqb = nullptr;
  };
  Pair make_pair(const QpCaps& caps = {}, const ConnParams& pa = {}, const ConnParams& pb = {});
  // Two QPs of `type`, not connected, each with its own CQ (gtest failures for what is refused).
  Pair make_qps(ibv_qp_type type, const QpCaps& caps = {});

  // Forget a QP/CQ the test destroyed itself.
  void forget(ibv_qp* qp);
  void forget(ibv_cq* cq);
  void forget(ibv_srq* srq);

  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  uint16_t lid = 0;
  std::vector<ibv_qp*> qps;
  std::vector<ibv_cq*> cqs;
  std::vector<ibv_srq*> srqs;
  std::vector<ibv_ah*> ahs;
  std::vector<ibv_comp_channel*> channels;
  std::vector<Buf> bufs;
};

inline const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// Whether ibv_reg_mr moves a private MR's pages into the registration file (EMU_SHARED_MR, on by
// default).
inline bool moving_on() {
  const char* v = std::getenv("EMU_SHARED_MR");
  return !(v && *v && std::atoi(v) == 0);
}

}  // namespace vt
