// SPDX-License-Identifier: BSD-2-Clause
#include "rig.h"

#include <cstddef>
#include <cstring>

#include "emu/wqe.h"

namespace race {

using emu::sched::point;

namespace {
constexpr uint32_t kBlock = emu::kSendWqeBB;
}  // namespace

uint32_t RawQp::load_pi() {
  point(emu::sched::kPointIndexLoad, reinterpret_cast<uintptr_t>(&pi), pi);
  return pi;
}

void RawQp::store_pi(uint32_t v) {
  point(emu::sched::kPointIndexStore, reinterpret_cast<uintptr_t>(&pi), v);
  pi = v;
}

uint32_t RawQp::write_wqe(uint32_t pos, uint8_t fill, uint32_t len, uint64_t raddr, uint32_t rkey,
                          uint64_t* head) {
  alignas(64) uint8_t stage[emu::kMaxWqeBBs * kBlock] = {};
  emu::RaddrSeg r{emu::be64(raddr), emu::be32(rkey), 0};
  uint32_t at = sizeof(emu::CtrlSeg);
  std::memcpy(stage + at, &r, sizeof r);
  at += sizeof r;
  uint32_t hdr = emu::be32(len | emu::kInlineSegFlag);
  std::memcpy(stage + at, &hdr, sizeof hdr);
  std::memset(stage + at + sizeof hdr, fill, len);
  at += (sizeof hdr + len + 15) & ~15u;
  emu::CtrlSeg c{};
  emu::ctrl_set_index_opcode(c, pos, emu::kOpRdmaWrite);
  emu::ctrl_set_qpn_ds(c, q.qpn, at / 16);
  c.fm_ce_se = emu::kCtrlCqUpdate;
  std::memcpy(stage, &c, sizeof c);
  std::memcpy(head, stage, sizeof *head);
  uint32_t bbs = (at + kBlock - 1) / kBlock;
  uctlite::emudv_fns()->sq_write(&q, pos, stage, bbs);
  return bbs;
}

uint32_t RawQp::blocks_for(uint32_t len) {
  uint32_t bytes = sizeof(emu::CtrlSeg) + sizeof(emu::RaddrSeg) + ((4 + len + 15) & ~15u);
  return (bytes + kBlock - 1) / kBlock;
}

void RawQp::store_dbrec(uint32_t producer) { uctlite::emudv_fns()->sq_dbrec(&q, producer); }

void RawQp::ring_db64(uint64_t head) { uctlite::emudv_fns()->db_write64(&reg->uar, head); }

void RawQp::bf_copy(uint32_t pos, uint32_t bbs) {
  point(emu::sched::kPointLoad, reinterpret_cast<uintptr_t>(&reg->bf_offset), reg->bf_offset);
  uint32_t off = reg->bf_offset;
  auto* ring = static_cast<const uint8_t*>(q.sq_buf) + (pos & (q.sq_wqe_cnt - 1)) * kBlock;
  uctlite::emudv_fns()->bf_copy(&reg->uar, static_cast<uint8_t*>(reg->uar.bf) + off, ring, bbs);
  point(emu::sched::kPointStore, reinterpret_cast<uintptr_t>(&reg->bf_offset), off);
  reg->bf_offset = off ^ reg->uar.bf_size;
}

void RawQp::flush() { uctlite::emudv_fns()->mmio_flush(); }

bool RawQp::poll_one(uint32_t* wqe_index) {
  point(kPointCqIndexLoad, reinterpret_cast<uintptr_t>(&ci), ci);
  uint32_t at = ci;
  const auto* p = static_cast<const uint8_t*>(cq.buf) + (at & (cq.cqe_cnt - 1)) * cq.cqe_size;
  point(emu::sched::kPointPoll, reinterpret_cast<uintptr_t>(p), at);
  uint8_t op_own = __atomic_load_n(p + offsetof(emu::Cqe64, op_own), __ATOMIC_ACQUIRE);
  if ((op_own >> 4) == emu::kCqeInvalid || (op_own & 1) != ((at / cq.cqe_cnt) & 1)) return false;
  emu::Cqe64 cqe;
  std::memcpy(&cqe, p, sizeof cqe);
  *wqe_index = emu::be16(cqe.wqe_counter);
  point(kPointCqIndexStore, reinterpret_cast<uintptr_t>(&ci), at + 1);
  ci = at + 1;
  __atomic_store_n(cq.dbrec, ci, __ATOMIC_RELEASE);
  return true;
}

void Ledger::complete(uint32_t qp, uint64_t key) {
  for (Entry& e : posted)
    if (e.qp == qp && e.key == key) {
      ++e.completions;
      return;
    }
  ++unmatched;
}

std::string Ledger::check() const {
  if (unmatched) return "completion:unmatched";
  for (const Entry& e : posted)
    if (e.completions > 1) return "completion:twice";
  for (const Entry& e : posted)
    if (e.completions == 0) return "completion:lost";
  return "";
}

bool Rig::open(std::string* err) {
  stress::FabricConfig fc;
  fc.device = "emu0";
  fc.qps = kRigQps;
  fc.sq_depth = kSlotsPerQp;
  fc.max_inline = kSlotBytes;
  fc.target_bytes = size_t{kRigQps} * kSlotsPerQp * kSlotBytes;
  bool td_missing = false;
  if (!fabric_.setup(fc, err, &td_missing)) return false;
  if (!uctlite::emudv_fns()) {
    *err = "emudv_* not found: run under emu-run";
    return false;
  }
  for (uint32_t i = 0; i < kRigQps; ++i) {
    RawQp& r = raw_[i];
    const stress::QpPair& p = fabric_.pairs()[i];
    if (uctlite::emudv_fns()->init_qp(p.initiator, &r.q) ||
        uctlite::emudv_fns()->init_cq(p.initiator_cq, &r.cq)) {
      *err = "emudv_init_qp/cq failed";
      return false;
    }
    for (auto& reg : regs_)
      if (reg->uar.opaque == r.q.uar.opaque) r.reg = reg.get();
    if (!r.reg) {
      regs_.push_back(std::make_unique<RawReg>());
      regs_.back()->uar = r.q.uar;
      r.reg = regs_.back().get();
    }
  }
  return true;
}

bool Rig::reset(const std::vector<uint32_t>& pairs, std::string* err) {
  device_ = nullptr;  // the previous run's queue goes with it
  for (uint32_t i : pairs) {
    RawQp& r = raw_[i];
    r.ci = *r.cq.dbrec;
    uint32_t ignored;
    while (r.poll_one(&ignored)) {
    }
    if (!fabric_.reconnect(i, err)) return false;
    std::memset(r.q.sq_buf, 0, size_t{r.q.sq_wqe_cnt} * r.q.sq_stride);
    r.q.dbrec[1] = 0;
    r.pi = 0;
    r.reg->bf_offset = 0;
    std::memset(fabric_.target() + i * kSlotsPerQp * kSlotBytes, 0, kSlotsPerQp * kSlotBytes);
  }
  races_ = std::make_unique<stress::RaceCollector>(uctlite::emudv_fns(), 8);
  races_->start();
  device_ = std::make_unique<emu::sched::DeviceActor>();
  return true;
}

std::unique_ptr<uctlite::Worker> Rig::worker(const uctlite::WorkerConfig& wc,
                                             const std::vector<uint32_t>& pairs,
                                             std::vector<uctlite::Ep*>* eps, std::string* err) {
  auto w = uctlite::Worker::create(fabric_.initiator_ctx(), wc, err);
  if (!w) return nullptr;
  eps->clear();
  for (uint32_t i : pairs) {
    const stress::QpPair& p = fabric_.pairs()[i];
    uctlite::Ep* ep = w->add_ep(p.initiator, p.initiator_cq, err);
    if (!ep) return nullptr;
    eps->push_back(ep);
  }
  return w;
}

uint64_t Rig::slot_addr(uint32_t qp, uint32_t k) const {
  return reinterpret_cast<uintptr_t>(fabric_.target() + (qp * kSlotsPerQp + k) * kSlotBytes);
}

std::string Rig::race_signature() {
  races_->collect();
  for (uint32_t k = 0; k < EMUDV_RACE_KINDS; ++k)
    if (races_->count(k)) return std::string("race:") + stress::race_kind_name(k);
  return "";
}

std::string Rig::payload_signature(uint32_t qp, uint32_t k, uint8_t fill, uint32_t len) const {
  const uint8_t* p = fabric_.target() + (qp * kSlotsPerQp + k) * kSlotBytes;
  for (uint32_t i = 0; i < len; ++i)
    if (p[i] != fill) return "payload";
  return "";
}

std::vector<std::string> Rig::race_lines() const {
  std::vector<std::string> out;
  for (const emudv_race& e : races_->first()) {
    char line[256];
    snprintf(line, sizeof line,
             "device race %s: qpn 0x%x register %d slot %u writers %u,%u values 0x%x,0x%x; the "
             "device %s",
             e.kind_name ? e.kind_name : "?", e.qpn, e.reg, e.slot, e.writer_tids[0],
             e.writer_tids[1], e.values[0], e.values[1], e.executed ? e.executed : "?");
    out.push_back(line);
  }
  return out;
}

}  // namespace race
