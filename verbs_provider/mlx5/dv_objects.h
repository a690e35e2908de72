// SPDX-License-Identifier: BSD-2-Clause
// An emulated device's objects in mlx5dv form, under the mlx5 personality
// (docs/design/mlx5-personality.md): the CQs and QPs mlx5dv_create_cq/_qp make, and what
// mlx5dv_init_obj tells of a QP, CQ, SRQ, AH, PD and device-memory block. The queues are emu's
// own, which already have mlx5's shapes (emu/wqe.h); the registers are the trapped pages in
// mlx5's layout (verbs/register_pages.h).
#pragma once
#include <infiniband/mlx5dv.h>

namespace emu::prov {

ibv_cq_ex* dv_create_cq(ibv_context* context, ibv_cq_init_attr_ex* cq_attr,
                        mlx5dv_cq_init_attr* mlx5_cq_attr);
ibv_qp* dv_create_qp(ibv_context* context, ibv_qp_init_attr_ex* qp_attr,
                     mlx5dv_qp_init_attr* mlx5_qp_attr);
// 0 or an errno, as libmlx5 answers (EINVAL for nothing asked, EOPNOTSUPP for a kind of object
// not handed out).
int dv_init_obj(mlx5dv_obj* obj, uint64_t types);

}  // namespace emu::prov
