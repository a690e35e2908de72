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
#include "dma/shared_map.h"
#include "emu/config.h"
#include "emu/small_copy.h"

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

// A WQE of the run: what its completion needs.
struct RunItem {
  uint32_t bbs;
  uint32_t len;
  uint16_t idx;
  bool signaled;
};

// Inline payloads of a write run sit in our copies of the WQEs, many small spans the kernel
// would walk one iovec at a time: gathered into one span, they cost one memcpy each.
void gather_inline(RunBuffers& b, uint32_t* nl) {
  uint8_t* gathered = b.gathered;
  uint64_t at = 0;
  for (uint32_t i = 0; i < *nl; ++i) {
    copy_small(gathered + at, reinterpret_cast<const uint8_t*>(b.local[i].addr), b.local[i].len);
    at += b.local[i].len;
  }
  b.local[0] = {reinterpret_cast<uint64_t>(gathered), at};
  *nl = 1;
}

}  // namespace

// The run being formed: its WQEs' copies and spans (in the thread's buffers), where the next WQE
// is, and what every WQE of it must share (the opcode, the remote address space).
struct Engine::Run {
  // The items are written as WQEs join (not cleared first: the run is on the fast path).
  Run(RunBuffers& b, uint32_t span, uint32_t head) : buf(b), pending(span), pos(head) {}
  RunBuffers& buf;
  uint32_t pending;  // blocks the run may take
  uint32_t pos;      // the next WQE's ring position
  uint32_t consumed = 0;
  uint32_t n = 0, nl = 0, nr = 0;  // WQEs, local spans, remote spans
  bool windows = false;            // remote spans through shared mappings
  uint8_t op = 0;                  // the run's opcode: its first WQE's
  RemoteKeyCache keys;
  RunItem items[kBatch];
};

uint32_t Engine::run_span(QpSlot& qp, uint32_t producer) {
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
  return pending;
}

bool Engine::add_to_run(QpSlot& qp, const QpSlot& r, Run& run) {
  uint8_t* wqe = run.buf.wqes[run.n];
  uint32_t bbs;
  if (fetch_wqe_at(qp, run.pos, wqe, &bbs) != Fetch::ok) return false;
  uint8_t o = ctrl_opcode(*reinterpret_cast<const CtrlSeg*>(wqe));
  if (run.n == 0 && (o == kOpRdmaWrite || o == kOpRdmaRead)) run.op = o;
  if (o != run.op) return false;
  ParsedWqe w;
  if (parse_wqe(seg_, qp, wqe, &w) != 0 || w.mixed) return false;  // (mixed: one at a time)
  uint64_t total = w.local.total;
  if (run.nl + w.local.n > kBatch * 4) return false;
  uint64_t rva = 0;
  const MrSlot* rmr = run.keys.mr;
  uint32_t rkey = be32(w.raddr.rkey);
  if (total && !run.keys.translate(rkey, be64(w.raddr.raddr), total, &rva)) {
    if (!translate_remote(seg_, r, rkey, be64(w.raddr.raddr), total,
                          run.op == kOpRdmaRead ? kAccessRemoteRead : kAccessRemoteWrite, &rva,
                          &rmr))
      return false;
    run.keys = {};
    if (!rmr->mw_type && rmr->key == rkey) run.keys = {rkey, rmr};
  }
  // One copy call takes one address space: all through shared mappings, or none.
  if (total) {
    uint64_t window = rmr->share_len ? shared_window(seg_, *rmr, rva, total) : 0;
    if (run.nr == 0) run.windows = window != 0;
    if ((window != 0) != run.windows) return false;
    if (window) rva = window;
    // Adjacent targets (a stream into consecutive slots) become one span: the kernel pins the
    // pages of every remote iovec on its own, so 64 spans of one page cost 64 page walks.
    MemSpan* remote = run.buf.remote;
    if (run.nr && remote[run.nr - 1].addr + remote[run.nr - 1].len == rva)
      remote[run.nr - 1].len += total;
    else
      remote[run.nr++] = {rva, total};
  }
  for (int i = 0; i < w.local.n; ++i) run.buf.local[run.nl++] = w.local.span[i];
  run.items[run.n++] = {bbs, static_cast<uint32_t>(total), static_cast<uint16_t>(run.pos & 0xffff),
                        ctrl_signaled(*w.ctrl)};
  run.pos += bbs;
  run.consumed += bbs;
  return true;
}

void Engine::complete_run(QpSlot& qp, QpSlot* r, const Run& run) {
  // One CqeInfo for the run: every WQE sets the same fields, and step_complete only reads it.
  CqeInfo info;
  clear_cqe_info(&info);
  info.cqe_opcode = kCqeReq;
  info.wqe_opcode = run.op;
  info.qpn = qp.qpn;
  for (uint32_t i = 0; i < run.n; ++i) {
    advance_psn(qp, r, packets(run.items[i].len, qp.path_mtu));
    info.wqe_counter = run.items[i].idx;
    info.byte_cnt = run.items[i].len;
    step_complete(qp, info, run.items[i].signaled, run.items[i].bbs);
  }
}

uint32_t Engine::step_execute_writes(QpSlot& qp, uint32_t producer) {
  uint32_t pending = run_span(qp, producer);
  if (!pending) return 0;
  QpSlot* r = responder_of(seg_, qp);
  // An XRC request's keys are its SRQ's (step_execute): one WQE at a time there.
  if (!r || r->type == kQptXrcRecv) return 0;
  RunBuffers* held = run_buffers();
  if (!held) return 0;
  Run run(*held, pending, qp.sq_ci);
  while (run.n < kBatch && run.consumed < run.pending && add_to_run(qp, *r, run)) {
  }
  if (run.n < 2) return 0;
  // A failed copy is redone one WQE at a time, which reports it (moving the same bytes again is
  // harmless for a write or a read).
  if (run.windows && !peer_still_there(qp, *r)) return 0;
  int rpid = run.windows ? 0 : h_->procs[r->owner].pid;
  uint32_t nl = run.nl;
  if (run.op == kOpRdmaWrite && rpid && nl > 1 &&
      all_inline(run.buf.local, nl, run.buf.wqes, sizeof run.buf.wqes))
    gather_inline(run.buf, &nl);
  int nli = static_cast<int>(nl), nri = static_cast<int>(run.nr);
  CopyResult cr = run.op == kOpRdmaRead
                      ? dma_copy(rpid, run.buf.remote, nri, 0, run.buf.local, nli)
                      : dma_copy(0, run.buf.local, nli, rpid, run.buf.remote, nri);
  if (cr != CopyResult::ok) return 0;
  complete_run(qp, r, run);
  return run.n;
}

}  // namespace emu
