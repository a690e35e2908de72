// SPDX-License-Identifier: BSD-2-Clause
// When the driver's stores reach the device: the visibility model of a scheduled run.
//
// A real CPU does not make a store visible to the NIC the moment it executes: it sits in the
// core's store buffer until a barrier, a lock release or the buffer's own drain. The driver's
// barriers (udma_to_device_barrier before the doorbell record, mmio_wc_start before the doorbell)
// exist for exactly that, and this model lets a schedule show what goes wrong without them.
//
// A scenario installs StoreBuffers with a profile and adds its posters through it. A poster's
// stores into a send ring (one entry per 64-byte block) and into the send doorbell record go into
// its buffer; the device's reads of the record and of the ring (engine_detail::sq_producer,
// Engine::fetch_wqe_at) see, for every byte an undrained entry covers, the byte that was there
// before the oldest such store. The poster itself reads memory and so its own stores (store
// forwarding). Drains: the barrier before the record (device_barrier), a doorbell or BlueFlame
// burst and the flush (mmio.h), a lock release (sched::lock_release), the poster's end, and drain
// actors whose steps the schedule chooses like any actor's:
//   sc    stores are visible at once; no buffer, no drain actor (the default: no StoreBuffers);
//   x86   TSO: one drain actor per poster, each step drains its oldest entry (program order);
//   weak  one drain actor per poster and location kind (ring, record), each draining the oldest
//         entry of its kind: the record may reach the device before the WQE it publishes, while
//         stores of one kind stay in order.
// Outside a scheduled run, and for an actor that is not a poster, the hooks cost one thread-local
// load (sched::scheduled()) and change nothing.
//
// BlueFlame chunks (write-combining stores into a register's buffer) are held apart: a poster's
// chunk stays in its write-combining entry (the 64 data bytes and the chunk's tag word, written to
// the register only when the entry is delivered), so the device's reads of the buffer see what was
// there before. Delivery: every pending chunk at the poster's flush and at a WC eviction
// (emu/mmio.h), at its end, and at the steps of two WC drain actors per poster (any profile but
// sc; opt-in, see StoreBuffers), one delivering its oldest pending chunk and one its newest: a
// burst may reach the device in order, reversed, or interleaved with another writer's. Barriers and
// lock releases do not deliver chunks (x86's spin unlock is a plain store; only the flush, sfence,
// empties a WC buffer).
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "emu/sched/sched.h"

namespace emu::sched {

enum class Visibility : uint8_t { kSc, kX86, kWeak };
const char* visibility_name(Visibility v);  // "sc", "x86", "weak"
bool parse_visibility(const char* s, Visibility* out);

// What a buffered store wrote: the drain actors of `weak` drain each kind on its own.
enum class StoreKind : uint8_t { kRing, kRecord };

namespace detail {
void buffer_store_slow(StoreKind kind, uint64_t seg_off, const void* before, uint32_t len);
void drain_stores_slow(bool point_first);
void device_view_slow(uint64_t seg_off, void* dst, uint32_t len);
bool buffer_wc_chunk_slow(uint8_t* dst, const void* src, std::atomic<uint64_t>* tag_word,
                          uint64_t tag);
void deliver_wc_slow();
}  // namespace detail

// The calling actor is about to store len bytes (at most 64) at segment offset seg_off, which
// hold `before` now.
inline void buffer_store(StoreKind kind, uint64_t seg_off, const void* before, uint32_t len) {
  if (detail::tl_run) detail::buffer_store_slow(kind, seg_off, before, len);
}
// Every store the calling actor buffered reaches the device (a barrier). With a non-empty buffer
// it is a scheduling point first (kPointDrain), so that the drain actors may take entries before
// it, unless the caller made a point just before (point_first false: one decision, not two).
inline void drain_stores(bool point_first = true) {
  if (detail::tl_run) detail::drain_stores_slow(point_first);
}
// The device reads len bytes at seg_off: dst holds memory's bytes; the undrained stores are
// replaced by what they overwrote.
inline void device_view(uint64_t seg_off, void* dst, uint32_t len) {
  if (detail::tl_run) detail::device_view_slow(seg_off, dst, len);
}

// The calling actor writes a 64-byte BlueFlame chunk src to dst and then tag to tag_word. True:
// a poster's write-combining entry holds it, the caller writes nothing (delivery does).
inline bool buffer_wc_chunk(uint8_t* dst, const void* src, std::atomic<uint64_t>* tag_word,
                            uint64_t tag) {
  return detail::tl_run && detail::buffer_wc_chunk_slow(dst, src, tag_word, tag);
}
// The calling actor's pending chunks reach the register, oldest first (its flush or an eviction).
inline void deliver_wc() {
  if (detail::tl_run) detail::deliver_wc_slow();
}

class StoreBuffers {
 public:
  // Installs itself: one per process at a time. write_combining: the posters' BlueFlame chunks
  // are held in write-combining entries too, with two WC drain actors per poster (not under sc).
  // Opt-in: the drain actors multiply the schedules of scenarios that do not look at chunks.
  explicit StoreBuffers(Visibility profile, bool write_combining = false);
  ~StoreBuffers();  // uninstalls
  StoreBuffers(const StoreBuffers&) = delete;
  StoreBuffers& operator=(const StoreBuffers&) = delete;

  Visibility profile() const { return profile_; }

  // Appends the posters to sc (their stores are buffered; each drains what is left when its body
  // returns), then their drain actors (none under sc). Only a poster's stores are buffered; other
  // actors (the device among them) may come before or after in sc.actors.
  void add_posters(Scenario& sc, std::vector<Actor> posters);

  // Entries not yet drained, of every poster (store entries and write-combining chunks).
  size_t pending() const;
  size_t pending_chunks() const;

  // The installed buffers when the calling thread is an actor of a scheduled run, else null.
  static StoreBuffers* for_caller();

  // ---- the hooks' work (see buffer_store, drain_stores, device_view) ----
  void store(ActorId actor, StoreKind kind, uint64_t seg_off, const void* before, uint32_t len);
  bool holds(ActorId actor);  // the actor's buffer is not empty
  void drain_all(ActorId actor);
  void overlay(uint64_t seg_off, uint8_t* dst, uint32_t len) const;
  bool wc_store(ActorId actor, uint8_t* dst, const void* src, std::atomic<uint64_t>* tag_word,
                uint64_t tag);
  void deliver_all(ActorId actor);

 private:
  struct Entry {
    uint64_t off;
    uint32_t len;
    StoreKind kind;
    uint8_t before[64];
  };
  // A BlueFlame chunk not yet delivered: what the register receives at delivery.
  struct Chunk {
    uint8_t* dst;
    std::atomic<uint64_t>* tag_word;
    uint64_t tag;
    uint8_t bytes[64];
  };
  struct Poster {
    ActorId id;
    bool done = false;
    std::vector<Entry> entries;  // oldest first
    std::vector<Chunk> chunks;   // oldest first
  };
  Poster* poster_of(ActorId id);
  bool has(const Poster& p, bool any_kind, StoreKind kind) const;
  void drain_body(size_t poster, bool any_kind, StoreKind kind);
  void wc_drain_body(size_t poster, bool newest);
  static void deliver(const Chunk& c);

  Visibility profile_;
  bool wc_;
  // Touched only by actors holding the baton (and the runner between runs): no lock.
  std::vector<Poster> posters_;
};

}  // namespace emu::sched
