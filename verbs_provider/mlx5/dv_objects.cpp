// SPDX-License-Identifier: BSD-2-Clause
#include "dv_objects.h"

#include <cerrno>
#include <cstring>

#include "emu/config.h"
#include "emu/wqe.h"
#include "verbs/provider.h"
#include "verbs/register_pages.h"

namespace emu::prov {
namespace {

constexpr uint64_t kCqMasks = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE |
                              MLX5DV_CQ_INIT_ATTR_MASK_FLAGS | MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
// Scatter to CQE asked on or off: either way the device places payloads in the buffers (a CQ in
// mlx5 form never carries them, kCqFormatMlx5), which is what a consumer of either setting reads.
constexpr uint32_t kQpCreateFlags =
    MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE | MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE;
constexpr uint64_t kKnownObjects = MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_SRQ | MLX5DV_OBJ_RWQ |
                                   MLX5DV_OBJ_DM | MLX5DV_OBJ_AH | MLX5DV_OBJ_PD;

template <typename T>
T* fail(int err) {
  errno = err;
  return nullptr;
}

int init_qp(mlx5dv_qp& out, ibv_qp* ibqp) {
  EmuQp* qp = to_qp(ibqp);
  // A TGT QP has no queues of its own; a raw packet QP's are steered by rules mlx5dv does not
  // describe here.
  if (ibqp->qp_type == IBV_QPT_XRC_RECV || ibqp->qp_type == IBV_QPT_RAW_PACKET) return EOPNOTSUPP;
  uint8_t* bf = mlx5_bf_register(qp->ctx, qp->uar_idx);
  if (!bf) {
    log("mlx5dv_init_obj: no trapped register pages (EMU_MMIO=call?): QP 0x%x not handed out",
        ibqp->qp_num);
    return EOPNOTSUPP;
  }
  bool has_rq = !qp->srq && ibqp->qp_type != IBV_QPT_XRC_SEND;
  out.dbrec = reinterpret_cast<__be32*>(qp->dbrec);
  out.sq.buf = qp->sq;
  out.sq.wqe_cnt = qp->sq_bbs;
  out.sq.stride = kSendWqeBB;
  out.rq.buf = has_rq ? qp->rq : nullptr;
  out.rq.wqe_cnt = has_rq ? qp->rq_cnt : 0;
  out.rq.stride = has_rq ? qp->rq_stride : 0;
  out.bf.reg = bf;
  out.bf.size = kBfBufSize;
  out.comp_mask = 0;  // no UAR mmap offset (no device file to map it from), no raw handles
  return 0;
}

int init_cq(mlx5dv_cq& out, ibv_cq* ibcq) {
  EmuCq* cq = to_cq(ibcq);
  void* uar = mlx5_uar_page(to_ctx(ibcq->context), 0);
  if (!uar) return EOPNOTSUPP;
  out.buf = cq->ring;
  out.dbrec = reinterpret_cast<__be32*>(&cq->shm->ci);
  out.cqe_cnt = cq->shm->cqe_cnt;
  out.cqe_size = 1u << cq->log_entry;
  out.cq_uar = uar;
  out.cqn = cq->slot;
  out.comp_mask = 0;
  cq->dv_owned = true;
  return 0;
}

int init_srq(mlx5dv_srq& out, ibv_srq* ibsrq) {
  EmuSrq* srq = to_srq(ibsrq);
  out.buf = srq->buf;
  out.dbrec = reinterpret_cast<__be32*>(srq->dbrec);
  out.stride = srq->stride;
  out.head = srq->head;
  out.tail = srq->tail;
  uint64_t asked = out.comp_mask;
  out.comp_mask = 0;
  if (asked & MLX5DV_SRQ_MASK_SRQN) {
    out.srqn = srq->shm->srqn;
    out.comp_mask |= MLX5DV_SRQ_MASK_SRQN;
  }
  return 0;
}

int init_dm(mlx5dv_dm& out, ibv_dm* dm) {
  uint64_t asked = out.comp_mask;
  out.buf = dm_memory(dm, &out.length);
  out.comp_mask = 0;
  if (asked & MLX5DV_DM_MASK_REMOTE_VA) {
    out.remote_va = 0;  // MRs on device memory are zero based
    out.comp_mask |= MLX5DV_DM_MASK_REMOTE_VA;
  }
  return 0;
}

}  // namespace

ibv_cq_ex* dv_create_cq(ibv_context* context, ibv_cq_init_attr_ex* cq_attr,
                        mlx5dv_cq_init_attr* mlx5_cq_attr) {
  bool cqe128 = false;
  if (mlx5_cq_attr) {
    if (mlx5_cq_attr->comp_mask & ~kCqMasks) return fail<ibv_cq_ex>(EINVAL);
    // No CQE compression: EINVAL, libmlx5's answer for a device whose caps have none.
    if (mlx5_cq_attr->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE)
      return fail<ibv_cq_ex>(EINVAL);
    if (mlx5_cq_attr->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE) {
      if (mlx5_cq_attr->cqe_size != 64 && mlx5_cq_attr->cqe_size != 128)
        return fail<ibv_cq_ex>(EINVAL);
      cqe128 = mlx5_cq_attr->cqe_size == 128;
    }
    // Padding a 128-byte CQE to a cache line of 128: nothing to do here; with 64-byte CQEs it
    // means nothing, which libmlx5 refuses.
    if (mlx5_cq_attr->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_FLAGS) {
      if (mlx5_cq_attr->flags & ~uint32_t(MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD))
        return fail<ibv_cq_ex>(EINVAL);
      if ((mlx5_cq_attr->flags & MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD) && !cqe128)
        return fail<ibv_cq_ex>(EINVAL);
    }
  }
  return create_cq_ex_entries(context, cq_attr, cqe128);
}

ibv_qp* dv_create_qp(ibv_context* context, ibv_qp_init_attr_ex* qp_attr,
                     mlx5dv_qp_init_attr* mlx5_qp_attr) {
  uint64_t mask = mlx5_qp_attr ? mlx5_qp_attr->comp_mask : 0;
  if (mask &
      ~uint64_t(MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DC |
                MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS))
    return fail<ibv_qp>(EINVAL);
  // mlx5's own send operations (the mlx5dv_qp_ex builders) are not emulated; DCI streams are
  // EINVAL, as libmlx5 answers for a device whose caps have none.
  if (mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) return fail<ibv_qp>(EOPNOTSUPP);
  if (mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) return fail<ibv_qp>(EINVAL);
  // Create flags: the scatter-to-CQE pair, not both at once (EINVAL, as libmlx5).
  uint32_t flags =
      (mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) ? mlx5_qp_attr->create_flags : 0;
  if ((flags & ~kQpCreateFlags) || (flags & kQpCreateFlags) == kQpCreateFlags)
    return fail<ibv_qp>(EINVAL);
  bool dc = mask & MLX5DV_QP_INIT_ATTR_MASK_DC;
  // A driver QP is a DC one, and a DC QP is a driver one (libmlx5's rule).
  if (dc != (qp_attr->qp_type == IBV_QPT_DRIVER)) return fail<ibv_qp>(EINVAL);
  if (!dc) return ibv_create_qp_ex(context, qp_attr);
  const mlx5dv_dc_init_attr& d = mlx5_qp_attr->dc_init_attr;
  if (d.dc_type != MLX5DV_DCTYPE_DCT && d.dc_type != MLX5DV_DCTYPE_DCI) return fail<ibv_qp>(EINVAL);
  bool dct = d.dc_type == MLX5DV_DCTYPE_DCT;
  if (dct && !qp_attr->srq) return fail<ibv_qp>(EINVAL);  // a DCT receives into an SRQ
  // Made as an RC QP of the DC kind: a DCT has no send side, a DCI no receive side of its own.
  ibv_qp_init_attr_ex rc = *qp_attr;
  rc.qp_type = IBV_QPT_RC;
  if (dct) {
    rc.cap.max_send_wr = 0;
    rc.cap.max_send_sge = 0;
    rc.cap.max_inline_data = 0;
  }
  DcKind kind{uint8_t(dct ? kQptDct : kQptDci), dct ? d.dct_access_key : 0};
  ibv_qp* qp = create_qp_common(context, &rc, &kind);
  if (qp) qp_attr->cap = rc.cap;
  return qp;
}

int dv_init_obj(mlx5dv_obj* obj, uint64_t types) {
  if (!types) return EINVAL;
  if (types & ~kKnownObjects) return EOPNOTSUPP;
  if (types & MLX5DV_OBJ_QP)
    if (int err = init_qp(*obj->qp.out, obj->qp.in)) return err;
  if (types & MLX5DV_OBJ_CQ)
    if (int err = init_cq(*obj->cq.out, obj->cq.in)) return err;
  if (types & MLX5DV_OBJ_SRQ)
    if (int err = init_srq(*obj->srq.out, obj->srq.in)) return err;
  if (types & MLX5DV_OBJ_RWQ) return EOPNOTSUPP;  // no work queues in mlx5 form
  if (types & MLX5DV_OBJ_DM)
    if (int err = init_dm(*obj->dm.out, obj->dm.in)) return err;
  if (types & MLX5DV_OBJ_AH) {
    // emu's address vector has mlx5's layout (emu/wqe.h AvSeg = mlx5_wqe_av).
    static_assert(sizeof(AvSeg) == sizeof(mlx5_wqe_av));
    obj->ah.out->av = reinterpret_cast<mlx5_wqe_av*>(&to_ah(obj->ah.in)->av);
    obj->ah.out->comp_mask = 0;
  }
  if (types & MLX5DV_OBJ_PD) {
    obj->pd.out->pdn = to_pd(obj->pd.in)->slot;
    obj->pd.out->comp_mask = 0;
  }
  return 0;
}

}  // namespace emu::prov
