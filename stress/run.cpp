// SPDX-License-Identifier: BSD-2-Clause
// Posting, completions and the drain of an emu-stress run (verification: verify.cpp).
//
// Completions of one QP are polled by one thread at a time (PairState::poll_mu) in every thread
// mode. The run studies what concurrent *posting* does to what reaches the device; two threads
// reading one CQE would add duplicates of the program's own making, which the device could not
// explain.
#include "run.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace stress {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxSlotsPerLane = 4096;
constexpr uint32_t kDurationSlots = 1024;
constexpr uint64_t kDurationRecords = 1u
                                      << 20;  // messages per thread at most in --duration-ms mode

template <typename T>
std::atomic_ref<T> ref(T& v) {
  return std::atomic_ref<T>(v);
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Posting thread t on the allowed CPU t * ncpu / threads: neighbours share a CPU, and the first
// and the last thread (QPs 0 and 16 of 17 share register 0) run on different ones.
void pin_to_block(uint32_t t, uint32_t threads) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed)) return;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.empty()) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus[size_t(t) * cpus.size() / threads], &one);
  sched_setaffinity(0, sizeof one, &one);
}

}  // namespace

Run::Run(const Options& o) : o_(o) {
  uint32_t t = o_.threads, q = o_.qps;
  lanes_n_ = std::max(t, q);
  uint32_t biggest = *std::max_element(o_.sizes.begin(), o_.sizes.end());
  slot_bytes_ = (biggest + 63) & ~63u;
  uint32_t fewest_lanes = lanes_n_ / t;  // every thread has at least this many
  if (o_.count) {
    uint64_t per_lane = (o_.count + fewest_lanes - 1) / fewest_lanes;
    slots_ = static_cast<uint32_t>(std::min<uint64_t>(per_lane, kMaxSlotsPerLane));
    capacity_ = o_.count;
  } else {
    slots_ = kDurationSlots;
    capacity_ = kDurationRecords;
  }
  lanes_.resize(lanes_n_);
  lanes_of_.resize(t);
  std::vector<uint32_t> per_pair(q, 0);
  for (uint32_t i = 0; i < lanes_n_; ++i) {
    Lane& l = lanes_[i];
    l.thread = i % t;
    l.pair = i % q;
    l.slots = slots_;
    l.owner.reset(new uint32_t[slots_]());
    lanes_of_[l.thread].push_back(i);
    ++per_pair[l.pair];
  }
  // Target buffer: each pair's region (its lanes' slots, then its receive buffers).
  size_t off = 0;
  std::vector<uint32_t> seen(q, 0);
  pairs_.resize(q);
  for (uint32_t p = 0; p < q; ++p) {
    pairs_[p] = std::make_unique<PairState>();
    size_t region = off;
    for (uint32_t i = 0; i < lanes_n_; ++i)
      if (lanes_[i].pair == p)
        lanes_[i].target_off = region + size_t(seen[p]++) * slots_ * slot_bytes_;
    off = region + size_t(per_pair[p]) * slots_ * slot_bytes_;
    pairs_[p]->recv_off = off;
    if (o_.op == uctlite::Op::send) off += size_t(o_.rq_depth) * slot_bytes_;
  }
  target_bytes_ = off;
  for (uint32_t i = 0; i < lanes_n_; ++i) lanes_[i].source_off = size_t(i) * slots_ * slot_bytes_;
  source_bytes_ = size_t(lanes_n_) * slots_ * slot_bytes_;

  // Records are zero pages until touched: a --duration-ms run reserves far more than it uses.
  for (uint32_t i = 0; i < t; ++i)
    records_.emplace_back(static_cast<MsgRecord*>(std::calloc(capacity_, sizeof(MsgRecord))),
                          std::free);
  posted_upto_.reset(new std::atomic<uint64_t>[t]());
  posted_per_size_.assign(t, std::vector<uint64_t>(o_.sizes.size(), 0));
  tids_.assign(t, 0);
}

bool Run::attach(Fabric& f, uctlite::Worker& w, std::string* err) {
  for (auto& r : records_)
    if (!r) {
      *err = "out of memory for message records";
      return false;
    }
  source_ = f.source();
  target_ = f.target();
  lkey_ = f.source_lkey();
  rkey_ = f.target_rkey();
  target_lkey_ = f.target_lkey();
  for (size_t p = 0; p < pairs_.size(); ++p) {
    PairState& ps = *pairs_[p];
    ps.objs = f.pairs()[p];
    ps.ep = w.add_ep(ps.objs.initiator, ps.objs.initiator_cq, err);
    if (!ps.ep) return false;
    if (o_.op != uctlite::Op::send) continue;
    for (uint32_t b = 0; b < o_.rq_depth; ++b) {
      ibv_sge sge{reinterpret_cast<uintptr_t>(target_ + ps.recv_off + size_t(b) * slot_bytes_),
                  slot_bytes_, target_lkey_};
      ibv_recv_wr wr{};
      wr.wr_id = b;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      if (int rc = ibv_post_recv(ps.objs.target, &wr, &bad)) {
        *err = "ibv_post_recv: " + std::string(std::strerror(rc));
        return false;
      }
    }
  }
  return true;
}

Lane* Run::pick_lane(uint32_t t, uint64_t seq) {
  const std::vector<uint32_t>& mine = lanes_of_[t];
  for (size_t k = 0; k < mine.size(); ++k) {
    Lane& l = lanes_[mine[(seq + k) % mine.size()]];
    if (!pairs_[l.pair]->abandoned.load(std::memory_order_relaxed)) return &l;
  }
  return nullptr;
}

// The slot's previous message is done with it, or will never be: a completed one whose slot is
// still being checked is waited for (the check is running in the poller now); one with no
// completion yet is overwritten (on an RC QP it is lost: `slots` later messages went out after it).
void Run::claim_slot(Lane& l, uint32_t slot) {
  uint32_t prev = ref(l.owner[slot]).load(std::memory_order_acquire);
  if (!prev) return;
  MsgRecord& r = record(l.thread, prev - 1);
  if (ref(r.unposted).load(std::memory_order_relaxed)) return;
  if (ref(r.completions).load(std::memory_order_acquire) == 0) {
    c_.overwritten_uncompleted.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  while (!ref(r.settled).load(std::memory_order_acquire)) sched_yield();
}

void Run::abandon(PairState& ps) {
  if (!ps.abandoned.exchange(true)) c_.qps_abandoned.fetch_add(1);
}

void Run::poster(uint32_t t) {
  tids_[t] = static_cast<uint32_t>(syscall(SYS_gettid));
  if (o_.pin_block) pin_to_block(t, o_.threads);
  alignas(64) uint8_t inline_buf[kMaxMessage];
  bool write = o_.op == uctlite::Op::write;
  for (uint64_t seq = 0; seq < capacity_ && !stop_.load(std::memory_order_relaxed); ++seq) {
    Lane* l = pick_lane(t, seq);
    if (!l) break;  // every QP of this thread was given up
    PairState& ps = *pairs_[l->pair];
    uint32_t len = size_for(seq);
    uint32_t slot = static_cast<uint32_t>(l->next++ % l->slots);
    claim_slot(*l, slot);
    MsgRecord& r = record(t, seq);
    r.lane = static_cast<uint16_t>(l - lanes_.data());
    r.slot = static_cast<uint16_t>(slot);
    uctlite::PostArgs a;
    a.op = o_.op;
    a.length = len;
    a.inline_data = !o_.sge_only && len <= ps.ep->max_inline();
    uint8_t* payload =
        a.inline_data ? inline_buf : source_ + l->source_off + size_t(slot) * slot_bytes_;
    fill_message(payload, MessageId{t, static_cast<uint32_t>(seq)}, len);
    a.payload = payload;
    a.lkey = lkey_;
    if (write) {
      a.raddr = reinterpret_cast<uintptr_t>(target_ + l->target_off + size_t(slot) * slot_bytes_);
      a.rkey = rkey_;
    }
    a.wr_id = uint64_t(t) << 32 | seq;
    // Published before the post: a receiver may see the message before post() returns.
    ref(l->owner[slot]).store(static_cast<uint32_t>(seq + 1), std::memory_order_release);
    posted_upto_[t].store(seq + 1, std::memory_order_release);
    if (!post_one(ps, a)) {
      ref(r.unposted).store(1, std::memory_order_release);
      continue;
    }
    ++posted_per_size_[t][seq % o_.sizes.size()];
    progress(ps, false);
    if (o_.yield_every && (seq + 1) % o_.yield_every == 0) sched_yield();
  }
}

// Posts, waiting for room when the send queue is full. A QP in ERR still takes posts (they
// complete flushed), as a SINGLE worker goes on posting until it handles the error; a full queue
// on it ends that. Gives up on the QP when it went to ERR,
// when the device has taken everything the doorbell record names and yet no completion frees
// room (twice in a row: the software's count of free room and the device disagree for good, as
// after two threads raced on the producer index), or after --drain-ms without a completion.
bool Run::post_one(PairState& ps, const uctlite::PostArgs& a) {
  auto waiting_since = Clock::now();
  int idle_rounds = 0;
  // Completions polled by any thread sharing this QP count as progress: room freed by another
  // poller is room for us too (8 threads on one QP would otherwise give it up).
  uint64_t cqes_seen = ps.cqes.load(std::memory_order_relaxed);
  for (;;) {
    if (ps.abandoned.load(std::memory_order_relaxed)) return false;
    uctlite::PostStatus st = ps.ep->post(a);
    if (st == uctlite::PostStatus::ok) {
      ps.posted.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (st == uctlite::PostStatus::error) {
      c_.post_errors.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (ps.in_error.load()) {
      abandon(ps);
      return false;
    }
    std::optional<bool> idle = ps.ep->device_idle();
    if (progress(ps, true) || ps.cqes.load(std::memory_order_relaxed) != cqes_seen) {
      cqes_seen = ps.cqes.load(std::memory_order_relaxed);
      waiting_since = Clock::now();
      idle_rounds = 0;
      continue;
    }
    if (idle == true && ++idle_rounds >= 2) {
      abandon(ps);
      return false;
    }
    if (ms_since(waiting_since) > double(o_.drain_ms)) {
      abandon(ps);
      return false;
    }
    sched_yield();
  }
}

int Run::progress(PairState& ps, bool wait_for_lock) {
  std::unique_lock<std::mutex> lk(ps.poll_mu, std::defer_lock);
  if (wait_for_lock)
    lk.lock();
  else if (!lk.try_lock())
    return 0;
  uctlite::Completion cs[16];
  int n = ps.ep->poll(cs, 16);
  for (int i = 0; i < n; ++i) {
    ps.cqes.fetch_add(1, std::memory_order_relaxed);
    if (cs[i].status != IBV_WC_SUCCESS) ps.in_error.store(true);  // RC: the QP is in ERR now
    on_completion(cs[i]);
  }
  return n;
}

void Run::on_completion(const uctlite::Completion& c) {
  if (c.status == IBV_WC_SUCCESS)
    c_.ok.fetch_add(1, std::memory_order_relaxed);
  else
    c_.errors[std::min<uint32_t>(c.status, kStatusSlots - 1)].fetch_add(1,
                                                                        std::memory_order_relaxed);
  uint32_t t = static_cast<uint32_t>(c.wr_id >> 32);
  uint64_t seq = c.wr_id & 0xffffffffu;
  if (!c.matched || t >= o_.threads || seq >= posted_upto_[t].load(std::memory_order_acquire)) {
    c_.unmatched.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  MsgRecord& r = record(t, seq);
  if (ref(r.completions).fetch_add(1, std::memory_order_acq_rel) != 0) return;  // a duplicate
  if (c.status == IBV_WC_SUCCESS && o_.op == uctlite::Op::write)
    verify_write(MessageId{t, static_cast<uint32_t>(seq)}, r);
  ref(r.settled).store(1, std::memory_order_release);
}

int Run::receive_round() {
  int total = 0;
  for (auto& p : pairs_) {
    PairState& ps = *p;
    ibv_wc wc[16];
    int n = ibv_poll_cq(ps.objs.target_cq, 16, wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {  // flushed (the target went to ERR): not re-posted
        c_.recv_errors[std::min<uint32_t>(wc[i].status, kStatusSlots - 1)].fetch_add(1);
        continue;
      }
      c_.received.fetch_add(1, std::memory_order_relaxed);
      uint8_t* buf = target_ + ps.recv_off + size_t(wc[i].wr_id) * slot_bytes_;
      Check chk = check(buf, std::min(wc[i].byte_len, slot_bytes_), nullptr);
      if (wc[i].byte_len > slot_bytes_)
        chk.bytes += wc[i].byte_len - slot_bytes_, chk.corrupt = true;
      if (chk.corrupt) note_corrupt(chk, c_.found_at_receive);
      ibv_sge sge{reinterpret_cast<uintptr_t>(buf), slot_bytes_, target_lkey_};
      ibv_recv_wr wr{};
      wr.wr_id = wc[i].wr_id;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      ibv_post_recv(ps.objs.target, &wr, &bad);  // refused only in ERR, where nothing comes anyway
    }
    total += n > 0 ? n : 0;
  }
  return total;
}

void Run::receiver() {
  while (!recv_stop_.load(std::memory_order_acquire))
    if (!receive_round()) sched_yield();
  // The sends are drained: their receive completions were written before theirs.
  while (receive_round()) {
  }
}

// Polls every QP until it is done: every posted WQE completed (a device that cannot say more), or
// the device has taken everything its doorbell record names and a poll after that found nothing
// (emulated devices: the rest was lost). --drain-ms without any completion ends it regardless.
DrainResult Run::drain(const std::function<void()>& meanwhile) {
  DrainResult d;
  auto t0 = Clock::now(), last_progress = t0;
  std::vector<bool> done(pairs_.size(), false);
  for (size_t left = pairs_.size(), round = 0; left; ++round) {
    if (round % 64 == 0) meanwhile();
    bool progressed = false;
    for (size_t p = 0; p < pairs_.size(); ++p) {
      if (done[p]) continue;
      PairState& ps = *pairs_[p];
      std::optional<bool> idle = ps.ep->device_idle();
      int n = progress(ps, true);
      progressed = progressed || n > 0;
      bool finished = false;
      if (!idle.has_value() && ps.cqes.load() >= ps.posted.load()) {
        ++d.complete;
        finished = true;
      } else if (idle == true && n == 0) {
        if (ps.in_error.load())
          ++d.error_flushed;
        else if (ps.cqes.load() >= ps.posted.load())
          ++d.complete;
        else
          ++d.device_idle;
        finished = true;
      }
      if (finished) {
        if (ps.abandoned.load()) ++d.abandoned;
        done[p] = true;
        --left;
      }
    }
    if (!left) break;
    if (progressed) {
      last_progress = Clock::now();
    } else if (ms_since(last_progress) > double(o_.drain_ms)) {
      d.bound = static_cast<uint32_t>(left);
      break;
    }
    sched_yield();
  }
  d.ms = ms_since(t0);
  return d;
}

Tally Run::tally() const {
  Tally t;
  t.posted_per_size.assign(o_.sizes.size(), 0);
  for (uint32_t th = 0; th < o_.threads; ++th) {
    uint64_t n = posted_upto_[th].load();
    for (uint64_t s = 0; s < n; ++s) {
      MsgRecord r = records_[th].get()[s];
      if (r.unposted) {
        ++t.unposted;
        continue;
      }
      ++t.posted;
      if (r.completions == 0)
        ++t.missing;
      else if (r.completions == 1)
        ++t.once;
      else
        ++t.more_than_once, t.extra += r.completions - 1u;
    }
    for (size_t k = 0; k < o_.sizes.size(); ++k) t.posted_per_size[k] += posted_per_size_[th][k];
  }
  // With --count, messages a thread never got to (its QPs were given up) are not posted either.
  if (o_.count) t.unposted = o_.count * o_.threads - t.posted;
  return t;
}

}  // namespace stress
