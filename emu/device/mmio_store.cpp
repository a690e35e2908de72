// SPDX-License-Identifier: BSD-2-Clause
// Plain stores to a register, assembled as write-combining would before the device gets them
// (emu/mmio.h, "Plain stores to a register").
#include <cstddef>
#include <cstring>

#include "device/doorbell.h"
#include "emu/barriers.h"
#include "emu/device.h"
#include "emu/mmio.h"
#include "emu/race_log.h"

namespace emu {
namespace {

constexpr uint32_t kDbAt = offsetof(UarReg, doorbell);
constexpr uint32_t kBfAt = offsetof(UarReg, bf);
constexpr uint64_t kAllBytes = ~0ull;

// Threads storing into one register at once take turns here (briefly: a few bit operations and
// 64-byte copies); a waiter that does not get in soon yields its core.
class AssemblyLock {
 public:
  explicit AssemblyLock(std::atomic<uint32_t>& l) : l_(l) {
    for (uint32_t spins = 0; l_.exchange(1, std::memory_order_acquire); ++spins) {
      if (spins < 64)
        cpu_relax();
      else
        sched_yield();
    }
  }
  ~AssemblyLock() { l_.store(0, std::memory_order_release); }

 private:
  std::atomic<uint32_t>& l_;
};

// Bits [lo, hi) of a mask whose bit b stands for byte b.
uint64_t byte_bits(uint32_t lo, uint32_t hi) {
  uint64_t upto = hi >= 64 ? kAllBytes : (1ull << hi) - 1;
  return upto & ~((1ull << lo) - 1);
}

// A store of the whole doorbell word rings with its own bytes (two threads ringing one register
// at once are two doorbells); one assembled from parts rings with the register's bytes.
void doorbell_store(UarReg& reg, StoreAssembly& as, const uint8_t* mirror, const uint8_t* stored,
                    uint32_t at, uint32_t len) {
  uint32_t hi = at + len < kDbAt + 8 ? at + len : kDbAt + 8;
  if (!mmio_word_complete(as, at - kDbAt, hi - kDbAt)) return;
  const bool whole = at == kDbAt && hi == kDbAt + 8;
  uint64_t head;
  std::memcpy(&head, whole ? stored : mirror + kDbAt, sizeof head);
  device_doorbell(mmio_db64(reg, head));
}

// A thread's write into one BlueFlame buffer: the chunks of its WQE that went to the device, all
// under one tag whatever their order (memmove stores a copy's tail before its middle), and whether
// the WQE is whole and flushed. Per thread: another thread's stores in between do not split it
// (the device judges their mix by the chunks' tags).
struct ThreadWrite {
  const UarReg* reg = nullptr;
  uint32_t buf = 0;
  uint64_t tag = 0;
  uint32_t delivered = 0;  // bit i: chunk i went to the device under tag
  bool flushed = false;
};
constexpr uint32_t kThreadWrites = 2 * kWcBuffers;
EMU_FAST_TLS ThreadWrite t_writes[kThreadWrites];
EMU_FAST_TLS uint32_t t_next_write;

ThreadWrite& write_of(const UarReg& reg, uint32_t buf) {
  for (ThreadWrite& w : t_writes)
    if (w.reg == &reg && w.buf == buf) return w;
  ThreadWrite& w = t_writes[t_next_write++ % kThreadWrites];
  w = ThreadWrite{&reg, buf, 0, 0, false};
  return w;
}

// What a chunk whose 64 bytes have all arrived is to the storing thread's write in its buffer.
enum class ChunkRole {
  repeat,      // the same bytes stored again (a copy's overlapping stores): nothing new
  same_write,  // another chunk of the write in progress
  new_write,   // the start of the thread's next write there
};

ChunkRole role_of(const UarReg& reg, const ThreadWrite& w, uint32_t buf, uint32_t i,
                  const uint8_t* bytes) {
  bool seen = w.tag && (w.flushed || (w.delivered >> i & 1));
  if (seen && std::memcmp(bytes, reg.bf[buf] + i * kSendWqeBB, kSendWqeBB) == 0)
    return ChunkRole::repeat;
  bool in_progress = w.tag && !w.flushed && w.delivered;
  if (in_progress && (i != 0 || !(w.delivered & 1))) return ChunkRole::same_write;
  return ChunkRole::new_write;
}

// The thread starts a write in buffer buf: its earlier one there that never completed is dropped
// (its pending chunks would otherwise reach the device later as a write of their own).
void start_write(UarReg& reg, ThreadWrite& w, uint32_t buf, uint32_t i) {
  mmio_bf_abandon(reg, buf);
  w.delivered = 0;
  w.flushed = false;
  w.tag = mmio_bf_continue(reg, buf, i);
}

// A chunk goes to the device with the tag of the storing thread's write, or, when another
// thread's bytes are in it, a tag naming both (the device then finds the WQE torn). Returns
// whether the thread's WQE in the buffer is now whole: the chunks its control segment (as the
// device holds it) asks for have all arrived (one that does not parse asks for its own chunk).
bool deliver_chunk(UarReg& reg, StoreAssembly& as, uint32_t buf, uint32_t i, const uint8_t* bytes,
                   uint32_t me) {
  StoreAssembly::Chunk& ch = as.chunk[buf][i];
  uint32_t foreign = ch.writer != me ? ch.writer : ch.other;
  ch = StoreAssembly::Chunk{};
  ThreadWrite& w = write_of(reg, buf);
  ChunkRole role = role_of(reg, w, buf, i, bytes);
  if (role == ChunkRole::repeat) return false;
  if (role == ChunkRole::new_write) start_write(reg, w, buf, i);
  mmio_bf_chunk(reg, buf, i, bytes, foreign ? bf_mixed_tag(foreign, me) : w.tag);
  w.delivered |= 1u << i;
  if (!(w.delivered & 1)) return false;
  uint32_t need = bf_chunks_needed(reg.bf[buf]);
  uint32_t want = (1u << (need ? need : 1)) - 1;
  if ((w.delivered & want) != want) return false;
  w.flushed = true;
  return true;
}

// The buffer's last two distinct storing threads (UarReg::bf_store_writers), under the lock.
void note_store_writer(UarReg& reg, uint32_t buf, uint32_t me) {
  auto& w = reg.bf_store_writers[buf];
  uint32_t last = w[0].load(std::memory_order_relaxed);
  if (last == me) return;
  w[1].store(last, std::memory_order_relaxed);
  w[0].store(me, std::memory_order_relaxed);
}

void blueflame_store(UarReg& reg, StoreAssembly& as, const uint8_t* mirror, uint32_t at,
                     uint32_t len, bool anonymous) {
  const uint32_t me = writer_tid();
  uint32_t end = at + len < kBfAt + 2 * kBfBufSize ? at + len : kBfAt + 2 * kBfBufSize;
  bool flush = false;
  {
    AssemblyLock lock(as.lock);
    for (uint32_t pos = at; pos < end;) {
      uint32_t rel = pos - kBfAt, buf = rel / kBfBufSize, i = (rel % kBfBufSize) / kSendWqeBB;
      uint32_t in_chunk = rel % kSendWqeBB;
      uint32_t piece = end - pos < kSendWqeBB - in_chunk ? end - pos : kSendWqeBB - in_chunk;
      StoreAssembly::Chunk& ch = as.chunk[buf][i];
      ch.bytes |= byte_bits(in_chunk, in_chunk + piece);
      if (!anonymous) {
        note_store_writer(reg, buf, me);
        if (!ch.writer)
          ch.writer = me;
        else if (ch.writer != me && !ch.other)
          ch.other = me;
      }
      const uint8_t* buf_bytes = mirror + kBfAt + buf * kBfBufSize;
      if (ch.bytes == kAllBytes)
        flush = deliver_chunk(reg, as, buf, i, buf_bytes + i * kSendWqeBB, me) || flush;
      pos += piece;
    }
  }
  if (!flush) return;
  // The WQE is whole: the storing thread's write-combining buffers drain to the device, as the
  // flush a driver makes after its BlueFlame copy would (the engine runs outside the lock).
  uint64_t heads[kWcBuffers];
  uint32_t n = mmio_flush(heads, kWcBuffers);
  for (uint32_t k = 0; k < n; ++k) device_doorbell(heads[k]);
}

}  // namespace

bool mmio_word_complete(StoreAssembly& as, uint32_t lo, uint32_t hi) {
  AssemblyLock lock(as.lock);
  as.db_bytes |= uint8_t(byte_bits(lo, hi));
  if (as.db_bytes != 0xff) return false;
  as.db_bytes = 0;
  return true;
}

void mmio_plain_store(UarReg& reg, StoreAssembly& as, const uint8_t* mirror, const uint8_t* stored,
                      uint32_t at, uint32_t len, bool anonymous) {
  if (at < kDbAt + 8) doorbell_store(reg, as, mirror, stored, at, len);
  if (at + len > kBfAt && at < kBfAt + 2 * kBfBufSize) {
    uint32_t from = at > kBfAt ? at : kBfAt;
    blueflame_store(reg, as, mirror, from, at + len - from, anonymous);
  }
}

}  // namespace emu
