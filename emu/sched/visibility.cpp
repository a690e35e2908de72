// SPDX-License-Identifier: BSD-2-Clause
// The store buffers of emu/sched/visibility.h: entries, drains, drain actors, the device's view.
#include "emu/sched/visibility.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace emu::sched {
namespace {
std::atomic<StoreBuffers*> g_installed{nullptr};
}  // namespace

const char* visibility_name(Visibility v) {
  switch (v) {
    case Visibility::kSc:
      return "sc";
    case Visibility::kX86:
      return "x86";
    case Visibility::kWeak:
      return "weak";
  }
  return "?";
}

bool parse_visibility(const char* s, Visibility* out) {
  for (Visibility v : {Visibility::kSc, Visibility::kX86, Visibility::kWeak})
    if (s && std::strcmp(s, visibility_name(v)) == 0) {
      *out = v;
      return true;
    }
  return false;
}

namespace detail {
void buffer_store_slow(StoreKind kind, uint64_t seg_off, const void* before, uint32_t len) {
  if (StoreBuffers* b = StoreBuffers::for_caller())
    b->store(current_actor(), kind, seg_off, before, len);
}
void drain_stores_slow(bool point_first) {
  StoreBuffers* b = StoreBuffers::for_caller();
  if (!b || !b->holds(current_actor())) return;
  // The barrier is a point while the buffer holds something: the drain actors may take entries
  // first (out of order under weak), which is how the device sees a store that has no barrier
  // after it before the next barrier.
  if (point_first) point(kPointDrain);
  b->drain_all(current_actor());
}
void device_view_slow(uint64_t seg_off, void* dst, uint32_t len) {
  if (StoreBuffers* b = StoreBuffers::for_caller())
    b->overlay(seg_off, static_cast<uint8_t*>(dst), len);
}
bool buffer_wc_chunk_slow(uint8_t* dst, const void* src, std::atomic<uint64_t>* tag_word,
                          uint64_t tag) {
  StoreBuffers* b = StoreBuffers::for_caller();
  return b && b->wc_store(current_actor(), dst, src, tag_word, tag);
}
void deliver_wc_slow() {
  if (StoreBuffers* b = StoreBuffers::for_caller()) b->deliver_all(current_actor());
}
}  // namespace detail

StoreBuffers::StoreBuffers(Visibility profile, bool write_combining)
    : profile_(profile), wc_(write_combining && profile != Visibility::kSc) {
  StoreBuffers* none = nullptr;
  if (!g_installed.compare_exchange_strong(none, this)) {
    std::fprintf(stderr, "emu::sched::StoreBuffers: one is installed already\n");
    std::abort();
  }
}

StoreBuffers::~StoreBuffers() { g_installed.store(nullptr); }

StoreBuffers* StoreBuffers::for_caller() {
  return scheduled() ? g_installed.load(std::memory_order_relaxed) : nullptr;
}

void StoreBuffers::add_posters(Scenario& sc, std::vector<Actor> posters) {
  size_t first = posters_.size();
  for (Actor& a : posters) {
    auto id = static_cast<ActorId>(sc.actors.size());
    posters_.push_back(Poster{id, false, {}, {}});
    size_t k = posters_.size() - 1;
    // The end of a thread drains its buffer (the kernel's context switch is a full barrier).
    sc.actors.push_back({a.name, [this, k, body = std::move(a.body)] {
                           body();
                           drain_all(posters_[k].id);
                           deliver_all(posters_[k].id);
                           posters_[k].done = true;
                         }});
  }
  if (profile_ == Visibility::kSc) return;
  for (size_t k = first; k < posters_.size(); ++k) {
    std::string name = sc.actors[posters_[k].id].name;
    if (wc_) {
      sc.actors.push_back({name + " wc oldest", [this, k] { wc_drain_body(k, false); }});
      sc.actors.push_back({name + " wc newest", [this, k] { wc_drain_body(k, true); }});
    }
    if (profile_ == Visibility::kX86) {
      sc.actors.push_back({name + " drain", [this, k] { drain_body(k, true, StoreKind::kRing); }});
      continue;
    }
    sc.actors.push_back(
        {name + " drain ring", [this, k] { drain_body(k, false, StoreKind::kRing); }});
    sc.actors.push_back(
        {name + " drain record", [this, k] { drain_body(k, false, StoreKind::kRecord); }});
  }
}

size_t StoreBuffers::pending() const {
  size_t n = 0;
  for (const Poster& p : posters_) n += p.entries.size() + p.chunks.size();
  return n;
}

size_t StoreBuffers::pending_chunks() const {
  size_t n = 0;
  for (const Poster& p : posters_) n += p.chunks.size();
  return n;
}

StoreBuffers::Poster* StoreBuffers::poster_of(ActorId id) {
  for (Poster& p : posters_)
    if (p.id == id) return &p;
  return nullptr;
}

bool StoreBuffers::has(const Poster& p, bool any_kind, StoreKind kind) const {
  return std::any_of(p.entries.begin(), p.entries.end(),
                     [&](const Entry& e) { return any_kind || e.kind == kind; });
}

// A drain actor: enabled while its poster has an entry it drains; each step drains the oldest.
void StoreBuffers::drain_body(size_t k, bool any_kind, StoreKind kind) {
  for (;;) {
    wait_until(
        [this, k, any_kind, kind] { return posters_[k].done || has(posters_[k], any_kind, kind); },
        "stores to drain", kPointDrain);
    std::vector<Entry>& es = posters_[k].entries;
    auto it = std::find_if(es.begin(), es.end(),
                           [&](const Entry& e) { return any_kind || e.kind == kind; });
    if (it == es.end()) return;  // the poster is done and drained everything
    es.erase(it);
  }
}

// A WC drain actor: enabled while its poster has a pending chunk; each step delivers the oldest
// (or the newest) one.
void StoreBuffers::wc_drain_body(size_t k, bool newest) {
  for (;;) {
    wait_until([this, k] { return posters_[k].done || !posters_[k].chunks.empty(); },
               "chunks to deliver", kPointDrain);
    std::vector<Chunk>& cs = posters_[k].chunks;
    if (cs.empty()) return;  // the poster is done and delivered everything
    auto it = newest ? cs.end() - 1 : cs.begin();
    deliver(*it);
    cs.erase(it);
  }
}

void StoreBuffers::deliver(const Chunk& c) {
  std::memcpy(c.dst, c.bytes, sizeof c.bytes);
  c.tag_word->store(c.tag, std::memory_order_release);
}

bool StoreBuffers::wc_store(ActorId actor, uint8_t* dst, const void* src,
                            std::atomic<uint64_t>* tag_word, uint64_t tag) {
  Poster* p = poster_of(actor);
  if (!p || !wc_) return false;
  // A second store to a line the poster's WC buffer holds combines with it (keeps its place).
  auto it = std::find_if(p->chunks.begin(), p->chunks.end(),
                         [dst](const Chunk& c) { return c.dst == dst; });
  if (it == p->chunks.end()) it = p->chunks.insert(p->chunks.end(), Chunk{dst, tag_word, 0, {}});
  it->tag = tag;
  std::memcpy(it->bytes, src, sizeof it->bytes);
  return true;
}

void StoreBuffers::deliver_all(ActorId actor) {
  Poster* p = poster_of(actor);
  if (!p) return;
  for (const Chunk& c : p->chunks) deliver(c);
  p->chunks.clear();
}

void StoreBuffers::store(ActorId actor, StoreKind kind, uint64_t seg_off, const void* before,
                         uint32_t len) {
  Poster* p = poster_of(actor);
  if (!p || profile_ == Visibility::kSc) return;
  Entry e{seg_off, std::min<uint32_t>(len, sizeof e.before), kind, {}};
  std::memcpy(e.before, before, e.len);
  p->entries.push_back(e);
}

bool StoreBuffers::holds(ActorId actor) {
  Poster* p = poster_of(actor);
  return p && !p->entries.empty();
}

void StoreBuffers::drain_all(ActorId actor) {
  if (Poster* p = poster_of(actor)) p->entries.clear();
}

// Newest to oldest, so that for a byte several entries of one poster cover, the oldest one's
// `before` is what remains: the device sees the line as it was before the first undrained store.
// Between posters the later in posters_ wins; two posters storing one line unlocked is a race the
// race log reports anyway.
void StoreBuffers::overlay(uint64_t seg_off, uint8_t* dst, uint32_t len) const {
  for (const Poster& p : posters_)
    for (auto e = p.entries.rbegin(); e != p.entries.rend(); ++e) {
      uint64_t lo = std::max(seg_off, e->off), hi = std::min(seg_off + len, e->off + e->len);
      if (lo < hi) std::memcpy(dst + (lo - seg_off), e->before + (lo - e->off), hi - lo);
    }
}

}  // namespace emu::sched
