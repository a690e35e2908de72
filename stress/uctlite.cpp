// SPDX-License-Identifier: BSD-2-Clause
// The parts of uctlite common to both APIs: names, the locks, the worker and its registers.
#include <sched.h>

#include <cstring>

#include "uctlite_internal.h"

namespace uctlite {

const char* api_name(Api a) { return a == Api::verbs ? "verbs" : "direct"; }
const char* mmio_name(MmioMode m) {
  switch (m) {
    case MmioMode::bf_post:
      return "bf_post";
    case MmioMode::bf_post_mt:
      return "bf_post_mt";
    case MmioMode::db_lock:
      return "db_lock";
  }
  return "?";
}
const char* thread_mode_name(ThreadMode t) {
  return t == ThreadMode::single ? "single" : "serialized";
}
const char* op_name(Op o) { return o == Op::write ? "write" : "send"; }

std::optional<Api> parse_api(const std::string& s) {
  if (s == "verbs") return Api::verbs;
  if (s == "direct") return Api::direct;
  return std::nullopt;
}
std::optional<MmioMode> parse_mmio(const std::string& s) {
  for (MmioMode m : {MmioMode::bf_post, MmioMode::bf_post_mt, MmioMode::db_lock})
    if (s == mmio_name(m)) return m;
  return std::nullopt;
}
std::optional<ThreadMode> parse_thread_mode(const std::string& s) {
  if (s == "single") return ThreadMode::single;
  if (s == "serialized") return ThreadMode::serialized;
  return std::nullopt;
}
std::optional<Op> parse_op(const std::string& s) {
  if (s == "write") return Op::write;
  if (s == "send") return Op::send;
  return std::nullopt;
}

void SpinLock::lock() {
  for (unsigned spins = 0;; ++spins) {
    if (!held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire))
      return;
    if (spins >= 64) sched_yield();  // the holder may be preempted on our core
  }
}

PostStatus Ep::post(const PostArgs& a) {
  if (!worker_lock_) return post_unlocked(a);
  std::lock_guard<std::mutex> g(*worker_lock_);
  return post_unlocked(a);
}

int Ep::poll(Completion* out, int max) {
  if (!worker_lock_) return poll_unlocked(out, max);
  std::lock_guard<std::mutex> g(*worker_lock_);
  return poll_unlocked(out, max);
}

std::optional<bool> emu_sq_idle(ibv_qp* qp, volatile uint32_t* dbrec) {
  const EmudvFns* dv = emudv_fns();
  uint32_t consumed = 0;
  int stalled = 0;
  if (!dv || !dbrec || dv->sq_device_state(qp, &consumed, &stalled) != 0) return std::nullopt;
  // The device keeps the furthest doorbell record it read: a record behind its consumer (two
  // threads stored it out of order) names nothing it has not taken either.
  uint32_t producer = __builtin_bswap32(dbrec[1]);
  return static_cast<int16_t>((producer - consumed) & 0xffff) <= 0 && !stalled;
}

std::unique_ptr<Worker> Worker::create(ibv_context* ctx, const WorkerConfig& cfg,
                                       std::string* err) {
  if (cfg.api == Api::direct && !emudv_fns()) {
    *err = "api direct needs the emulator's provider (run under emu-run): emudv_* not found";
    return nullptr;
  }
  return std::unique_ptr<Worker>(new Worker(ctx, cfg));
}

Worker::Worker(ibv_context* ctx, const WorkerConfig& cfg) : ctx_(ctx), cfg_(cfg) {}
Worker::~Worker() = default;

Worker::Register* Worker::register_for(const void* opaque, const void* uar) {
  for (auto& r : regs_)
    if (r->uar.opaque == opaque) return r.get();
  auto r = std::make_unique<Register>();
  std::memcpy(&r->uar, uar, sizeof r->uar);
  regs_.push_back(std::move(r));
  return regs_.back().get();
}

Ep* Worker::add_ep(ibv_qp* qp, ibv_cq* send_cq, std::string* err) {
  std::lock_guard<std::mutex> g(setup_mu_);
  std::mutex* wl = cfg_.thread_mode == ThreadMode::serialized ? &lock_ : nullptr;
  std::unique_ptr<Ep> ep;
  if (cfg_.api == Api::verbs) {
    ep = make_verbs_ep(qp, send_cq, wl, err);
  } else {
    const EmudvFns* dv = emudv_fns();
    emudv_qp dq;
    emudv_cq dc;
    if (dv->init_qp(qp, &dq) != 0 || dv->init_cq(send_cq, &dc) != 0) {
      *err = "api direct: the QP or CQ is not on an emulated device";
      return nullptr;
    }
    ep = make_direct_ep(qp, dq, dc, register_for(dq.uar.opaque, &dq.uar), cfg_.mmio,
                        cfg_.dbrec_fence, cfg_.plain_stores, wl);
  }
  if (!ep) return nullptr;
  eps_.push_back(std::move(ep));
  return eps_.back().get();
}

}  // namespace uctlite
