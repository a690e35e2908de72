// SPDX-License-Identifier: BSD-2-Clause
// The driver's stores that the device records, with the writing thread: BlueFlame chunks, the flush
// that drains them to the device, the 8-byte doorbell, and the send ring's WQE and doorbell-record
// stores. The provider's post path and the direct-access API (emudv.h) both go through these, so
// the device sees the same thing whoever posts, and a later scheduler hooks exactly these.
//
// Write-combining model: a thread's BlueFlame chunks sit in its write-combining buffers until it
// flushes (mmio_flush_writes in mlx5 terms); the flush is when the device receives them, one
// buffer at a time, in the order they were written. Unflushed buffers drain at the thread's next
// flush, or when more than kWcBuffers are pending (eviction).
#pragma once
#include <atomic>
#include <cstdint>

#include "emu/barriers.h"
#include "emu/layout.h"
#include "emu/race_log.h"  // writer_tid
#include "emu/sched/visibility.h"
#include "emu/wqe.h"  // kSendWqeBB

namespace emu {

constexpr uint32_t kWcBuffers = 4;

// Starts a BlueFlame burst by the calling thread: the tag its chunks carry.
uint64_t mmio_bf_begin();
// The tag for chunks from `first` on in buffer `buf` of reg: the same write as the thread's last,
// unflushed chunks if they ended just before `first` in that buffer (a WQE that wraps the send ring
// is copied in two pieces), else a new burst.
uint64_t mmio_bf_continue(UarReg& reg, uint32_t buf, uint32_t first);
// One 64-byte chunk into BlueFlame buffer `buf` of reg, chunk index i: the data, then its tag.
void mmio_bf_chunk(UarReg& reg, uint32_t buf, uint32_t i, const void* src, uint64_t tag);
// The calling thread's pending chunks in buffer buf of reg are dropped: a write it gave up (a
// plain-store write another thread's bytes broke into, which the same thread then started over).
void mmio_bf_abandon(UarReg& reg, uint32_t buf);
// Whole-WQE helper: begin, chunks from `blocks` (nbbs 64-byte blocks, each at blocks[i]), pending.
void mmio_bf_copy(UarReg& reg, uint32_t buf, const uint8_t* const* blocks, uint32_t nbbs);
// Drains the calling thread's pending BlueFlame buffers to the device. Each one's WQE head is
// written to heads[] (up to max; returns how many) for the caller to pass to device_doorbell()
// once it has dropped its own locks.
// reg_locked: the caller holds a lock that serialises every writer of the registers it flushes
// (the provider's register lock), so the device need not serialise its intake itself.
uint32_t mmio_flush(uint64_t* heads, uint32_t max, bool reg_locked = false);
// The 8-byte doorbell write: recorded with the writer (what the device's intake of it keeps, for
// race reports); returns the value for device_doorbell(). Inline: one per post.
inline uint64_t mmio_db64(UarReg& reg, uint64_t head) {
  sched::point(sched::kPointDb64, reinterpret_cast<uintptr_t>(&reg.doorbell), head);
  sched::drain_stores(/*point_first=*/false);  // the driver's mmio_wc_start before the doorbell
  mmio_write64(&reg.doorbell, head);
  reg.db_writer.store(writer_tid(), std::memory_order_relaxed);
  return head;
}

// ---- Plain stores to a register (the provider's trapped register windows, verbs_provider/mmio/)
// -- A program storing into its mapping of a register makes no call: each store arrives on its own,
// in whatever width the writer used. What the CPU's write-combining buffer would assemble before
// the bytes reach a NIC is assembled here: the doorbell rings when its 8 bytes have arrived; a
// BlueFlame chunk goes to the device (mmio_bf_chunk) when its 64 bytes have, tagged with the
// storing thread's write, or with another thread's when bytes of two threads share it (a torn
// chunk); and the WQE is flushed to the device when the chunks its control segment's DS count
// names are all there.
struct StoreAssembly {
  std::atomic<uint32_t> lock{0};
  uint8_t db_bytes = 0;  // bit b: doorbell byte b arrived since the last ring
  struct Chunk {
    uint64_t bytes = 0;              // bit b: byte b of the chunk arrived
    uint32_t writer = 0, other = 0;  // the first thread that stored into it; another one
  };
  Chunk chunk[2][kBfChunks];
  // Each thread's write in progress (which chunks of its WQE went to the device, under which tag)
  // is the thread's own, kept beside its write-combining buffers (emu/device/mmio_store.cpp).
};
// Bytes [lo, hi) of an 8-byte register word arrived (one store may bring part of it, 0 <= lo < hi
// <= 8): whether all 8 have now, since the word was last complete (the next store starts it anew).
// The doorbell's word, and a CQ doorbell's (verbs_provider/verbs/register_pages.cpp).
bool mmio_word_complete(StoreAssembly& as, uint32_t lo, uint32_t hi);
// A store of len bytes at byte `at` of register reg's layout (UarReg's offsets: the doorbell, the
// BlueFlame buffers; stores elsewhere are dropped, as a NIC drops writes to unused register
// space). `stored` holds the len bytes as this store made them; mirror + at holds them too, in the
// register's page as the program's threads wrote it (BlueFlame chunks assemble there; another
// thread may have stored over them since). Runs on the storing thread, in its fault handler.
// anonymous: BlueFlame bytes that count for their chunk under no writer (mlx5's layout: the 8
// bytes of a doorbell rung at a half's start, which a later write by another thread replaces
// without tearing anything).
void mmio_plain_store(UarReg& reg, StoreAssembly& as, const uint8_t* mirror, const uint8_t* stored,
                      uint32_t at, uint32_t len, bool anonymous = false);

// Send ring stores: a WQE of nbbs blocks written at ring position pos (32-bit block counter), and
// the send doorbell record. rec may be null (nothing recorded).
// Before the ring copy: in a scheduled run with store buffers (emu/sched/visibility.h) the blocks'
// old bytes are kept so the device does not see the new ones before they drain.
void sq_note_wqe_before_slow(QpSlot& qp, uint32_t pos, uint32_t nbbs);
inline void sq_note_wqe_before(QpSlot& qp, uint32_t pos, uint32_t nbbs) {
  if (sched::scheduled()) sq_note_wqe_before_slow(qp, pos, nbbs);
}
// Inline: it runs for every WQE posted, a few loads and stores.
inline void sq_note_wqe_store(QpSlot& qp, WqeWriteRec* rec, uint32_t pos, uint32_t nbbs) {
  // After the ring copy: the switch a schedule may make between this WQE and what follows it.
  sched::point(sched::kPointWqeStore, qp.sq_off + (pos & (qp.sq_bbs - 1)) * kSendWqeBB, pos);
  if (!rec) return;
  uint32_t tid = writer_tid();
  uint32_t mask = qp.sq_bbs - 1;
  WqeWriteRec& c = rec[pos & mask];
  // Loads and stores, no read-modify-write (this runs on every post): two threads storing into
  // one slot at the very same moment may count once, but a slot written twice before the device
  // fetched it — the race that leaves a trace — counts two.
  c.prev_writer.store(c.writer.load(std::memory_order_relaxed), std::memory_order_relaxed);
  c.writer.store(tid, std::memory_order_relaxed);
  c.unfetched.store(c.unfetched.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  c.pos.store(pos, std::memory_order_relaxed);
  for (uint32_t i = 1; i < nbbs; ++i) {
    rec[(pos + i) & mask].pos.store(pos + i, std::memory_order_relaxed);
    rec[(pos + i) & mask].writer.store(tid, std::memory_order_relaxed);
  }
  if (!qp.wrec_tracked.load(std::memory_order_relaxed)) qp.wrec_tracked.store(1);
}
// A WQE written at pos and then abandoned before the doorbell record (ibv_wr_abort).
void sq_note_wqe_unstore(WqeWriteRec* rec, uint32_t mask, uint32_t pos);
// The send doorbell record store, with its writer recorded; fenced: after device_barrier(), as a
// driver does it. Inline: every post makes one.
inline void sq_dbrec_store_as(QpSlot& qp, uint32_t* dbrec_send, uint32_t producer, bool fenced) {
  sched::point(sched::kPointDbrecStore, reinterpret_cast<uintptr_t>(dbrec_send), producer);
  // A store only when the writer changes: one thread posting pays a load.
  uint32_t me = writer_tid(), last = qp.dbrec_writer.load(std::memory_order_relaxed);
  if (last != me) {
    qp.dbrec_other.store(last, std::memory_order_relaxed);
    qp.dbrec_writer.store(me, std::memory_order_relaxed);
  }
  if (fenced) {  // device_barrier(), the point above being the one before it
    sched::drain_stores(/*point_first=*/false);
    to_device_barrier();
  }
  sched::buffer_store(sched::StoreKind::kRecord, qp.dbrec_off + sizeof(uint32_t), dbrec_send,
                      sizeof(uint32_t));
  dbrec_store32(dbrec_send, be32(producer & 0xffff));
}
// The record store after device_barrier(), as a driver does it.
inline void sq_dbrec_store(QpSlot& qp, uint32_t* dbrec_send, uint32_t producer) {
  sq_dbrec_store_as(qp, dbrec_send, producer, true);
}
// The record store alone: a driver that forgot the barrier (the device may see the record before
// the WQEs it publishes, under a weak visibility profile).
inline void sq_dbrec_store_unfenced(QpSlot& qp, uint32_t* dbrec_send, uint32_t producer) {
  sq_dbrec_store_as(qp, dbrec_send, producer, false);
}
// udma_to_device_barrier: the calling thread's earlier stores reach the device before its later
// ones (in a scheduled run with store buffers: its buffer drains).
inline void device_barrier() {
  sched::drain_stores();
  to_device_barrier();
}

}  // namespace emu
