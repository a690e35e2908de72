// SPDX-License-Identifier: BSD-2-Clause
// The segment consistency checker (emu/check.h): what every table slot, ring reference and shared
// count must satisfy, checked slot by slot, then every heap block matched to exactly one owner.
#include "emu/check.h"

#include <cstdarg>
#include <cstdio>
#include <map>

#include "audit/problems.h"
#include "emu/staging.h"
#include "shm/shm_heap.h"

namespace emu {

void add_problem_v(std::vector<std::string>* problems, const char* fmt, va_list ap) {
  char buf[256];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  problems->push_back(buf);
}

void add_problem(std::vector<std::string>* problems, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_problem_v(problems, fmt, ap);
  va_end(ap);
}

namespace {

bool pow2(uint64_t v) { return v && !(v & (v - 1)); }
bool in_use(uint32_t state) { return state == kSlotLive || state == kSlotDying; }

// One pass over the header; each check_* adds the heap ranges its objects own to `refs`.
class Checker {
 public:
  Checker(Segment* seg, CheckReport* r) : seg_(seg), h_(seg->hdr()), r_(r) {}

  void run() {
    check_procs();
    check_contexts();
    check_table_chunks();
    for (uint32_t i = 0; i < table_end(h_->pd_dir); ++i)
      check_owned("pd", i, pd_slot(h_, i).state, pd_slot(h_, i).owner);
    check_mrs();
    check_cqs();
    check_srqs();
    check_qps();
    check_xrc();
    check_heap();
  }

 private:
  struct Ref {
    const char* kind;
    uint32_t index;
    uint64_t bytes;  // at least this much must be allocated there
  };

  void problem(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    add_problem_v(&r_->problems, fmt, ap);
    va_end(ap);
  }
  // A heap range an object owns: must be one allocated block's head, owned by no one else.
  void ref(const char* kind, uint32_t i, uint64_t off, uint64_t bytes) {
    if (!off) return problem("%s %u: a ring offset of 0", kind, i);
    if (!refs_.emplace(off, Ref{kind, i, bytes}).second)
      problem("%s %u: ring at %llu also belongs to %s %u", kind, i, (unsigned long long)off,
              refs_[off].kind, refs_[off].index);
  }
  // A live object: states known, owner a process record that is not free (unless the object
  // outlives its creator on purpose: XRC domains and TGT QPs, whose policies keep them).
  bool check_owned(const char* kind, uint32_t i, uint32_t state, uint32_t owner,
                   bool outlives_owner = false) {
    if (state == kSlotFree) return false;
    if (state > kSlotDying) {
      problem("%s %u: bad slot state %u", kind, i, state);
      return false;
    }
    ++r_->live_objects;
    if (outlives_owner) return true;
    if (owner >= kMaxProcs || h_->procs[owner].state.load() == kProcFree)
      problem("%s %u: owner %u is not a process record in use", kind, i, owner);
    return true;
  }
  void lock(const char* what, uint32_t i, const ShmLock& l) {
    uint32_t w = l.word.load();
    if (w && (w - 1 >= kMaxProcs || h_->procs[w - 1].state.load() != kProcAlive))
      problem("%s %u: lock held by process record %u, not alive", what, i, w - 1);
  }
  void check_procs() {
    for (uint32_t p = 0; p < kMaxProcs; ++p) {
      uint32_t st = h_->procs[p].state.load();
      if (st > kProcDead) problem("process record %u: bad state %u", p, st);
      if (st != kProcFree) continue;
      for (const EngineSlot& e : h_->engines[p].slot)
        if (e.seq.load() & 1) problem("process record %u: free, but an engine slot is inside", p);
    }
    lock("table lock", 0, h_->table_lock);
    lock("atomic lock", 0, h_->atomic_lock);
    lock("xrc lock", 0, h_->xrc_lock);
  }
  void check_contexts() {
    for (uint32_t i = 0; i < kMaxContexts; ++i) {
      const ContextSlot& c = h_->ctxs[i];
      if (!check_owned("context", i, c.state.load(), c.owner)) continue;
      if (c.dev >= h_->num_devices) problem("context %u: device %u", i, c.dev);
      if (c.uar_count > kUarRegsMax) problem("context %u: %u registers", i, c.uar_count);
      if (c.uar_off) ref("context", i, c.uar_off, uint64_t{sizeof(UarReg)} * c.uar_count);
    }
  }
  // Each table's chunks (SlotDir): heap blocks the directory owns; allocated in order.
  void check_table_chunks() {
    auto dir = [&](const char* kind, const auto& d, uint64_t chunk_bytes) {
      uint32_t n = d.chunks.load();
      for (uint32_t c = 0; c < std::size(d.chunk); ++c) {
        uint64_t off = d.chunk[c].load();
        if (c < n && !off) problem("%s table: chunk %u counted but not allocated", kind, c);
        if (off) ref(kind, c, off, chunk_bytes);
      }
    };
    dir("pd chunk", h_->pd_dir, kChunkSlots * sizeof(PdSlot));
    dir("mr chunk", h_->mr_dir, kChunkSlots * sizeof(MrSlot));
    dir("cq chunk", h_->cq_dir, kChunkSlots * sizeof(CqSlot));
    dir("qp chunk", h_->qp_dir, sizeof(QpChunk));
    dir("srq chunk", h_->srq_dir, kChunkSlots * sizeof(SrqSlot));
  }
  void check_mrs() {
    for (uint32_t i = 0; i < table_end(h_->mr_dir); ++i) {
      const MrSlot& m = mr_slot(h_, i);
      if (!check_owned("mr", i, m.state.load(), m.owner)) continue;
      if (m.key >> 8 != i) problem("mr %u: key 0x%x names slot %u", i, m.key, m.key >> 8);
      if (!pd_at(h_, m.pd) || !in_use(pd_at(h_, m.pd)->state.load()))
        problem("mr %u: pd %u not in use", i, m.pd);
      if (m.addr + m.length < m.addr) problem("mr %u: range wraps", i);
    }
  }
  void check_cqs() {
    for (uint32_t i = 0; i < table_end(h_->cq_dir); ++i) {
      const CqSlot& c = cq_slot(h_, i);
      if (!check_owned("cq", i, c.state.load(), c.owner)) continue;
      if (!pow2(c.cqe_cnt) || c.cqe_cnt != 1u << c.log_cqe_cnt)
        problem("cq %u: %u CQEs, log %u", i, c.cqe_cnt, c.log_cqe_cnt);
      uint64_t w = c.ring.load();
      // Mid-resize the producers' ring is the new one; the old one is still the consumer's.
      if (cq_ring_off(w) != c.buf_off)
        ref("cq (resizing)", i, cq_ring_off(w),
            uint64_t{1} << (cq_ring_log(w) + cq_log_entry(c.format)));
      ref("cq", i, c.buf_off, uint64_t{c.cqe_cnt} << cq_log_entry(c.format));
      if (uint64_t off = c.staging_off.load()) check_staging(i, off);
    }
  }
  // A receive staging area (emu/staging.h): laid out, a size the provider makes, slot 0 taken.
  void check_staging(uint32_t i, uint64_t off) {
    if (off % 4096 || off + sizeof(StagingArea) > h_->segment_size)
      return problem("cq %u: staging area at %llu is outside the heap", i, (unsigned long long)off);
    const auto* a = reinterpret_cast<const StagingArea*>(reinterpret_cast<const char*>(h_) + off);
    if (a->magic != kStagingMagic || staging_area_bytes(a->bytes) != a->bytes ||
        a->words != a->bytes >> (kStagingSlotShift + 6) || !(a->map()[0].load() & 1))
      return problem("cq %u: staging area at %llu is not one", i, (unsigned long long)off);
    ref("cq staging", i, off, a->bytes);
  }
  void check_srqs() {
    for (uint32_t i = 0; i < table_end(h_->srq_dir); ++i) {
      const SrqSlot& s = srq_slot(h_, i);
      if (!check_owned("srq", i, s.state.load(), s.owner)) continue;
      if ((s.srqn & (kMaxSrqs - 1)) != i) problem("srq %u: number 0x%x", i, s.srqn);
      if (!pow2(s.wqe_cnt) || !pow2(s.stride))
        problem("srq %u: %u WQEs of %u", i, s.wqe_cnt, s.stride);
      ref("srq", i, s.buf_off, uint64_t{s.wqe_cnt} * s.stride);
      ref("srq dbrec", i, s.dbrec_off, 4);
      lock("srq", i, s.lock);
      uint32_t attached = 0;
      each_qp(h_,
              [&](const QpSlot& q) { attached += in_use(q.state.load()) && q.srq_ref == i + 1; });
      if (attached != s.attached_qps.load())
        problem("srq %u: counts %u attached QPs, %u point at it", i, s.attached_qps.load(),
                attached);
      if (s.xrcd_ref > kMaxXrcds) problem("srq %u: xrcd %u", i, s.xrcd_ref);
    }
  }
  void check_qps() {
    for (uint32_t i = 0; i < table_end(h_->qp_dir); ++i) {
      const QpSlot& q = qp_slot(h_, i);
      if (!check_owned("qp", i, q.state.load(), q.owner, q.type == kQptXrcRecv)) continue;
      if ((q.qpn & (kMaxQps - 1)) != i) problem("qp %u: number 0x%x", i, q.qpn);
      bool known = q.type == kQptRc || q.type == kQptUc || q.type == kQptUd ||
                   q.type == kQptXrcSend || q.type == kQptXrcRecv || q.type == kQptRaw ||
                   q.type == kQptDci || q.type == kQptDct;
      if (!known) problem("qp %u: type %u", i, q.type);
      if (q.qp_state.load() > kQpsErr) problem("qp %u: state %u", i, q.qp_state.load());
      if (!pow2(q.sq_bbs) || !pow2(q.rq_wqe_cnt) || !pow2(q.rq_stride))
        problem("qp %u: rings of %u blocks, %u x %u", i, q.sq_bbs, q.rq_wqe_cnt, q.rq_stride);
      ref("qp sq", i, q.sq_off, uint64_t{q.sq_bbs} * 64);
      ref("qp rq", i, q.rq_off, uint64_t{q.rq_wqe_cnt} * q.rq_stride);
      ref("qp dbrec", i, q.dbrec_off, 8);
      if (q.wrec_off) ref("qp wrec", i, q.wrec_off, uint64_t{q.sq_bbs} * sizeof(WqeWriteRec));
      if (q.type != kQptXrcRecv) {
        if (!cq_at(h_, q.send_cq) || !in_use(cq_at(h_, q.send_cq)->state.load()))
          problem("qp %u: send CQ %u not in use", i, q.send_cq);
        if (!q.srq_ref && (!cq_at(h_, q.recv_cq) || !in_use(cq_at(h_, q.recv_cq)->state.load())))
          problem("qp %u: receive CQ %u not in use", i, q.recv_cq);
      }
      if (q.srq_ref &&
          (!srq_at(h_, q.srq_ref - 1) || !in_use(srq_at(h_, q.srq_ref - 1)->state.load())))
        problem("qp %u: srq %u not in use", i, q.srq_ref - 1);
      lock("qp send engine", i, q.sq_engine);
      lock("qp receive", i, q.rq_lock);
    }
  }
  void check_xrc() {
    std::vector<uint32_t> opens(kMaxXrcds), objects(kMaxXrcds), qp_handles(kMaxQps);
    for (uint32_t i = 0; i < kMaxXrcHandles; ++i) {
      const XrcHandle& x = h_->xrc_handles[i];
      if (!check_owned("xrc handle", i, x.state.load(), x.owner)) continue;
      if (x.kind == kHandleXrcd && x.object < kMaxXrcds)
        ++opens[x.object];
      else if (x.kind == kHandleTgtQp && x.object < kMaxQps)
        ++qp_handles[x.object];
      else
        problem("xrc handle %u: kind %u object %u", i, x.kind, x.object);
    }
    for (uint32_t i = 0; i < table_end(h_->qp_dir); ++i)
      if (in_use(qp_slot(h_, i).state.load()) && qp_slot(h_, i).xrcd_ref) {
        if (qp_slot(h_, i).xrcd_ref <= kMaxXrcds) ++objects[qp_slot(h_, i).xrcd_ref - 1];
        if (qp_handles[i] != qp_slot(h_, i).handles.load())
          problem("qp %u: counts %u handles, %u exist", i, qp_slot(h_, i).handles.load(),
                  qp_handles[i]);
      }
    each_srq(h_, [&](const SrqSlot& s) {
      if (in_use(s.state.load()) && s.xrcd_ref && s.xrcd_ref <= kMaxXrcds)
        ++objects[s.xrcd_ref - 1];
    });
    for (uint32_t i = 0; i < kMaxXrcds; ++i) {
      const XrcdSlot& d = h_->xrcds[i];
      if (!check_owned("xrcd", i, d.state.load(), d.owner, true)) continue;
      if (d.opens.load() != opens[i] || d.objects.load() != objects[i])
        problem("xrcd %u: counts %u opens and %u objects, found %u and %u", i, d.opens.load(),
                d.objects.load(), opens[i], objects[i]);
    }
  }
  void check_heap() {
    ShmHeap heap(static_cast<char*>(seg_->at(0)), &h_->heap);
    for (const ShmHeap::Block& b : heap.check(h_->segment_size, &r_->problems)) {
      auto it = refs_.find(b.off);
      if (it == refs_.end()) {
        problem("heap: block at %llu (%llu bytes) allocated but owned by no object",
                (unsigned long long)b.off, (unsigned long long)b.bytes);
        continue;
      }
      if (it->second.bytes > b.bytes)
        problem("%s %u: needs %llu bytes, its block has %llu", it->second.kind, it->second.index,
                (unsigned long long)it->second.bytes, (unsigned long long)b.bytes);
      refs_.erase(it);
      ++r_->heap_blocks_allocated;
    }
    for (const auto& [off, rf] : refs_)
      problem("%s %u: ring at %llu is not an allocated block", rf.kind, rf.index,
              (unsigned long long)off);
    r_->heap_bytes_free = heap.free_bytes();
    r_->heap_bytes_grown =
        __atomic_load_n(&h_->heap.grown_blocks, __ATOMIC_ACQUIRE) * kHeapMinBlock;
    r_->heap_bytes = h_->heap.heap_blocks * kHeapMinBlock;
  }

  Segment* seg_;
  Header* h_;
  CheckReport* r_;
  std::map<uint64_t, Ref> refs_;
};

}  // namespace

CheckReport check_segment(Segment* seg) {
  CheckReport r;
  Checker(seg, &r).run();
  return r;
}

std::string check_text(const CheckReport& r) {
  std::string out;
  for (const std::string& p : r.problems) out += "problem: " + p + "\n";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s: %zu problems; %llu objects, %llu heap blocks, %llu bytes free (heap grown to "
                "%llu of %llu bytes)\n",
                r.ok() ? "consistent" : "INCONSISTENT", r.problems.size(),
                (unsigned long long)r.live_objects, (unsigned long long)r.heap_blocks_allocated,
                (unsigned long long)r.heap_bytes_free, (unsigned long long)r.heap_bytes_grown,
                (unsigned long long)r.heap_bytes);
  return out + buf;
}

}  // namespace emu
