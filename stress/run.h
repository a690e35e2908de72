// SPDX-License-Identifier: BSD-2-Clause
// One emu-stress run: the lanes, the posting threads, the receiver (SEND), the completion and
// corruption accounting, and the drain. The layout of memory is fixed before the fabric exists
// (Run's constructor), the rest once it does (attach).
//
// Lanes: for i < max(threads, qps), lane i is thread i % threads posting on QP i % qps. So threads
// > QPs share QPs and QPs > threads gives a thread several. Each lane has its own slots: in the
// target region of its QP (RDMA WRITE destinations) and in the source buffer (SGE payloads).
// Message (thread, seq) goes through the thread's lanes round robin, into slot k % slots of its
// lane (k: the lane's message counter); with --count the slots cover the whole run (no reuse, up
// to 4096 per lane).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fabric.h"
#include "message.h"
#include "options.h"
#include "uctlite.h"

namespace stress {

constexpr uint32_t kStatusSlots = 32;  // ibv_wc_status values are below this

struct Lane {
  uint32_t thread = 0;
  uint32_t pair = 0;
  uint32_t slots = 0;
  size_t target_off = 0;  // in the target buffer
  size_t source_off = 0;  // in the source buffer
  uint64_t next = 0;      // messages posted through this lane (its thread only)
  std::unique_ptr<uint32_t[]>
      owner;  // per slot: 1 + seq of the last message put there (atomic_ref)
};

// Per (thread, seq); fields shared between threads go through std::atomic_ref.
struct MsgRecord {
  uint8_t completions;  // CQEs that named it
  uint8_t settled;      // its first completion has been dealt with (slot checked, or an error)
  uint8_t unposted;     // never reached a send queue (QP given up, post error)
  uint8_t rsvd;
  uint16_t lane;
  uint16_t slot;
};

struct PairState {
  uctlite::Ep* ep = nullptr;
  QpPair objs;
  std::mutex poll_mu;                 // one poller of this QP's CQ at a time (see run.cpp)
  std::atomic<uint64_t> posted{0};    // WQEs accepted by post()
  std::atomic<uint64_t> cqes{0};      // completions polled (any status, matched or not)
  std::atomic<bool> in_error{false};  // an error completion came: an RC QP is in ERR
  std::atomic<bool> abandoned{false};
  size_t recv_off = 0;  // SEND: rq_depth receive buffers in the target buffer
};

struct Counters {
  std::atomic<uint64_t> ok{0}, unmatched{0}, post_errors{0};
  std::atomic<uint64_t> errors[kStatusSlots]{};
  std::atomic<uint64_t> corrupt_messages{0}, corrupt_bytes{0}, misplaced{0};
  std::atomic<uint64_t> verified{0}, unverifiable{0};
  std::atomic<uint64_t> found_at_completion{0}, found_at_receive{0}, found_in_sweep{0};
  std::atomic<uint64_t> overwritten_uncompleted{0}, delivered_without_completion{0};
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> recv_errors[kStatusSlots]{};
  std::atomic<uint64_t> qps_abandoned{0};
};

// Per-message completion outcome, tallied after the drain.
struct Tally {
  uint64_t posted = 0, unposted = 0, once = 0, more_than_once = 0, extra = 0, missing = 0;
  std::vector<uint64_t> posted_per_size;  // by index into Options::sizes
};

struct DrainResult {
  uint32_t complete = 0, device_idle = 0, error_flushed = 0, abandoned = 0, bound = 0;
  double ms = 0;
};

class Run {
 public:
  explicit Run(const Options& o);
  // Memory the fabric must register: sizes of the source and target buffers.
  size_t source_bytes() const { return source_bytes_; }
  size_t target_bytes() const { return target_bytes_; }
  // Endpoints for every pair, the receives posted (SEND). false with the reason in *err.
  bool attach(Fabric& f, uctlite::Worker& w, std::string* err);

  void poster(uint32_t thread);  // body of posting thread `thread`
  void receiver();               // body of the receiving thread (SEND)
  void stop_posting() { stop_.store(true); }
  void stop_receiving() { recv_stop_.store(true); }
  // After the posters are joined; between poll rounds, now and then, calls `meanwhile`.
  DrainResult drain(const std::function<void()>& meanwhile);
  void sweep();  // RDMA WRITE: slots whose message never completed
  Tally tally() const;

  const Options& opts() const { return o_; }
  const Counters& counters() const { return c_; }
  const std::vector<uint32_t>& tids() const { return tids_; }
  const std::vector<std::unique_ptr<PairState>>& pairs() const { return pairs_; }
  uint32_t slots_per_lane() const { return slots_; }

 private:
  struct Check {
    bool corrupt = false, misplaced = false, named_valid = false;
    uint32_t bytes = 0;
    MessageId named{};
  };
  uint32_t size_for(uint64_t seq) const { return o_.sizes[seq % o_.sizes.size()]; }
  bool plausible(const MessageHeader& h) const;
  Check check(const uint8_t* p, uint32_t n, const MessageId* expected) const;
  void note_corrupt(const Check& c, std::atomic<uint64_t>& where);
  Lane* pick_lane(uint32_t thread, uint64_t seq);
  void claim_slot(Lane& l, uint32_t slot);
  bool post_one(PairState& ps, const uctlite::PostArgs& a);
  int progress(PairState& ps, bool wait_for_lock);
  void on_completion(const uctlite::Completion& c);
  void verify_write(MessageId id, const MsgRecord& r);
  int receive_round();
  MsgRecord& record(uint32_t t, uint64_t seq) { return records_[t].get()[seq]; }
  void abandon(PairState& ps);

  Options o_;
  uint32_t lanes_n_ = 0, slots_ = 0, slot_bytes_ = 0;
  uint64_t capacity_ = 0;  // message records per thread
  size_t source_bytes_ = 0, target_bytes_ = 0;
  uint8_t* source_ = nullptr;
  uint8_t* target_ = nullptr;
  uint32_t lkey_ = 0, rkey_ = 0, target_lkey_ = 0;
  std::vector<Lane> lanes_;
  std::vector<std::vector<uint32_t>> lanes_of_;  // per thread: its lanes
  std::vector<std::unique_ptr<PairState>> pairs_;
  std::vector<std::unique_ptr<MsgRecord, void (*)(void*)>> records_;  // per thread, capacity_
  std::unique_ptr<std::atomic<uint64_t>[]> posted_upto_;  // per thread: seqs below are posted
  std::vector<std::vector<uint64_t>> posted_per_size_;    // per thread, by size index
  std::vector<uint32_t> tids_;
  std::atomic<bool> stop_{false}, recv_stop_{false};
  Counters c_;
};

}  // namespace stress
