// SPDX-License-Identifier: BSD-2-Clause
// Error injection's actions on live objects: an async event with the state change hardware makes
// with it, a QP to ERR, a CQ armed to overrun. Run by any attached process (emu-ctl, a harness, a
// test): events reach the owner through its pipe (emu/notify.h), state changes go through this
// process's engine as a device-side error would.
#include <atomic>

#include "device/engine.h"
#include "emu/control.h"
#include "emu/inject.h"
#include "emu/notify.h"
#include "emu/reclaim.h"

namespace emu {
namespace {

bool qp_event(uint32_t type) {
  switch (type) {
    case kEvQpFatal:
    case kEvQpReqErr:
    case kEvQpAccessErr:
    case kEvCommEst:
    case kEvSqDrained:
    case kEvPathMig:
    case kEvPathMigErr:
    case kEvLastWqe:
      return true;
    default:
      return false;
  }
}

bool port_event(uint32_t type) {
  switch (type) {
    case kEvPortActive:
    case kEvPortErr:
    case kEvLidChange:
    case kEvPkeyChange:
    case kEvSmChange:
    case kEvClientReregister:
    case kEvGidChange:
      return true;
    default:
      return false;
  }
}

CqSlot* live_cq(Header* h, uint32_t idx) {
  if (!cq_at(h, idx) || cq_at(h, idx)->state.load(std::memory_order_acquire) != kSlotLive)
    return nullptr;
  return &cq_slot(h, idx);
}

// An event with no object but the port or device, to every live context of `dev`.
void to_contexts(Segment* seg, uint32_t dev, uint64_t element, uint32_t type) {
  EngineSection in_engine(seg);  // a closing context waits for this before closing its pipe
  for (ContextSlot& c : seg->hdr()->ctxs) {
    if (c.state.load(std::memory_order_acquire) != kSlotLive || c.dev != dev) continue;
    if (std::atomic_ref<int32_t>(c.async_wfd).load(std::memory_order_acquire) < 0) continue;
    notify_async(c, element, type);
  }
}

Status qp_action(Segment* seg, uint32_t type, uint32_t qpn) {
  Engine* eng = Engine::process_engine();
  EngineSection in_engine(seg);
  QpSlot* qp = seg->find_qp(qpn);
  if (!qp) return Status::not_found;
  // The affiliated errors (IBTA 11.6.3.1) put the QP in ERR; whoever reads the event finds it so.
  if (type == kEvQpFatal || type == kEvQpReqErr || type == kEvQpAccessErr) eng->enter_error(*qp);
  eng->raise_qp_event(*qp, type);
  return Status::ok;
}

Status srq_action(Segment* seg, uint32_t type, uint32_t idx) {
  Header* h = seg->hdr();
  EngineSection in_engine(seg);
  if (!srq_at(h, idx) || srq_at(h, idx)->state.load(std::memory_order_acquire) != kSlotLive)
    return Status::not_found;
  SrqSlot& s = srq_slot(h, idx);
  // A limit event disarms the limit, as the device does when it fires one.
  if (type == kEvSrqLimit) s.limit.store(0, std::memory_order_release);
  if (s.ctx < kMaxContexts) notify_async(h->ctxs[s.ctx], s.uid, type);
  return Status::ok;
}

Status device_fatal(Segment* seg, uint32_t dev) {
  Header* h = seg->hdr();
  if (dev >= h->num_devices) return Status::not_found;
  Engine* eng = Engine::process_engine();
  {
    EngineSection in_engine(seg);
    each_qp(h, [&](QpSlot& q) {
      if (q.state.load(std::memory_order_acquire) == kSlotLive && q.dev == dev &&
          q.qp_state.load() != kQpsErr)
        eng->enter_error(q);
    });
  }
  to_contexts(seg, dev, 0, kEvDeviceFatal);
  return Status::ok;
}

}  // namespace

Status inject_event(Segment* seg, uint32_t type, uint32_t object, uint32_t port) {
  Header* h = seg->hdr();
  if (qp_event(type)) return qp_action(seg, type, object);
  if (type == kEvSrqErr || type == kEvSrqLimit) return srq_action(seg, type, object);
  if (type == kEvCqErr) {
    CqSlot* cq = live_cq(h, object);
    if (!cq) return Status::not_found;
    Engine::process_engine()->cq_error(*cq);
    return Status::ok;
  }
  if (type == kEvDeviceFatal) return device_fatal(seg, object);
  if (!port_event(type)) return Status::invalid;
  if (object >= h->num_devices || port < 1 || port > h->devices[object].num_ports)
    return Status::not_found;
  // A port going down or up changes its state (emu-ctl port): the event comes with it.
  if (type == kEvPortErr || type == kEvPortActive)
    return set_port_state(seg, object, port, type == kEvPortActive, nullptr);
  to_contexts(seg, object, port, type);
  return Status::ok;
}

Status inject_qp_error(Segment* seg, uint32_t qpn) { return qp_action(seg, kEvQpFatal, qpn); }

Status inject_cq_overrun(Segment* seg, uint32_t idx) {
  CqSlot* cq = live_cq(seg->hdr(), idx);
  if (!cq) return Status::not_found;
  uint32_t none = kCqOverrunNone;
  // A CQ already in error stays so; else its next CQE (whoever writes it) finds it full.
  cq->overrun.compare_exchange_strong(none, kCqOverrunArmed);
  return Status::ok;
}

}  // namespace emu
