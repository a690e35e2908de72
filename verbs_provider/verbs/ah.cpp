// SPDX-License-Identifier: BSD-2-Clause
// Address handles (the address vector a UD WQE carries, built once at ibv_create_ah) and
// multicast group membership of UD QPs.
#include <cerrno>
#include <cstring>

#include "av.h"
#include "forward.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace emu::prov {

// The address vector of an AH attribute; EINVAL for what the port cannot address.
int build_av(EmuContext* ctx, const ibv_ah_attr& a, AvSeg* av) {
  // The port exists, and a RoCE port (which routes by GID only) gets a GRH with a source GID.
  if (!av_valid_for_port(ctx->dev, a.port_num, a)) return EINVAL;
  std::memset(av, 0, sizeof *av);
  av->stat_rate_sl = a.sl & 0xf;
  av->fl_mlid = a.src_path_bits & 0x7f;
  av->rlid = be16(a.dlid);
  if (a.is_global) {
    av->grh_gid_fl = be32(kAvGrh | uint32_t(a.grh.sgid_index) << 20 | (a.grh.flow_label & 0xfffff));
    av->tclass = a.grh.traffic_class;
    av->hop_limit = a.grh.hop_limit;
    std::memcpy(av->rgid, a.grh.dgid.raw, 16);
  }
  return 0;
}

}  // namespace emu::prov

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_create_ah, "IBVERBS_1.1");
    return fn ? fn(pd, attr) : fail_null<ibv_ah>(EINVAL);
  }
  EmuContext* ctx = to_ctx(pd->context);
  AvSeg av;
  if (int e = build_av(ctx, *attr, &av)) return fail_null<ibv_ah>(e);
  if (ctx->n_ahs.fetch_add(1) >= Limits::max_ah) {  // the device's max_ah: out of resources
    ctx->n_ahs.fetch_sub(1);
    return fail_null<ibv_ah>(ENOMEM);
  }
  auto* ah = new (std::nothrow) EmuAh();
  if (!ah) {
    ctx->n_ahs.fetch_sub(1);
    return fail_null<ibv_ah>(ENOMEM);
  }
  ah->av = av;
  ah->port = attr->port_num;
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->ah.handle = 0;
  return &ah->ah;
}

int ibv_destroy_ah(ibv_ah* ah) {
  if (!is_emu(ah->context)) {
    auto fn = REAL(ibv_destroy_ah, "IBVERBS_1.1");
    return fn ? fn(ah) : EINVAL;
  }
  to_ctx(ah->context)->n_ahs.fetch_sub(1);
  delete to_ah(ah);
  return 0;
}

// Multicast: a UD QP joins a group (GID and LID); sends to the group's LID with the multicast QPN
// reach every member on the fabric (emu/device/engine_recv.cpp).
int ibv_attach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t lid) {
  if (!is_emu(ibqp->context)) {
    auto fn = REAL(ibv_attach_mcast, "IBVERBS_1.1");
    return fn ? fn(ibqp, gid, lid) : EINVAL;
  }
  EmuQp* qp = to_qp(ibqp);
  QpSlot& s = *qp->shm;
  if (ibqp->qp_type != IBV_QPT_UD) return EINVAL;  // only UD QPs join groups
  if (gid->raw[0] != 0xff) return EINVAL;          // not a multicast GID
  // A multicast LID on InfiniBand; RoCE has no LIDs (the GID names the group).
  const PortState& ps = segment()->hdr()->devices[qp->ctx->dev].ports[s.port ? s.port - 1 : 0];
  if (ps.link_layer != kLinkLayerEthernet && (lid < kMcastLidBase || lid == 0xffff)) return EINVAL;
  std::lock_guard<std::mutex> g(qp->ctx->mu);
  for (uint32_t i = 0; i < s.n_mcast; ++i)
    if (s.mcast[i].lid == lid && std::memcmp(s.mcast[i].gid, gid->raw, 16) == 0) return 0;
  if (s.n_mcast >= kMaxMcastPerQp) return ENOMEM;
  std::memcpy(s.mcast[s.n_mcast].gid, gid->raw, 16);
  s.mcast[s.n_mcast].lid = lid;
  std::atomic_thread_fence(std::memory_order_release);
  ++s.n_mcast;
  return 0;
}

int ibv_detach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t lid) {
  if (!is_emu(ibqp->context)) {
    auto fn = REAL(ibv_detach_mcast, "IBVERBS_1.1");
    return fn ? fn(ibqp, gid, lid) : EINVAL;
  }
  EmuQp* qp = to_qp(ibqp);
  QpSlot& s = *qp->shm;
  std::lock_guard<std::mutex> g(qp->ctx->mu);
  for (uint32_t i = 0; i < s.n_mcast; ++i) {
    if (s.mcast[i].lid != lid || std::memcmp(s.mcast[i].gid, gid->raw, 16) != 0) continue;
    // The last entry moves into the hole. A sender scanning meanwhile may miss or double a
    // delivery of a packet in flight, which a real fabric's join/leave does too.
    s.mcast[i] = s.mcast[s.n_mcast - 1];
    --s.n_mcast;
    return 0;
  }
  return EINVAL;  // not a member
}

}  // extern "C"
