// SPDX-License-Identifier: BSD-2-Clause
// A run of plain RDMA WRITEs, or of RDMA READs, executed with one DMA call (one process_vm_writev
// or process_vm_readv for private target memory). A device thread that falls behind a fast poster,
// or a program that posts a list in one call, leaves many WQEs at once; copying them one system
// call each would cap the message rate at the system-call rate. Everything that is not a plain,
// valid write or read of the run's kind goes the one-at-a-time way, which also reports its errors.
#include <cstdlib>
#include <cstring>
#include <new>

#include "device/engine.h"
#include "device/engine_internal.h"
#include "device/wqe_parse.h"
#include "emu/config.h"
#include "emu/small_copy.h"
#include "shm/shared_map.h"

namespace emu {
using namespace engine_detail;

namespace {
// EMU_DMA_RUNS=0: every WQE on its own (to measure what runs gain).
const bool g_runs = knob_flag("EMU_DMA_RUNS");
// Whether every span lies inside the run's WQE copies (inline data), so is ours to read.
bool all_inline(const MemSpan* spans, uint32_t n, const void* wqes, uint64_t bytes) {
  auto lo = reinterpret_cast<uint64_t>(wqes);
  for (uint32_t i = 0; i < n; ++i)
    if (spans[i].addr < lo || spans[i].addr + spans[i].len > lo + bytes) return false;
  return true;
}

constexpr uint32_t kBatch = 64;

// A run's per-thread buffers (133 KiB). A thread_local of a shared library costs a
// __tls_get_addr call, which the compiler repeats at every use rather than keep the address
// (three per WQE): the address comes from a call it cannot see into, once per run. They are
// allocated by a thread's first run and freed at its exit: as a thread_local array they were
// static TLS, which every pthread_create of a program that loads the provider zeroed and faulted
// in, whether the thread ever ran the engine or not (emu-race's schedules, 18 threads each, spent
// most of their time there). nullptr if the allocation failed: the run is not batched.
struct RunBuffers {
  uint8_t wqes[kBatch][kMaxWqeBBs * kSendWqeBB];
  uint8_t gathered[kBatch * kMaxWqeBBs * kSendWqeBB];
  MemSpan local[kBatch * 4];
  MemSpan remote[kBatch];
};
struct RunBuffersOfThread {
  RunBuffers* buffers = nullptr;
  ~RunBuffersOfThread() {
    delete buffers;
    buffers = nullptr;
  }
};
__attribute__((noinline)) RunBuffers* run_buffers() {
  static thread_local RunBuffersOfThread t_run;
  if (!t_run.buffers) t_run.buffers = new (std::nothrow) RunBuffers;
  return t_run.buffers;
}

// The responder's translation of the run's last R_Key, reused while the key stays the same: the
// MR cannot change during the run (the engine section keeps retire_mr and rereg_mr waiting), and
// the QP's and the MR's rights were checked for this opcode at the first WQE. A key naming a
// memory window is translated every time.
struct RemoteKeyCache {
  uint32_t rkey = 0;
  const MrSlot* mr = nullptr;
  bool translate(uint32_t key, uint64_t addr, uint64_t len, uint64_t* va) const {
    if (!mr || key != rkey || addr < mr->iova || len > mr->length ||
        addr - mr->iova > mr->length - len)
      return false;
    *va = mr->addr + (addr - mr->iova);
    return true;
  }
};

}  // namespace

uint32_t Engine::step_execute_writes(QpSlot& qp, uint32_t producer) {
  uint32_t pending = (producer - qp.sq_ci) & 0xffff;
  // A scheduled run takes each WQE as its own steps, so that a schedule can switch between them.
  if (pending < 2 || sched::scheduled() || !g_runs) return 0;
  // A WQE delivered by BlueFlame is executed from its copy, one at a time: the run stops before it.
  if (stash_pending(qp.bf_stash)) {
    uint32_t stash = qp.bf_stash.index.load(std::memory_order_relaxed);
    uint32_t before = ((stash & 0xffff) - qp.sq_ci) & 0xffff;
    if (before < pending) pending = before;
    if (pending < 2) return 0;
  }
  // (A stream of SENDs never gets here: run_sq asked run_may_form, which reads the head's opcode.)
  // Inline data sits in our copy of the WQE and SGEs in the requester's memory: one source address
  // space only when the requester is this process.
  if (h_->procs[qp.owner].pid != seg_->pid()) return 0;
  if (qp.type == kQptDci) return 0;  // each WQE names its own responder: one at a time
  QpSlot* r = responder_of(seg_, qp);
  // An XRC request's keys are its SRQ's (step_execute): one WQE at a time there.
  if (!r || r->type == kQptXrcRecv) return 0;

  struct Item {
    uint32_t bbs;
    uint32_t len;
    uint16_t idx;
    bool signaled;
  };
  RunBuffers* held = run_buffers();
  if (!held) return 0;
  RunBuffers& buffers = *held;
  auto& wqes = buffers.wqes;
  MemSpan* local = buffers.local;
  MemSpan* remote = buffers.remote;
  Item items[kBatch];
  ParsedWqe w;
  uint32_t n = 0, nl = 0, nr = 0, pos = qp.sq_ci, consumed = 0;
  bool windows = false;
  RemoteKeyCache keys;
  uint8_t op = 0;  // the run's opcode: its first WQE's
  while (n < kBatch && consumed < pending) {
    uint32_t bbs;
    if (fetch_wqe_at(qp, pos, wqes[n], &bbs) != Fetch::ok) break;
    uint8_t o = ctrl_opcode(*reinterpret_cast<const CtrlSeg*>(wqes[n]));
    if (n == 0 && (o == kOpRdmaWrite || o == kOpRdmaRead)) op = o;
    if (o != op) break;
    if (parse_wqe(seg_, qp, wqes[n], &w) != 0 || w.mixed) break;  // (mixed: one at a time)
    uint64_t total = w.local.total;
    if (nl + w.local.n > kBatch * 4) break;
    uint64_t rva = 0;
    const MrSlot* rmr = keys.mr;
    uint32_t rkey = be32(w.raddr.rkey);
    if (total && !keys.translate(rkey, be64(w.raddr.raddr), total, &rva)) {
      if (!translate_remote(seg_, *r, rkey, be64(w.raddr.raddr), total,
                            op == kOpRdmaRead ? kAccessRemoteRead : kAccessRemoteWrite, &rva, &rmr))
        break;
      keys = {};
      if (!rmr->mw_type && rmr->key == rkey) keys = {rkey, rmr};
    }
    // One copy call takes one address space: all through shared mappings, or none.
    if (total) {
      uint64_t window = rmr->share_len ? shared_window(seg_, *rmr, rva, total) : 0;
      if (nr == 0) windows = window != 0;
      if ((window != 0) != windows) break;
      if (window) rva = window;
      // Adjacent targets (a stream into consecutive slots) become one span: the kernel pins the
      // pages of every remote iovec on its own, so 64 spans of one page cost 64 page walks.
      if (nr && remote[nr - 1].addr + remote[nr - 1].len == rva)
        remote[nr - 1].len += total;
      else
        remote[nr++] = {rva, total};
    }
    for (int i = 0; i < w.local.n; ++i) local[nl++] = w.local.span[i];
    items[n++] = {bbs, static_cast<uint32_t>(total), static_cast<uint16_t>(pos & 0xffff),
                  ctrl_signaled(*w.ctrl)};
    pos += bbs;
    consumed += bbs;
  }
  if (n < 2) return 0;
  // A failed copy is redone one WQE at a time, which reports it (moving the same bytes again is
  // harmless for a write or a read).
  if (windows && !peer_still_there(qp, *r)) return 0;
  int rpid = windows ? 0 : h_->procs[r->owner].pid;
  // Inline payloads of a write run sit in our copies of the WQEs, many small spans the kernel
  // would walk one iovec at a time: gathered into one span first, they cost one memcpy each.
  if (op == kOpRdmaWrite && rpid && nl > 1 && all_inline(local, nl, wqes, sizeof wqes)) {
    uint8_t* gathered = buffers.gathered;
    uint64_t at = 0;
    for (uint32_t i = 0; i < nl; ++i) {
      copy_small(gathered + at, reinterpret_cast<const uint8_t*>(local[i].addr), local[i].len);
      at += local[i].len;
    }
    local[0] = {reinterpret_cast<uint64_t>(gathered), at};
    nl = 1;
  }
  int nli = static_cast<int>(nl), nri = static_cast<int>(nr);
  CopyResult cr = op == kOpRdmaRead ? dma_copy(rpid, remote, nri, 0, local, nli)
                                    : dma_copy(0, local, nli, rpid, remote, nri);
  if (cr != CopyResult::ok) return 0;
  // One CqeInfo for the run: every WQE sets the same fields, and step_complete only reads it.
  CqeInfo info;
  clear_cqe_info(&info);
  info.cqe_opcode = kCqeReq;
  info.wqe_opcode = op;
  info.qpn = qp.qpn;
  for (uint32_t i = 0; i < n; ++i) {
    advance_psn(qp, r, packets(items[i].len, qp.path_mtu));
    info.wqe_counter = items[i].idx;
    info.byte_cnt = items[i].len;
    step_complete(qp, info, items[i].signaled, items[i].bbs);
  }
  return n;
}

}  // namespace emu
