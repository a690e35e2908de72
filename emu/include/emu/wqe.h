// SPDX-License-Identifier: BSD-2-Clause
// Wire-visible layouts of the queues the driver and the device share: send WQE segments, receive
// segments and CQE64. Offsets follow the public infiniband/mlx5dv.h (checked by a unit test against
// that header); the device model itself stays free of verbs types. Multi-byte fields are
// big-endian.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace emu {

inline uint32_t be32(uint32_t v) { return __builtin_bswap32(v); }
inline uint64_t be64(uint64_t v) { return __builtin_bswap64(v); }
inline uint16_t be16(uint16_t v) { return __builtin_bswap16(v); }

constexpr uint32_t kSendWqeBB = 64;  // send basic block
constexpr uint32_t kMaxWqeBBs = 16;  // one WQE spans at most this many blocks (1 KiB)
constexpr uint32_t kInlineSegFlag = 0x80000000u;
constexpr uint32_t kInvalidLkey = 0x100;  // terminates a receive scatter list

enum WqeOpcode : uint8_t {
  kOpNop = 0x00,
  kOpRdmaWrite = 0x08,
  kOpRdmaWriteImm = 0x09,
  kOpSend = 0x0a,
  kOpSendImm = 0x0b,
  kOpRdmaRead = 0x10,
  kOpAtomicCs = 0x11,
  kOpAtomicFa = 0x12,
  // Memory windows (mlx5's numbers where it has them): SEND that invalidates an R_Key at the
  // responder (the key in the control segment's immediate), a bind, a local invalidate.
  kOpSendInval = 0x01,
  kOpBindMw = 0x18,
  kOpLocalInv = 0x1b,
  // RDMA ATOMIC WRITE (IBTA 1.5): 8 bytes placed at once; the value rides in an AtomicSeg's first
  // field, as the bytes to write.
  kOpAtomicWrite = 0x1d,
};

enum CtrlFlags : uint8_t {
  kCtrlSolicited = 1 << 1,
  kCtrlCqUpdate = 2 << 2,  // signaled
  kCtrlFence = 4 << 5,
};

struct CtrlSeg {
  uint32_t opmod_idx_opcode;  // be: wqe index << 8 | opcode
  uint32_t qpn_ds;            // be: qpn << 8 | size in 16-byte units
  uint8_t signature;
  uint8_t rsvd[2];
  uint8_t fm_ce_se;
  uint32_t imm;  // be
};
static_assert(sizeof(CtrlSeg) == 16);
static_assert(offsetof(CtrlSeg, fm_ce_se) == 11);

// The control segment's fields, the one place their bit positions are spelled out. The WQE index
// is the 16-bit producer position the driver posted the WQE at (the device checks it on fetch).
inline uint8_t ctrl_opcode(const CtrlSeg& c) { return be32(c.opmod_idx_opcode) & 0xff; }
inline uint16_t ctrl_wqe_index(const CtrlSeg& c) {
  return static_cast<uint16_t>(be32(c.opmod_idx_opcode) >> 8);
}
inline uint32_t ctrl_qpn(const CtrlSeg& c) { return be32(c.qpn_ds) >> 8; }
inline uint32_t ctrl_ds(const CtrlSeg& c) { return be32(c.qpn_ds) & 0x3f; }  // 16-byte units
inline uint32_t ctrl_size(const CtrlSeg& c) { return ctrl_ds(c) * 16; }      // bytes
inline bool ctrl_signaled(const CtrlSeg& c) { return (c.fm_ce_se & kCtrlCqUpdate) != 0; }
inline bool ctrl_solicited(const CtrlSeg& c) { return (c.fm_ce_se & kCtrlSolicited) != 0; }
inline bool ctrl_fenced(const CtrlSeg& c) { return (c.fm_ce_se & kCtrlFence) != 0; }
inline void ctrl_set_index_opcode(CtrlSeg& c, uint32_t wqe_index, uint8_t opcode) {
  c.opmod_idx_opcode = be32((wqe_index & 0xffff) << 8 | opcode);
}
inline void ctrl_set_qpn_ds(CtrlSeg& c, uint32_t qpn, uint32_t ds) {
  c.qpn_ds = be32(qpn << 8 | ds);
}

struct RaddrSeg {
  uint64_t raddr;  // be
  uint32_t rkey;   // be
  uint32_t rsvd;
};
static_assert(sizeof(RaddrSeg) == 16);

struct AtomicSeg {
  uint64_t swap_add;  // be
  uint64_t compare;   // be
};
static_assert(sizeof(AtomicSeg) == 16);

// A memory-window bind (kOpBindMw), right after the control segment: the window named by its key,
// the key it takes, and the range and rights inside the MR named by mr_lkey.
struct BindSeg {
  uint32_t mw_key;   // be: the window's key now
  uint32_t new_key;  // be: its key once bound (same index)
  uint32_t mr_lkey;  // be: 0 with length 0 (a type 1 unbind)
  uint32_t access;   // be: ibv_access_flags of the window
  uint64_t addr;     // be: in the MR's address terms
  uint64_t length;   // be
};
static_assert(sizeof(BindSeg) == 32);

struct DataSeg {
  uint32_t byte_count;  // be
  uint32_t lkey;        // be
  uint64_t addr;        // be
};
static_assert(sizeof(DataSeg) == 16);

// A UD send's address vector, right after the control segment (mlx5_wqe_datagram_seg).
struct AvSeg {
  uint32_t qkey;  // be; the high bit set means "use the QP's own Q_Key"
  uint32_t rsvd0;
  uint32_t dqp;          // be: destination QPN (low 24 bits)
  uint8_t stat_rate_sl;  // service level in the low 4 bits
  uint8_t fl_mlid;       // source path bits
  uint16_t rlid;         // be
  uint8_t rsvd1[4];
  uint8_t rmac[6];
  uint8_t tclass;
  uint8_t hop_limit;
  uint32_t grh_gid_fl;  // be: kAvGrh | sgid_index << 20 | flow label
  uint8_t rgid[16];
};
static_assert(sizeof(AvSeg) == 48);
static_assert(offsetof(AvSeg, rlid) == 14);
static_assert(offsetof(AvSeg, grh_gid_fl) == 28);
constexpr uint32_t kAvGrh = 1u << 30;
// In `dqp`: the full 48 bytes follow the control segment. Without it the address vector is
// compact, its first 16 bytes only (Q_Key or DC key, dqp, SL, path bits, LID: no GRH), as a
// ConnectX reads it; the AV mlx5dv_init_obj gives out leaves the bit clear, which tells code such
// as UCX that the device takes compact ones.
constexpr uint32_t kAvExtended = 0x80000000u;
constexpr size_t kAvCompactSize = 16;
static_assert(offsetof(AvSeg, rsvd1) == kAvCompactSize);  // key, dqp, SL, path bits, LID
constexpr uint32_t kQkeyUseQp = 0x80000000u;

// An XRC send's target SRQ, right after the control segment (mlx5_wqe_xrc_seg).
struct XrcSeg {
  uint32_t xrc_srqn;  // be
  uint8_t rsvd[12];
};
static_assert(sizeof(XrcSeg) == 16);

// The 40-byte global route header a UD receive buffer starts with (IBTA 8.3).
struct Grh {
  uint32_t version_tclass_flow;  // be: 6 << 28 | tclass << 20 | flow label
  uint16_t paylen;               // be
  uint8_t next_hdr;              // 0x1b: BTH follows
  uint8_t hop_limit;
  uint8_t sgid[16];
  uint8_t dgid[16];
};
static_assert(sizeof(Grh) == 40);
constexpr uint32_t kGrhBytes = sizeof(Grh);

// The first 16 bytes of a shared receive queue WQE (mlx5_wqe_srq_next_seg).
struct SrqNextSeg {
  uint8_t rsvd0[2];
  uint16_t next_wqe_index;  // be
  uint8_t signature;
  uint8_t rsvd1[11];
};
static_assert(sizeof(SrqNextSeg) == 16);

struct InlineSeg {
  uint32_t byte_count;  // be, with kInlineSegFlag
};
static_assert(sizeof(InlineSeg) == 4);

enum CqeOpcode : uint8_t {
  kCqeReq = 0,
  kCqeRespWrImm = 1,
  kCqeRespSend = 2,
  kCqeRespSendImm = 3,
  kCqeNoPacket = 6,  // a completion of no message: a tag list operation
  kCqeReqErr = 13,
  kCqeRespErr = 14,
  kCqeInvalid = 15,
};

// Error syndromes, mlx5's numbering.
enum CqeSyndrome : uint8_t {
  kSynLocalLength = 0x01,
  kSynLocalQpOp = 0x02,
  kSynLocalProt = 0x04,
  kSynWrFlush = 0x05,
  kSynMwBind = 0x06,
  kSynBadResp = 0x10,
  kSynLocalAccess = 0x11,
  kSynRemoteInvalReq = 0x12,
  kSynRemoteAccess = 0x13,
  kSynRemoteOp = 0x14,
  kSynRetryExc = 0x15,
  kSynRnrRetryExc = 0x16,
};

// CQE flags kept in the application-info bytes (40..43, unused by verbs QPs) so the driver can
// report wc_flags without a per-WQE table of its own.
enum CqeEmuFlags : uint8_t {
  kCqeFlagImm = 1 << 0,
  kCqeFlagSolicited = 1 << 1,
  kCqeFlagInv = 1 << 2,  // a SEND with invalidate: the immediate field holds the invalidated key
  kCqeFlagTm = 1 << 3,   // a tag matching CQE (mlx5: app = tag matching): app_op says which,
                         // srqn_uidx names the TM SRQ, wqe_counter its WQE or tag index
  kCqeFlagTmSyncReq = 1 << 4,  // the device's phase count differs from software's
  kCqeFlagTmFail = 1 << 5,     // a DEL found the tag already consumed (IBV_WC_TM_ERR)
  // A receive whose payload waits in the CQ's staging area (emu/staging.h), bytes 0..15 of the
  // CQE naming its slots (a StagedRef): the poll copies it into the WQE's buffers and frees them.
  kCqeFlagStaged = 1 << 6,
  // A receive that could have been staged had the CQ an area: its owner's poll makes one.
  kCqeFlagWantStaging = 1 << 7,
};

// app_op of a tag matching CQE, mlx5's numbering (MLX5_CQE_APP_OP_TM_*).
enum CqeTmOp : uint8_t {
  kTmOpConsumed = 0x1,     // a rendezvous matched: the read follows (IBV_WC_TM_MATCH)
  kTmOpExpected = 0x2,     // the rendezvous data is in the tagged buffer (IBV_WC_TM_DATA_VALID)
  kTmOpUnexpected = 0x3,   // no tag matched: the message is in an SRQ receive, header included
  kTmOpNoTag = 0x4,        // a NO_TAG message in an SRQ receive
  kTmOpAppend = 0x5,       // IBV_WR_TAG_ADD
  kTmOpRemove = 0x6,       // IBV_WR_TAG_DEL
  kTmOpNoop = 0x7,         // IBV_WR_TAG_SYNC
  kTmOpConsumedMsg = 0xA,  // an eager message matched: its payload is in the tagged buffer
};
// The tag matching header a message to a TM SRQ starts with (infiniband/tm_types.h: ibv_tmh),
// and the rendezvous header after it (ibv_rvh). Big-endian fields.
enum TmhOpcode : uint8_t { kTmhNoTag = 0, kTmhRndv = 1, kTmhFin = 2, kTmhEager = 3 };
struct TmHeader {
  uint8_t opcode;  // TmhOpcode
  uint8_t rsvd[3];
  uint32_t app_ctx;
  uint64_t tag;
};
static_assert(sizeof(TmHeader) == 16);
struct RndvHeader {
  uint64_t va;
  uint32_t rkey;
  uint32_t len;
};
static_assert(sizeof(RndvHeader) == 16);

// A tag matching CQE carries the message's header fields in bytes 0..11 (mlx5: cqe64->tmh).
struct CqeTmInfo {
  uint64_t tag;      // be
  uint32_t app_ctx;  // be
};

// op_own bit of a responder CQE whose payload (at most 32 bytes) is in bytes 0..31 of the CQE
// itself, as mlx5's scatter-to-CQE does: the receiver's poll copies it into the posted buffers.
// The fields in those bytes (slid, flags_rqpn) are then not there: a connected QP knows its peer.
constexpr uint8_t kCqeInlineScatter32 = 0x04;
constexpr uint32_t kCqeInlineMax = 32;
// flags_rqpn of a responder CQE: source QPN in the low 24 bits, the service level above it, and
// whether a GRH came (as mlx5 reports them).
constexpr uint32_t kCqeRqpnGrh = 1u << 28;

struct Cqe64 {
  uint8_t rsvd0[17];  // bytes 0..31: the payload of an inline-scatter CQE
  uint8_t ml_path;
  uint8_t rsvd20[4];
  uint16_t slid;        // be
  uint32_t flags_rqpn;  // be
  uint8_t rsvd28[4];
  uint32_t srqn_uidx;       // be
  uint32_t imm_inval_pkey;  // be (immediate data as sent)
  uint8_t emu_flags;        // CqeEmuFlags (mlx5: app)
  uint8_t app_op;
  uint16_t qp_gen;        // the QP's incarnation (bumped by every reset), low 16 bits: stale CQEs
                          // are dropped (mlx5: app_info)
  uint32_t byte_cnt;      // be
  uint64_t timestamp;     // be
  uint32_t sop_drop_qpn;  // be: WQE opcode (requester) << 24 | qpn
  uint16_t wqe_counter;   // be
  uint8_t signature;
  uint8_t op_own;  // opcode << 4 | owner
};
static_assert(sizeof(Cqe64) == 64);
static_assert(offsetof(Cqe64, slid) == 22);
static_assert(offsetof(Cqe64, emu_flags) == 40);
static_assert(offsetof(Cqe64, byte_cnt) == 44);
static_assert(offsetof(Cqe64, sop_drop_qpn) == 56);
static_assert(offsetof(Cqe64, op_own) == 63);

// Entry idx's CQE in a ring of 1 << log_cnt entries of 1 << log_entry bytes (64 or 128: then the
// CQE is the entry's second half, as mlx5 places a 64-byte CQE in a 128-byte entry).
template <typename Byte>
inline auto& cq_entry(Byte* ring, uint32_t idx, uint32_t log_cnt, uint32_t log_entry) {
  static_assert(sizeof(Byte) == 1);
  auto* at = ring + (size_t(idx & ((1u << log_cnt) - 1)) << log_entry) + ((1u << log_entry) - 64);
  if constexpr (std::is_const_v<Byte>)
    return *reinterpret_cast<const Cqe64*>(at);
  else
    return *reinterpret_cast<Cqe64*>(at);
}

// op_own: the CQE's opcode in the high nibble and the owner bit in bit 0. The device writes a
// CQE of lap L of the ring (producer index >> log2(count)) with owner bit L & 1, so a poller at
// consumer index ci knows a CQE is new when its owner bit is the parity of ci's lap.
inline uint8_t cqe_opcode_of(uint8_t op_own) { return op_own >> 4; }
inline bool cqe_is_new(uint8_t op_own, uint32_t ci, uint32_t log_cqe_cnt) {
  return cqe_opcode_of(op_own) != kCqeInvalid && (op_own & 1) == ((ci >> log_cqe_cnt) & 1);
}

// sop_drop_qpn (the same word as ErrCqe::s_wqe_opcode_qpn): the QP the CQE is for, and for a
// requester's CQE the opcode of the WQE it completes.
inline uint32_t cqe_qpn(const Cqe64& c) { return be32(c.sop_drop_qpn) & 0xffffff; }
inline uint8_t cqe_wqe_opcode(const Cqe64& c) { return be32(c.sop_drop_qpn) >> 24; }
inline void cqe_set_opcode_qpn(Cqe64& c, uint8_t wqe_opcode, uint32_t qpn) {
  c.sop_drop_qpn = be32(uint32_t(wqe_opcode) << 24 | (qpn & 0xffffff));
}

// The error view of the same 64 bytes.
struct ErrCqe {
  uint8_t rsvd0[32];
  uint32_t srqn;
  uint8_t rsvd1[18];
  uint8_t vendor_err_synd;
  uint8_t syndrome;
  uint32_t s_wqe_opcode_qpn;  // be
  uint16_t wqe_counter;       // be
  uint8_t signature;
  uint8_t op_own;
};
static_assert(sizeof(ErrCqe) == 64);
static_assert(offsetof(ErrCqe, syndrome) == 55);

}  // namespace emu
