// SPDX-License-Identifier: BSD-2-Clause
// The built-in scenarios: each known posting bug, named after its report, and its fix, over the
// messages and oracles of run_state.h.
#include <memory>
#include <mutex>

#include "emu/sched/visibility.h"
#include "run_state.h"
#include "scenario.h"

namespace race {
namespace {

using emu::sched::Actor;
using emu::sched::Scenario;
using emu::sched::StoreBuffers;
using emu::sched::Visibility;
using uctlite::MmioMode;
using uctlite::ThreadMode;

// `threads` threads, thread t posting one message of lens[t % 4] bytes on pairs[t % pairs.size()]
// through one worker.
Scenario uct_posters(Rig& rig, const std::vector<uint32_t>& pairs, uint32_t threads,
                     ThreadMode mode, MmioMode mmio) {
  static const uint32_t lens[4] = {35, 200, 120, 64};
  Shared s = start(rig, pairs);
  uctlite::WorkerConfig wc;
  wc.api = uctlite::Api::direct;
  wc.thread_mode = mode;
  wc.mmio = mmio;
  std::string err;
  s->worker = rig.worker(wc, pairs, &s->eps, &err);
  std::vector<Actor> actors;
  for (uint32_t t = 0; t < threads; ++t) {
    size_t ep = t % pairs.size();
    s->add(pairs[ep], lens[t % 4]);
    actors.push_back({"t" + std::to_string(t), [s, ep, t] { uct_post(s, ep, t); }});
  }
  return finish(s, std::move(actors));
}

std::vector<uint32_t> all_pairs() {
  std::vector<uint32_t> p;
  for (uint32_t i = 0; i < kRigQps; ++i) p.push_back(i);
  return p;
}

// ---- raw posters: the post path's steps in the order (and under the locks) a variant has ----

enum class Order { kWqeFirst, kDbrecFirst };

// WQE and record in `order`, then the 8-byte doorbell; the index read and moved on.
void raw_post_db(const Shared& s, size_t m, Order order) {
  const Msg& msg = s->msgs[m];
  RawQp& q = s->rig->raw(msg.pair);
  uint32_t pi = q.load_pi();
  uint32_t next = pi + RawQp::blocks_for(msg.len);
  uint64_t head;
  if (order == Order::kDbrecFirst) q.store_dbrec(next);
  q.write_wqe(pi, msg.fill, msg.len, s->rig->slot_addr(msg.pair, msg.slot), s->rig->rkey(), &head);
  if (order == Order::kWqeFirst) q.store_dbrec(next);
  s->ledger.post(msg.pair, pi & 0xffff);
  q.ring_db64(head);
  q.store_pi(next);
}

// db_lock mode: the register lock covers the WQE, record and doorbell; `index_locked` says whether
// it covers the index load and store too.
void raw_post_db_lock(const Shared& s, size_t m, bool index_locked) {
  const Msg& msg = s->msgs[m];
  RawQp& q = s->rig->raw(msg.pair);
  if (index_locked) q.reg->lock.lock();
  uint32_t pi = q.load_pi();
  if (!index_locked) q.reg->lock.lock();
  uint32_t next = pi + RawQp::blocks_for(msg.len);
  uint64_t head;
  q.write_wqe(pi, msg.fill, msg.len, s->rig->slot_addr(msg.pair, msg.slot), s->rig->rkey(), &head);
  q.store_dbrec(next);
  s->ledger.post(msg.pair, pi & 0xffff);
  q.ring_db64(head);
  if (!index_locked) q.reg->lock.unlock();
  q.store_pi(next);
  if (index_locked) q.reg->lock.unlock();
}

// BlueFlame under the register lock, the flush inside it or after the unlock.
void raw_post_bf(const Shared& s, size_t m, bool flush_inside) {
  const Msg& msg = s->msgs[m];
  RawQp& q = s->rig->raw(msg.pair);
  uint32_t pi = q.load_pi();
  uint64_t head;
  uint32_t bbs = q.write_wqe(pi, msg.fill, msg.len, s->rig->slot_addr(msg.pair, msg.slot),
                             s->rig->rkey(), &head);
  q.store_dbrec(pi + bbs);
  s->ledger.post(msg.pair, pi & 0xffff);
  q.reg->lock.lock();
  q.bf_copy(pi, bbs);
  if (flush_inside) RawQp::flush();
  q.reg->lock.unlock();
  if (!flush_inside) RawQp::flush();
  q.store_pi(pi + bbs);
}

// ---- the scenarios' factories ----

Scenario ucx_2464(Rig& rig, uint32_t threads, ThreadMode mode) {
  return uct_posters(rig, {0}, threads, mode, MmioMode::bf_post);
}

Scenario libxlio_123(Rig& rig, MmioMode mmio) {
  return uct_posters(rig, all_pairs(), kRigQps, ThreadMode::single, mmio);
}

// One thread posts two 64-byte WRITEs (two-block WQEs) through a SINGLE-mode endpoint, with or
// without the barrier between each WQE and its doorbell record, its stores buffered under
// `profile`: under weak the record may reach the device before the WQE it publishes; x86 keeps a
// thread's stores in order, so there the missing barrier does no harm.
Scenario missing_barrier(Rig& rig, bool fence, Visibility profile) {
  Shared s = start(rig, {0});
  uctlite::WorkerConfig wc;
  wc.api = uctlite::Api::direct;
  wc.thread_mode = ThreadMode::single;
  wc.mmio = MmioMode::bf_post;
  wc.dbrec_fence = fence;
  std::string err;
  s->worker = rig.worker(wc, s->pairs, &s->eps, &err);
  s->add(0, 64);
  s->add(0, 64);
  s->buffers = std::make_unique<StoreBuffers>(profile);
  Scenario sc;
  s->buffers->add_posters(sc, {{"t0", [s] {
                                  uct_post(s, 0, 0);
                                  uct_post(s, 0, 1);
                                }}});
  sc.actors.push_back(rig.device().actor());
  sc.final_check = [s] { return s->check(); };
  return sc;
}

// ucx 5034: two QPs on one register posted by BlueFlame without its lock, their doorbell records
// holding garbage until the first post.
Scenario ucx_5034(Rig& rig, bool fixed) {
  if (!fixed)
    for (uint32_t p : {0u, 16u}) rig.raw(p).q.dbrec[1] = 0x3412;
  return uct_posters(rig, {0, 16}, 2, ThreadMode::single,
                     fixed ? MmioMode::bf_post_mt : MmioMode::bf_post);
}

// QPs 0 and 16 share register 0; each thread posts twice on its own QP.
// Under a profile other than sc each thread's BlueFlame chunks wait in its write-combining
// buffer until its flush or a WC drain step: a flush after the unlock lets the next holder's
// chunks and this thread's reach the register in any order.
Scenario bf_flush(Rig& rig, bool inside, Visibility profile = Visibility::kSc) {
  Shared s = start(rig, {0, 16});
  std::vector<Actor> actors;
  for (uint32_t t = 0; t < 2; ++t) {
    size_t a = s->msgs.size();
    s->add(s->pairs[t], 64);
    s->add(s->pairs[t], 64);
    actors.push_back({"t" + std::to_string(t), [s, a, inside] {
                        raw_post_bf(s, a, inside);
                        raw_post_bf(s, a + 1, inside);
                      }});
  }
  if (profile == Visibility::kSc) return finish(s, std::move(actors));
  s->buffers = std::make_unique<StoreBuffers>(profile, /*write_combining=*/true);
  Scenario sc;
  s->buffers->add_posters(sc, std::move(actors));
  sc.actors.push_back(rig.device().actor());
  sc.final_check = [s] { return s->check(); };
  return sc;
}

Scenario dbrec_order(Rig& rig, Order order) {
  Shared s = start(rig, {0});
  s->add(0, 35);
  s->add(0, 35);
  return finish(s, {{"t0", [s, order] {
                       raw_post_db(s, 0, order);
                       raw_post_db(s, 1, order);
                     }}});
}

Scenario unlocked_pi(Rig& rig, bool index_locked) {
  Shared s = start(rig, {0});
  std::vector<Actor> actors;
  for (uint32_t t = 0; t < 2; ++t) {
    s->add(0, 35);
    actors.push_back(
        {"t" + std::to_string(t), [s, t, index_locked] { raw_post_db_lock(s, t, index_locked); }});
  }
  return finish(s, std::move(actors));
}

// ucx 10039: two WRITEs posted (and completed) before the run; two threads each take one
// completion from the CQ, without the worker lock or under it.
Scenario ucx_10039(Rig& rig, bool serialized) {
  Shared s = start(rig, {0});
  s->drain = false;
  for (size_t m = 0; m < 2; ++m) {
    s->add(0, 35);
    raw_post_db(s, m, Order::kWqeFirst);  // not an actor: the device executes it now
  }
  auto lock = std::make_shared<std::mutex>();
  std::vector<Actor> actors;
  for (uint32_t t = 0; t < 2; ++t)
    actors.push_back({"p" + std::to_string(t), [s, lock, serialized] {
                        std::unique_lock<std::mutex> g(*lock, std::defer_lock);
                        if (serialized) g.lock();
                        uint32_t index;
                        if (s->rig->raw(0).poll_one(&index)) s->ledger.complete(0, index);
                      }});
  return finish(s, std::move(actors));
}

const char* const kUcx2464 = "https://github.com/openucx/ucx/issues/2464";
const char* const kXlio123 = "https://github.com/Mellanox/libxlio/issues/123";
const char* const kMlx5Bf =
    "https://github.com/linux-rdma/rdma-core/blob/master/providers/mlx5/qp.c (mlx5_bf_copy, "
    "'the flush must be inside the lock')";
const char* const kMlx5Barrier =
    "https://github.com/linux-rdma/rdma-core/blob/master/util/udma_barrier.h "
    "(udma_to_device_barrier)";
const char* const kUcx10039 = "https://github.com/openucx/ucx/issues/10039";
const char* const kUcx5034 = "https://github.com/openucx/ucx/issues/5034";
const char* const kMlx5Order =
    "https://github.com/linux-rdma/rdma-core/blob/master/providers/mlx5/qp.c "
    "(udma_to_device_barrier "
    "before the doorbell record)";

std::vector<ScenarioDef> make_table() {
  const std::vector<uint32_t> shared_reg = {0, 16};
  return {
      {"ucx-2464-2t",
       "ucx#2464",
       kUcx2464,
       true,
       "ucx-2464-2t-serialized",
       {"race:bf_torn", "race:double_write"},
       {0},
       "two threads post through one SINGLE-mode endpoint by BlueFlame",
       [](Rig& r) { return ucx_2464(r, 2, ThreadMode::single); }},
      {"ucx-2464-2t-serialized",
       "fix of ucx-2464-2t",
       kUcx2464,
       false,
       "ucx-2464-2t",
       {},
       {0},
       "the worker lock around each post (SERIALIZED)",
       [](Rig& r) { return ucx_2464(r, 2, ThreadMode::serialized); }},
      {"ucx-2464-4t",
       "ucx#2464",
       kUcx2464,
       true,
       "ucx-2464-4t-serialized",
       {"race:bf_torn", "race:double_write"},
       {0},
       "four threads post through one SINGLE-mode endpoint by BlueFlame",
       [](Rig& r) { return ucx_2464(r, 4, ThreadMode::single); }},
      {"ucx-2464-4t-serialized",
       "fix of ucx-2464-4t",
       kUcx2464,
       false,
       "ucx-2464-4t",
       {},
       {0},
       "the worker lock around each post (SERIALIZED)",
       [](Rig& r) { return ucx_2464(r, 4, ThreadMode::serialized); }},
      {"libxlio-123",
       "libxlio#123",
       kXlio123,
       true,
       "libxlio-123-locked",
       {"race:bf_torn"},
       all_pairs(),
       "17 QPs over 16 registers, one thread each, BlueFlame without the register lock",
       [](Rig& r) { return libxlio_123(r, MmioMode::bf_post); }},
      {"libxlio-123-locked",
       "fix of libxlio-123",
       kXlio123,
       false,
       "libxlio-123",
       {},
       all_pairs(),
       "the register lock around the BlueFlame copy (bf_post_mt)",
       [](Rig& r) { return libxlio_123(r, MmioMode::bf_post_mt); }},
      {"bf-flush-outside-lock",
       "mlx5 provider",
       kMlx5Bf,
       true,
       "bf-flush-inside-lock",
       {"race:bf_torn"},
       shared_reg,
       "BlueFlame copy under the register lock, the flush after the unlock",
       [](Rig& r) { return bf_flush(r, false); }},
      {"bf-flush-inside-lock",
       "fix of bf-flush-outside-lock",
       kMlx5Bf,
       false,
       "bf-flush-outside-lock",
       {},
       shared_reg,
       "the flush before the unlock",
       [](Rig& r) { return bf_flush(r, true); }},
      {"bf-flush-outside-lock-x86",
       "mlx5 provider, write-combining",
       kMlx5Bf,
       true,
       "bf-flush-inside-lock-x86",
       {"race:bf_torn"},
       shared_reg,
       "the flush after the unlock on x86: chunks wait in each thread's write-combining buffer",
       [](Rig& r) { return bf_flush(r, false, Visibility::kX86); }},
      {"bf-flush-inside-lock-x86",
       "fix of bf-flush-outside-lock-x86",
       kMlx5Bf,
       false,
       "bf-flush-outside-lock-x86",
       {},
       shared_reg,
       "the flush before the unlock, on x86",
       [](Rig& r) { return bf_flush(r, true, Visibility::kX86); }},
      {"ucx-10039",
       "ucx#10039, libfabric#11665",
       kUcx10039,
       true,
       "ucx-10039-serialized",
       {"completion:twice"},
       {0},
       "a SINGLE-mode worker progressed by two threads",
       [](Rig& r) { return ucx_10039(r, false); }},
      {"ucx-10039-serialized",
       "fix of ucx-10039",
       kUcx10039,
       false,
       "ucx-10039",
       {},
       {0},
       "the worker lock around each poll",
       [](Rig& r) { return ucx_10039(r, true); }},
      {"ucx-5034",
       "ucx#5034",
       kUcx5034,
       true,
       "ucx-5034-fixed",
       {"race:bf_torn"},
       shared_reg,
       "BF_POST where BF_POST_MT was needed (two QPs, one register) and garbage doorbell records",
       [](Rig& r) { return ucx_5034(r, false); }},
      {"ucx-5034-fixed",
       "fix of ucx-5034",
       kUcx5034,
       false,
       "ucx-5034",
       {},
       shared_reg,
       "bf_post_mt and zeroed doorbell records",
       [](Rig& r) { return ucx_5034(r, true); }},
      {"dbrec-before-wqe",
       "mlx5 post order",
       kMlx5Order,
       true,
       "wqe-before-dbrec",
       {"race:stale_wqe", "race:dbrec_ahead"},
       {0},
       "the doorbell record stored before the WQE",
       [](Rig& r) { return dbrec_order(r, Order::kDbrecFirst); }},
      {"wqe-before-dbrec",
       "fix of dbrec-before-wqe",
       kMlx5Order,
       false,
       "dbrec-before-wqe",
       {},
       {0},
       "the WQE, then the record",
       [](Rig& r) { return dbrec_order(r, Order::kWqeFirst); }},
      {"missing-barrier",
       "udma_to_device_barrier",
       kMlx5Barrier,
       true,
       "barrier-weak",
       {"race:stale_wqe"},
       {0},
       "no barrier between the WQE and its doorbell record, on a weakly ordered CPU",
       [](Rig& r) { return missing_barrier(r, false, Visibility::kWeak); }},
      {"barrier-weak",
       "fix of missing-barrier",
       kMlx5Barrier,
       false,
       "missing-barrier",
       {},
       {0},
       "udma_to_device_barrier before the record, on the same weakly ordered CPU",
       [](Rig& r) { return missing_barrier(r, true, Visibility::kWeak); }},
      {"missing-barrier-x86",
       "missing-barrier on x86",
       kMlx5Barrier,
       false,
       "missing-barrier",
       {},
       {0},
       "the same poster on x86 (TSO): a thread's stores reach the device in program order",
       [](Rig& r) { return missing_barrier(r, false, Visibility::kX86); }},
      {"unlocked-pi",
       "db_lock producer index",
       kUcx2464,
       true,
       "locked-pi",
       {"race:double_write"},
       {0},
       "the producer index read and moved on outside the lock of the WQE and doorbell",
       [](Rig& r) { return unlocked_pi(r, false); }},
      {"locked-pi",
       "fix of unlocked-pi",
       kUcx2464,
       false,
       "unlocked-pi",
       {},
       {0},
       "the index under the lock",
       [](Rig& r) { return unlocked_pi(r, true); }},
  };
}

}  // namespace

const std::vector<ScenarioDef>& scenarios() {
  static const std::vector<ScenarioDef> table = make_table();
  return table;
}

const ScenarioDef* find_scenario(const std::string& name) {
  for (const ScenarioDef& d : scenarios())
    if (d.name == name) return &d;
  return nullptr;
}

emu::sched::ScenarioFactory factory_of(const ScenarioDef& def, Rig& rig) {
  return [&def, &rig] {
    std::string err;
    if (!rig.reset(def.pairs, &err)) {
      Scenario sc;
      sc.final_check = [err] { return "rig: " + err; };
      return sc;
    }
    return def.make(rig);
  };
}

}  // namespace race
