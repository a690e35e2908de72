// SPDX-License-Identifier: BSD-2-Clause
// The verbs objects every emu-race scenario runs over, built once per process and reset before each
// scheduled run (a fabric per run would cost more than the run): 17 loopback RC pairs on emu0 (QP
// 16 rings the register of QP 0, EMU_UARS being 16), the device as an actor, the race collector,
// and the oracles a scenario's final check calls. Also the post and poll path split into its steps
// (RawQp), for the mutants whose bug is an order or a missing lock that uctlite does not have.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "emu/sched/device_actor.h"
#include "emu/sched/sched.h"
#include "emudv_link.h"
#include "fabric.h"
#include "races.h"
#include "uctlite.h"

namespace race {

constexpr uint32_t kRigQps = 17;
constexpr uint32_t kSlotBytes = 256;  // one message's place in the target buffer
constexpr uint32_t kSlotsPerQp = 16;
// RawQp's CQ consumer-index load and store (point kinds of the scenario's own).
constexpr uint16_t kPointCqIndexLoad = emu::sched::kPointUser + 1;
constexpr uint16_t kPointCqIndexStore = emu::sched::kPointUser + 2;

// A doorbell register as the mutants keep it: its lock and BlueFlame buffer toggle.
struct RawReg {
  emudv_uar uar{};
  emu::sched::Mutex lock{"register lock"};
  uint32_t bf_offset = 0;
};

// One QP's post and poll path, one step per call; each step is a scheduling point (the provider's
// own points, plus the index and CQ consumer-index points here).
struct RawQp {
  emudv_qp q{};
  emudv_cq cq{};
  RawReg* reg = nullptr;
  uint32_t pi = 0;  // the software producer index (blocks)
  uint32_t ci = 0;  // the CQ consumer index

  uint32_t load_pi();
  void store_pi(uint32_t v);
  // Builds an inline RDMA WRITE of `len` bytes of `fill` to `raddr` at ring position `pos` and
  // stores it; returns its blocks. *head: its control segment's first 8 bytes (the doorbell).
  uint32_t write_wqe(uint32_t pos, uint8_t fill, uint32_t len, uint64_t raddr, uint32_t rkey,
                     uint64_t* head);
  static uint32_t blocks_for(uint32_t len);  // the blocks write_wqe's WQE of `len` bytes takes
  void store_dbrec(uint32_t producer);
  void ring_db64(uint64_t head);
  void bf_copy(uint32_t pos, uint32_t bbs);  // the toggle read, the copy, the toggle store
  static void flush();
  // One CQE if there is one (its WQE index in *wqe_index): the consumer index load, the owner
  // check, the index store, each a point. false: the CQ was empty.
  bool poll_one(uint32_t* wqe_index);
};

// Each posted message and how often it completed: the exactly-once oracle.
struct Ledger {
  struct Entry {
    uint32_t qp;
    uint64_t key;  // RawQp: the WQE index; uctlite: the wr_id
    uint32_t completions = 0;
  };
  std::vector<Entry> posted;
  uint32_t unmatched = 0;
  void post(uint32_t qp, uint64_t key) { posted.push_back({qp, key, 0}); }
  void complete(uint32_t qp, uint64_t key);
  std::string check() const;  // "", "completion:unmatched", "completion:twice", "completion:lost"
};

class Rig {
 public:
  bool open(std::string* err);
  // Before a run over these pairs: reconnected, send rings, records and their target slots zeroed,
  // CQs drained, register toggles back to 0; a fresh device actor and race collector.
  bool reset(const std::vector<uint32_t>& pairs, std::string* err);

  stress::Fabric& fabric() { return fabric_; }
  emu::sched::DeviceActor& device() { return *device_; }
  RawQp& raw(uint32_t i) { return raw_[i]; }
  // A uctlite worker over these pairs (fresh per run; (*eps)[i] on pairs[i]).
  std::unique_ptr<uctlite::Worker> worker(const uctlite::WorkerConfig& wc,
                                          const std::vector<uint32_t>& pairs,
                                          std::vector<uctlite::Ep*>* eps, std::string* err);
  uint64_t slot_addr(uint32_t qp, uint32_t k) const;
  uint32_t rkey() const { return fabric_.target_rkey(); }

  // Oracles. The first race kind the device reported for this run ("race:<kind>"), else "".
  std::string race_signature();
  // "payload" unless target slot (qp, k) holds `len` bytes of `fill`.
  std::string payload_signature(uint32_t qp, uint32_t k, uint8_t fill, uint32_t len) const;
  // The device's race events of this run as text (for the report).
  std::vector<std::string> race_lines() const;

 private:
  stress::Fabric fabric_;
  std::unique_ptr<emu::sched::DeviceActor> device_;
  std::unique_ptr<stress::RaceCollector> races_;
  std::vector<std::unique_ptr<RawReg>> regs_;  // one per register the QPs ring
  RawQp raw_[kRigQps];
};

}  // namespace race
